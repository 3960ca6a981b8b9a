"""How the seed's scenario writes its objects, whatever the server: the namespaces, the pools
and their MachineConfigs, the Nodes, DaemonSets and Deployments with their pods, MCO 4.16+'s
MachineOSConfig; the server says how it writes each kind (the abstract ``_create_*``)."""

from __future__ import annotations

import abc
from pathlib import Path

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.machineos import (
    CURRENT_BUILD_ANNOTATION,
    build_conditions,
    image_field,
    machine_os_build,
    machine_os_config,
)
from drain_guard_sim.actors.mco import (
    GROUP_MCO,
    LAYERING_LABEL,
    OCB_IMAGE_REPO,
    POOL_IMAGE,
    WORKER_LABEL,
    JsonObj,
    McoVersion,
)
from drain_guard_sim.actors.nodecontroller import rendered_name
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.harness.seedobjects import (
    BASE_CONFIGS,
    BASE_OS_IMAGE,
    CONTROL_PLANE_TAINT,
    DAEMONSETS,
    DEPLOYMENTS,
    EMPTY_CONFIG,
    cluster_label,
    machine_config,
    machine_config_object,
    owner_reference,
    pod_object,
    pool_label,
    suffix,
    updated_pool_status,
    worker_node,
)


class ScenarioSeeding(abc.ABC):
    """The seeding part of :class:`~drain_guard_sim.harness.scenario.Scenario` (which holds the
    state)."""

    workdir: Path
    pool: str
    node_names: list[str]
    master_pool: str
    master_names: list[str]
    master_config: str
    initial_config: str
    initial_image: str
    build_node: str
    version: McoVersion
    timeline: Timeline
    hosts: dict[str, HostFS]

    async def _seed_objects(self) -> None:
        """The cluster after "enable OCB and wait for the first build" (``SimCluster``)."""
        configs = [
            await self._create_machine_config(
                machine_config_object(base.replace("worker", self.pool), EMPTY_CONFIG, self.pool)
            )
            for base in BASE_CONFIGS
        ]
        self.initial_config = rendered_name(self.pool, configs)
        await self._create_machine_config(
            machine_config_object(self.initial_config, EMPTY_CONFIG, None)
        )
        layered = self.version.gates_on_build
        pool = {
            "apiVersion": f"{GROUP_MCO}/v1",
            "kind": "MachineConfigPool",
            "metadata": {
                "name": self.pool,
                "labels": {LAYERING_LABEL: ""},
                "annotations": {} if layered else {POOL_IMAGE: self.initial_image},
            },
            "spec": {
                "configuration": {"name": self.initial_config},
                "nodeSelector": {"matchLabels": {pool_label(self.pool): ""}},
                "maxUnavailable": 1,
            },
        }
        await self._create_pool(
            pool, updated_pool_status(self.initial_config, len(self.node_names), self.version)
        )
        if layered:
            await self._seed_machine_os()
        for name in self.node_names:
            node = worker_node(name, self.initial_config, self.initial_image)
            node["metadata"]["labels"][pool_label(self.pool)] = ""
            node["metadata"]["labels"][cluster_label(self.pool)] = ""
            await self._create_node(node)
            host = HostFS(self.workdir / "hosts" / name, self.initial_image)
            host.write_mcd_current_config(self.initial_config, self.initial_image)
            self.hosts[name] = host
        if self.master_names:
            await self._seed_masters()
        for ns, ds in DAEMONSETS:
            owner = owner_reference(await self._create_owner("DaemonSet", ns, ds, {"app": ds}))
            for node_name in self.all_nodes:
                name = f"{ds}-{suffix(ds, node_name)}"
                await self._create_pod(pod_object(ns, name, node_name, {"app": ds}, owner))
        for ns, deploy, labels in DEPLOYMENTS:
            rs = f"{deploy}-{suffix(deploy, self.pool, n=10)}"
            owner = owner_reference(await self._create_owner("ReplicaSet", ns, rs, labels))
            await self._create_pod(
                pod_object(ns, f"{rs}-{suffix(rs)}", self.build_node, labels, owner)
            )

    @property
    def all_nodes(self) -> list[str]:
        """The layered pool's Nodes, then the control-plane pool's."""
        return self.node_names + self.master_names

    async def _seed_masters(self) -> None:
        """The control-plane pool, without layering: its MachineConfigs, rendered config, pool
        and Nodes (tainted ``NoSchedule`` for control-plane nodes), booted into the base OS
        image, every config applied."""
        configs = [
            await self._create_machine_config(
                machine_config_object(base.replace("worker", self.master_pool), EMPTY_CONFIG,
                                self.master_pool)
            )
            for base in BASE_CONFIGS
        ]  # fmt: skip
        self.master_config = rendered_name(self.master_pool, configs)
        await self._create_machine_config(
            machine_config_object(self.master_config, EMPTY_CONFIG, None)
        )
        pool = {
            "apiVersion": f"{GROUP_MCO}/v1",
            "kind": "MachineConfigPool",
            "metadata": {"name": self.master_pool},
            "spec": {
                "configuration": {"name": self.master_config},
                "nodeSelector": {"matchLabels": {pool_label(self.master_pool): ""}},
                "maxUnavailable": 1,
            },
        }
        status = updated_pool_status(self.master_config, len(self.master_names), McoVersion.V4_16)
        await self._create_pool(pool, status)
        for name in self.master_names:
            node = worker_node(name, self.master_config, "")
            labels = node["metadata"]["labels"]
            labels.pop(WORKER_LABEL)
            labels |= {pool_label(self.master_pool): "", cluster_label(self.pool): ""}
            node["spec"]["taints"] = [dict(CONTROL_PLANE_TAINT)]
            await self._create_node(node)
            host = HostFS(self.workdir / "hosts" / name, BASE_OS_IMAGE)
            host.write_mcd_current_config(self.master_config, "")
            self.hosts[name] = host

    async def create_master_config(self, name: str) -> str:
        """``oc create`` a :func:`machine_config` for the control-plane pool; returns the
        config it renders to."""
        name = name.replace("master", self.master_pool)
        made = await self._create_machine_config(machine_config(name, pool=self.master_pool))
        self.timeline.add("user", None, f"oc create machineconfig {made['metadata']['name']}")
        return rendered_name(self.master_pool, await self._pool_machine_configs(self.master_pool))

    async def _seed_machine_os(self) -> None:
        """4.16+: the pool's MachineOSConfig and the MachineOSBuild of its first build, which
        succeeded with the image every node runs."""
        v, image = self.version, self.initial_image
        mosc = machine_os_config(v, self.pool, OCB_IMAGE_REPO)
        build = machine_os_build(v, self.pool, self.initial_config, mosc, OCB_IMAGE_REPO)
        if v.job_builds:
            mosc["metadata"]["annotations"] = {CURRENT_BUILD_ANNOTATION: build["metadata"]["name"]}
        config_field, build_field = image_field(v)
        mosc = await self._create_machine_os("machineosconfigs", mosc, {config_field: image})
        if v.job_builds:
            build["metadata"]["ownerReferences"][0]["uid"] = mosc["metadata"]["uid"]
        done = {"conditions": build_conditions("Succeeded", "2024-01-01T00:00:00Z"),
                build_field: image}  # fmt: skip
        await self._create_machine_os("machineosbuilds", build, done)

    @abc.abstractmethod
    async def _create_machine_os(self, plural: str, body: JsonObj, status: JsonObj) -> JsonObj:
        """Create a MachineOSConfig or MachineOSBuild (``plural``) with ``status``, at the
        API version of the cluster's MCO; the object created."""

    @abc.abstractmethod
    async def _create_machine_config(self, config: JsonObj) -> JsonObj:
        """Create a MachineConfig as the administrator; the object created."""

    @abc.abstractmethod
    async def _delete_machine_config(self, name: str) -> None:
        """Delete a MachineConfig as the administrator."""

    @abc.abstractmethod
    async def _create_pool(self, pool: JsonObj, status: JsonObj) -> None:
        """Create the MachineConfigPool ``pool`` with ``status``."""

    @abc.abstractmethod
    async def _create_node(self, node: JsonObj) -> None:
        """Create a Node."""

    @abc.abstractmethod
    async def _create_owner(
        self, kind: str, namespace: str, name: str, labels: dict[str, str]
    ) -> JsonObj:
        """The DaemonSet or ReplicaSet that owns the seed's pods (``kind``, ``metadata.name``
        and ``metadata.uid`` at least)."""

    @abc.abstractmethod
    async def _create_pod(self, pod: JsonObj) -> None:
        """Create ``pod`` as it is, its status too."""

    @abc.abstractmethod
    async def _pool_machine_configs(self, pool: str | None = None) -> list[JsonObj]:
        """``pool``'s MachineConfigs (its rendered config's inputs; default: the layered
        pool's)."""
