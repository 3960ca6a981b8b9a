"""The whole simulated cluster: API server, worker nodes with host trees, MCO actors, workloads.

``SimCluster`` is the seed's scenario (``scenario.Scenario``: what the seed report's cluster
had after "enable OCB and wait for the first build", and how it is driven) on the simulator:
it writes the seed's objects into the simulator's store in-process, its actors are MCO's users
(each talks to the simulator over HTTP with its own identity), and the test or demo reads the
outcome from the simulator's write log, the actors' records and the shared timeline.

Usage::

    async with SimCluster(tmp_path, time_factor=0.01) as cluster:
        await cluster.create_machine_config("99-worker-seed")
        build = await cluster.wait_build_done(timeout=30)
        print(cluster.outcome().render())
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, Unpack

from drain_guard_sim.actors.build import is_build_pod
from drain_guard_sim.actors.gc import GC_USER, GarbageCollector
from drain_guard_sim.actors.machineos import api_version
from drain_guard_sim.actors.mco import (
    BUILD_CONTROLLER_USER,
    BUILDER_USER,
    KCM_USER,
    MCC_USER,
    MCD_USER,
    MCO_NAMESPACE,
    ROLE_LABEL,
    Actor,
    JsonObj,
    annotations_of,
)
from drain_guard_sim.actors.nodewriters import NFD_USER, Kubelet, label_patch
from drain_guard_sim.apiserver.resources import RESOURCES, machine_os_resources
from drain_guard_sim.apiserver.server import SimApiServer, WriteRecord
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.outcome import BuildResult
from drain_guard_sim.harness.scenario import Scenario, ScenarioOptions
from drain_guard_sim.harness.seedobjects import NFD_LABEL, machine_os_build_result

__all__ = ["AGENT_USER", "NODE_NAME_EXTRA", "SimCluster"]

AGENT_USER = "system:serviceaccount:drain-guard:drain-guard"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
#: Who plays each of ``scenario.ACTOR_ROLES`` on the simulator: MCO's own users.
ACTOR_USERS = {
    "machine-config-daemon": MCD_USER,
    "machine-config-controller": MCC_USER,
    "machine-os-builder": BUILDER_USER,
    "build-controller": BUILD_CONTROLLER_USER,
    "replicaset-controller": KCM_USER,
}

T = TypeVar("T")


class SimCluster(Scenario):
    """A simulated OpenShift cluster with on-cluster layering enabled on ``worker``.

    ``version`` picks the MCO the actors play (4.15, the seed's, by default; 4.16 for 4.16 and
    4.17; 4.18); ``time_factor`` scales every MCO duration (0.01: a 10 s poll takes 0.1 s);
    ``build_node`` hosts the build pod and the machine-os-builder and registry pods
    (default: the first worker, the node the rollout targets first, as in the seed)
    (``ScenarioOptions``, with ``nodes`` and ``timings``);
    ``node_controller=False`` leaves the nodes' desired config and image to the caller;
    ``node_writers=True`` adds each node's kubelet status reports (``nodewriters``, at a
    phase drawn from ``seed``), which MCO 4.15's drain controller queues the node on;
    ``port`` and ``tls`` are the API server's (default: any free port, plain HTTP).
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        node_controller: bool = True,
        node_writers: bool = False,
        seed: int = 0,
        bookmark_interval: float = 1.0,
        port: int = 0,
        tls: ServingCert | None = None,
        **options: Unpack[ScenarioOptions],
    ) -> None:
        super().__init__(workdir, pool="worker", node_controller=node_controller, **options)
        self.with_node_writers = node_writers
        self.seed = seed
        self.kubelets: dict[str, Kubelet] = {}
        # 4.16+ serve MachineOSConfigs and MachineOSBuilds, at their MCO's API version.
        version = self.version
        resources = RESOURCES + (
            machine_os_resources(api_version(version)) if version.gates_on_build else ()
        )
        self.api = SimApiServer(
            bookmark_interval=bookmark_interval, port=port, tls=tls, resources=resources
        )
        self._agent_kubeconfigs: dict[str, Path] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        await super().start()
        if self.with_node_writers and self.node_controller is not None:
            # The node controller's UpdateInProgress taint: a Node writer like the kubelets.
            self.node_controller.taints_nodes = True

    async def _open(self) -> None:
        await self.api.start()

    async def _close(self) -> None:
        await self.api.stop()

    async def _server_actors(self) -> list[Actor]:
        tl, t = self.timeline, self.timings
        # Deletes the shield's budgets with their pods, as kube-controller-manager does.
        actors: list[Actor] = [GarbageCollector(self.kubeconfig(GC_USER), tl, t)]
        if self.with_node_writers:
            for name in self.node_names:
                self.api.add_node_user(name)
                kubelet = Kubelet(self.kubeconfig(f"system:node:{name}"), tl, t, name, self.seed)
                self.kubelets[name] = kubelet
                actors.append(kubelet)
        return actors

    # -- identities ------------------------------------------------------------------------

    def kubeconfig(self, user: str) -> Path:
        safe = user.replace(":", "_")
        return self.api.kubeconfig(user, self.workdir / "kubeconfigs" / safe)

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig("system:admin")

    def agent_kubeconfig(self, node: str) -> Path:
        """The agent's identity on ``node``: its ServiceAccount, bound to the node by the
        ``authentication.kubernetes.io/node-name`` extra of a node-bound token."""
        path = self._agent_kubeconfigs.get(node)
        if path is None:
            path = self.workdir / "kubeconfigs" / f"drain-guard-{node}"
            token = self.api.add_token(AGENT_USER, {NODE_NAME_EXTRA: [node]})
            self.api.kubeconfig(AGENT_USER, path, token=token)
            self._agent_kubeconfigs[node] = path
        return path

    async def _actor_kubeconfig(self, role: str) -> Path:
        return self.kubeconfig(ACTOR_USERS[role])

    # -- seed state: straight into the store -------------------------------------------------

    async def _delete_machine_config(self, name: str) -> None:
        self.api.delete("machineconfigs", name)

    async def _create_machine_config(self, config: JsonObj) -> JsonObj:
        return self.api.create("machineconfigs", config)

    async def _create_machine_os(self, plural: str, body: JsonObj, status: JsonObj) -> JsonObj:
        return self.api.create(plural, {**body, "status": status})

    async def _create_pool(self, pool: JsonObj, status: JsonObj) -> None:
        self.api.create("machineconfigpools", {**pool, "status": status})

    async def _create_node(self, node: JsonObj) -> None:
        self.api.create("nodes", node)

    async def _create_owner(
        self, kind: str, namespace: str, name: str, labels: dict[str, str]
    ) -> JsonObj:
        """A DaemonSet; a ReplicaSet only in name (the simulator serves none, and its garbage
        collector collects budgets only)."""
        if kind == "DaemonSet":
            body = {
                "apiVersion": "apps/v1",
                "kind": kind,
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": {"matchLabels": labels}},
            }
            return self.api.create("daemonsets", body)
        return {
            "kind": kind,
            "metadata": {
                "name": name,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}")),
            },
        }

    async def _create_pod(self, pod: JsonObj) -> None:
        self.api.create("pods", pod)

    async def _pool_machine_configs(self, pool: str | None = None) -> list[JsonObj]:
        return [
            m
            for m in self.api.list("machineconfigs")
            if (m["metadata"].get("labels") or {}).get(ROLE_LABEL) == (pool or self.pool)
        ]

    # -- driving the scenario --------------------------------------------------------------

    def _label_after_each_machine_config(self, margin: float) -> None:
        self._spawn(self._follow_machine_configs(margin, self.api.resource_version))

    async def _follow_machine_configs(self, margin: float, since: int) -> None:
        """Label ``build_node`` ``margin`` s after each MachineConfig a user creates (checked
        every 0.25 MCO s in the write log, so that it also follows ``kubectl create``)."""
        while True:
            await asyncio.sleep(self.timings.s(0.25))
            for record in self.api.writes("machineconfigs", verb="create", since=since):
                since = max(since, record.rv)
                if record.name.startswith("rendered-"):
                    continue
                await asyncio.sleep(self.timings.s(margin) - (time.monotonic() - record.time))
                self.label_node(self.build_node, NFD_LABEL, f"5.14.0-284.{record.rv}.el9_2")

    def label_node(self, node: str, key: str, value: str) -> None:
        """Another controller (node-feature-discovery) labels ``node``."""
        self.api.patch("nodes", node, label_patch(key, value), user=NFD_USER)
        self.timeline.add("node-feature-discovery", node, f"labelled {key}={value}")

    def restart_mcd(self, node: str, *, graceful: bool = False) -> None:
        self.machines[node].restart_daemon(graceful=graceful)

    async def wait_for(self, predicate: Callable[[], T], timeout: float) -> T:  # noqa: ASYNC109
        """Until ``predicate()`` is truthy, checked on every write."""
        return await self.api.wait_for(predicate, timeout)

    def _nodes(self) -> list[JsonObj]:
        return self.api.list("nodes")

    def _pool(self) -> JsonObj | None:
        return self.api.try_get("machineconfigpools", self.pool)

    def _machine_os_config(self) -> JsonObj | None:
        return self.api.try_get("machineosconfigs", self.pool)

    @property
    def build_resource(self) -> str:
        """Where the cluster's builds are: 4.15's Builds, 4.16+'s MachineOSBuilds."""
        return "machineosbuilds" if self.version.gates_on_build else "builds"

    # -- outcome: from the write log ---------------------------------------------------------

    def _since_start(self, monotonic: float) -> float:
        return self.timeline.since_start(monotonic)

    def build_result(self) -> BuildResult | None:
        """The (last) build's outcome from the write log; None before any build ended."""
        created: WriteRecord | None = None
        result: BuildResult | None = None
        for rec in self.api.writes(self.build_resource):
            if rec.verb == "create":
                created = rec
                result = None
            ended = self._build_end(rec.after or {})
            if created is not None and ended is not None and result is None:
                result = BuildResult(
                    name=rec.name,
                    phase=ended[0],
                    reason=ended[1],
                    node=self._build_pod_node(created.time),
                    started=self._since_start(created.time),
                    finished=self._since_start(rec.time),
                )
        return result

    def _build_end(self, build: JsonObj) -> tuple[str, str] | None:
        if self.version.gates_on_build:
            return machine_os_build_result(self.version, build)
        status = build.get("status") or {}
        phase = status.get("phase")
        if phase in ("Complete", "Failed", "Error", "Cancelled"):
            return str(phase), str(status.get("reason", ""))
        return None

    def _build_pod_node(self, since: float) -> str | None:
        """The node of the first build pod created after the build (at ``since``)."""
        for rec in self.api.writes("pods", verb="create"):
            if rec.subresource or rec.time < since or not is_build_pod(rec.after or {}):
                continue
            return str((rec.after or {}).get("spec", {}).get("nodeName"))
        return None

    def _cordon_records(self) -> list[tuple[float, str, dict[str, str]]]:
        """Every time the MCC set ``spec.unschedulable``, from the write log."""
        out = []
        for rec in self.api.writes("nodes", user=MCC_USER):
            before = ((rec.before or {}).get("spec") or {}).get("unschedulable", False)
            after = ((rec.after or {}).get("spec") or {}).get("unschedulable", False)
            if after and not before:
                out.append((self._since_start(rec.time), rec.name, annotations_of(rec.after or {})))
        return out

    def evictions(self) -> list[tuple[float, str, str]]:
        """Pods evicted (eviction subresource) by the MCC, from the write log."""
        out = []
        for rec in self.api.writes("pods", user=MCC_USER):
            if rec.subresource == "eviction" or rec.verb == "delete":
                pod = rec.before or rec.obj
                node = str((pod.get("spec") or {}).get("nodeName", ""))
                out.append((self._since_start(rec.time), node, f"{rec.namespace}/{rec.name}"))
        return out

    def pods_on(self, node: str, label_selector: str | None = None) -> list[JsonObj]:
        return self.api.list(
            "pods", label_selector=label_selector, field_selector=f"spec.nodeName={node}"
        )

    def build_pods(self) -> list[JsonObj]:
        return [p for p in self.api.list("pods", MCO_NAMESPACE) if is_build_pod(p)]
