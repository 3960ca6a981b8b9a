"""The seed's cluster on a real API server: the seed's scenario (``scenario.Scenario``), played
by the same MCO actors against kube-apiserver and kube-controller-manager
(``controlplane.ControlPlane``).

What ``SimCluster`` writes into the simulator's store in-process, this harness creates through
the API as an administrator: the project's CRDs (``crds.py``), the MCO namespaces, the worker
pool with its MachineConfigs, the worker Nodes, DaemonSets and ReplicaSets with their pods
(valid objects: a real server validates and garbage-collects them). Each actor runs as a
service account of its own, bound to a ClusterRole of what it calls (``actorrbac``); the
real controller manager's garbage collector and disruption controller replace the simulator's.
There is no kubelet: ``podkubelet`` plays its end of a pod's deletion, the actors set
their pods' status. What happened is read from watches (``realobserver``: the Nodes'
cordons, the Builds' phases) and the actors' records, not from a write log.

Several clusters may share one control plane: each names its pool, MachineConfigs and Nodes
after ``pool`` and selects its Nodes by a label of that name.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar, Unpack

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.machineos import api_version
from drain_guard_sim.actors.mco import (
    GROUP_MCO,
    MCO_NAMESPACE,
    ROLE_LABEL,
    Actor,
    JsonObj,
    read_json,
)
from drain_guard_sim.actors.nodewriters import label_patch
from drain_guard_sim.apiserver.crds import custom_resource_definitions
from drain_guard_sim.harness.actorrbac import ACTOR_NAMESPACE, ACTOR_RULES
from drain_guard_sim.harness.controlplane import ControlPlane
from drain_guard_sim.harness.outcome import BuildResult
from drain_guard_sim.harness.podkubelet import PodKubelet
from drain_guard_sim.harness.realobserver import Observer
from drain_guard_sim.harness.scenario import Scenario, ScenarioOptions
from drain_guard_sim.harness.seedobjects import (
    DAEMONSETS,
    DEPLOYMENTS,
    NFD_LABEL,
    machine_os_build_result,
)

__all__ = ["RealCluster", "agent_user"]

MERGE = "application/merge-patch+json"
RBAC = "rbac.authorization.k8s.io"
T = TypeVar("T")


def agent_user(node: str) -> str:
    """The user name of ``node``'s agent on a real control plane."""
    return f"drain-guard-agent:{node}"


class RealCluster(Scenario):
    """The seed's cluster (``SimCluster``'s scenario) on ``plane``.

    ``pool`` names the pool (its Nodes are ``<pool>-0`` ...), so that clusters sharing a
    control plane never meet; the rest is ``SimCluster``'s (``ScenarioOptions``). Each node's
    agent is a user of its own (``agent_user``, so that its writes are its own in an audit
    log) with an administrator's rights: their own rights are proven by
    tests/controlplane/test_rights.py.
    """

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path | None = None,
        *,
        pool: str = "worker",
        **options: Unpack[ScenarioOptions],
    ) -> None:
        super().__init__(workdir, pool=pool, **options)
        self.plane = plane
        self._observer = Observer(
            plane.admin_kubeconfig, self.timeline, self.timings, pool, self.version
        )
        self._label_margin: float | None = None
        self._seeded = False  # objects made on the control plane (its Nodes, to delete)

    # -- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        await self._observer.start()
        await self._custom_resources()
        self._seeded = True
        await self._observer.watch()
        await self._namespaces()

    async def _close(self) -> None:
        # The Nodes go, so that no other client of a shared control plane (another test's
        # drain controller) acts on one left mid-drain; and MCO's cluster-scoped objects of
        # the pools, which every reader of the cluster sees (drain-guard preflight took a
        # MachineOSConfig left behind for on-cluster layering on). The namespaces, their pods
        # and the actors' accounts stay: named after the pool, or shared.
        if self._seeded:
            for name in self.all_nodes:
                with contextlib.suppress(ApiException):
                    await self._request("DELETE", f"/api/v1/nodes/{name}")
            await self._delete_pool_objects()
        await self._observer.stop()

    async def _delete_pool_objects(self) -> None:
        """Delete the MachineOSBuilds and MachineOSConfig of the pool (4.16+), the pools and
        their MachineConfigs, rendered or not: what the cluster and its actors made."""
        pools = [self.pool, *([self.master_pool] if self.master_names else [])]
        mco = f"/apis/{GROUP_MCO}"
        if self.version.gates_on_build:
            machine_os = f"{mco}/{api_version(self.version)}"
            builds = await self._request("GET", f"{machine_os}/machineosbuilds")
            for build in builds.get("items") or ():
                if build["spec"]["machineOSConfig"]["name"] == self.pool:
                    await self._delete(f"{machine_os}/machineosbuilds/{build['metadata']['name']}")
            await self._delete(f"{machine_os}/machineosconfigs/{self.pool}")
        for pool in pools:
            await self._delete(f"{mco}/v1/machineconfigpools/{pool}")
        configs = await self._request("GET", f"{mco}/v1/machineconfigs")
        for config in configs.get("items") or ():
            meta = config["metadata"]
            role = (meta.get("labels") or {}).get(ROLE_LABEL)
            if role in pools or any(meta["name"].startswith(f"rendered-{p}-") for p in pools):
                await self._delete(f"{mco}/v1/machineconfigs/{meta['name']}")

    async def _delete(self, path: str) -> None:
        """Delete, unless it is gone already (404)."""
        try:
            await self._request("DELETE", path)
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def _server_actors(self) -> list[Actor]:
        kubelet = await self._actor_kubeconfig("kubelet")
        return [PodKubelet(kubelet, self.timeline, self.timings, self.all_nodes)]

    # -- identities ------------------------------------------------------------------------

    @property
    def admin_kubeconfig(self) -> Path:
        return self.plane.admin_kubeconfig

    def agent_kubeconfig(self, node: str) -> Path:
        """A client certificate of ``agent_user(node)`` in ``system:masters`` (see the class)."""
        path = self.workdir / "kubeconfigs" / f"agent-{node}"
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.plane.user_kubeconfig(agent_user(node), ["system:masters"], path)

    async def _actor_kubeconfig(self, actor: str) -> Path:
        """A token kubeconfig for ``actor``'s service account, bound to its ACTOR_RULES (made
        once per control plane: a 409 means another cluster made it)."""
        role = f"drain-guard-sim:{actor}"
        rbac = f"/apis/{RBAC}/v1"
        await self._create(
            f"/api/v1/namespaces/{ACTOR_NAMESPACE}/serviceaccounts", {"metadata": {"name": actor}}
        )
        await self._create(
            f"{rbac}/clusterroles", {"metadata": {"name": role}, "rules": ACTOR_RULES[actor]}
        )
        await self._create(
            f"{rbac}/clusterrolebindings",
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": actor,
                              "namespace": ACTOR_NAMESPACE}],
            },
        )  # fmt: skip
        token = await self._request(
            "POST",
            f"/api/v1/namespaces/{ACTOR_NAMESPACE}/serviceaccounts/{actor}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        path = self.workdir / "kubeconfigs" / actor
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.plane.token_kubeconfig(token["status"]["token"], path)

    # -- seed state: through the API, as the administrator ----------------------------------

    async def _custom_resources(self) -> None:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for crd in custom_resource_definitions():
            await self._create(path, crd)
            name = crd["metadata"]["name"]
            await _until(functools.partial(self._established, f"{path}/{name}"))

    async def _established(self, path: str) -> bool:
        crd = await self._request("GET", path)
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    async def _namespaces(self) -> None:
        namespaces = {MCO_NAMESPACE} | {ns for ns, _ in DAEMONSETS} | {d[0] for d in DEPLOYMENTS}
        for ns in sorted(namespaces):
            await self._create("/api/v1/namespaces", {"metadata": {"name": ns}})
        for ns in sorted(namespaces):
            # ServiceAccount admission refuses pods until the controller made ``default``.
            account = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
            await _until(functools.partial(self._exists, account))
        # The account 4.15's build pods run as.
        await self._create(
            f"/api/v1/namespaces/{MCO_NAMESPACE}/serviceaccounts", {"metadata": {"name": "builder"}}
        )

    async def _delete_machine_config(self, name: str) -> None:
        await self._request("DELETE", f"/apis/{GROUP_MCO}/v1/machineconfigs/{name}")

    async def _create_machine_config(self, config: JsonObj) -> JsonObj:
        """Create ``config``; after ``lose_build_races``, another controller's label follows."""
        made = await self._create_mco("machineconfigs", config)
        if self._label_margin is not None:
            self._spawn(self._label_later(self._label_margin, made))
        return made

    async def _create_machine_os(self, plural: str, body: JsonObj, status: JsonObj) -> JsonObj:
        version = api_version(self.version)
        custom = self._observer.custom
        await read_json(
            await custom.create_cluster_custom_object(
                GROUP_MCO, version, plural, body, _preload_content=False
            )
        )
        made: JsonObj = await read_json(
            await custom.patch_cluster_custom_object_status(
                GROUP_MCO, version, plural, body["metadata"]["name"], {"status": status},
                _content_type=MERGE, _preload_content=False,
            )
        )  # fmt: skip
        return made

    async def _create_pool(self, pool: JsonObj, status: JsonObj) -> None:
        await self._create_mco("machineconfigpools", pool)
        await read_json(
            await self._observer.custom.patch_cluster_custom_object_status(
                GROUP_MCO, "v1", "machineconfigpools", self.pool, {"status": status},
                _content_type=MERGE, _preload_content=False,
            )
        )  # fmt: skip

    async def _create_node(self, node: JsonObj) -> None:
        await self._request("POST", "/api/v1/nodes", node)

    async def _create_owner(
        self, kind: str, namespace: str, name: str, labels: dict[str, str]
    ) -> JsonObj:
        """A DaemonSet or ReplicaSet (nothing runs them: no such controller here) to own the
        seed's pods, so that the garbage collector keeps them."""
        spec: JsonObj = {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "sim"}]},
            },
        }
        if kind == "ReplicaSet":
            spec["replicas"] = 1
        path = f"/apis/apps/v1/namespaces/{namespace}/{kind.lower()}s"
        await self._create(path, {"metadata": {"name": name}, "spec": spec})
        return await self._request("GET", f"{path}/{name}")

    async def _create_pod(self, pod: JsonObj) -> None:
        """Create ``pod``, then set its status (a real server ignores a new pod's)."""
        core = self._observer.core
        meta = pod["metadata"]
        await read_json(
            await core.create_namespaced_pod(meta["namespace"], pod, _preload_content=False)
        )
        await read_json(
            await core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": pod["status"]},
                _content_type=MERGE, _preload_content=False,
            )
        )  # fmt: skip

    async def _pool_machine_configs(self, pool: str | None = None) -> list[JsonObj]:
        listed = await read_json(
            await self._observer.custom.list_cluster_custom_object(
                GROUP_MCO, "v1", "machineconfigs",
                label_selector=f"{ROLE_LABEL}={pool or self.pool}",
                _preload_content=False,
            )
        )  # fmt: skip
        items: list[JsonObj] = listed["items"]
        return items

    async def _request(self, method: str, path: str, body: JsonObj | None = None) -> JsonObj:
        """One request as the administrator (the generated clients name no CRD, RBAC or
        TokenRequest call that takes a plain dict)."""
        resp = await self._observer.api.call_api(
            path, method, body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            auth_settings=["BearerToken"], _preload_content=False,
        )  # fmt: skip
        found: JsonObj = await read_json(resp)
        return found

    async def _create(self, path: str, body: JsonObj) -> None:
        """Create, unless another cluster on the same control plane did (409)."""
        try:
            await self._request("POST", path, body)
        except ApiException as exc:
            if exc.status != 409:
                raise

    async def _create_mco(self, plural: str, body: JsonObj) -> JsonObj:
        made: JsonObj = await read_json(
            await self._observer.custom.create_cluster_custom_object(
                GROUP_MCO, "v1", plural, body, _preload_content=False
            )
        )
        return made

    async def _exists(self, path: str) -> bool:
        try:
            await self._request("GET", path)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        return True

    # -- driving the scenario --------------------------------------------------------------

    def _label_after_each_machine_config(self, margin: float) -> None:
        self._label_margin = margin

    async def _label_later(self, margin: float, mc: JsonObj) -> None:
        await asyncio.sleep(self.timings.s(margin))
        value = f"5.14.0-284.{mc['metadata']['resourceVersion']}.el9_2"
        await read_json(
            await self._observer.core.patch_node(
                self.build_node, label_patch(NFD_LABEL, value),
                _content_type="application/strategic-merge-patch+json", _preload_content=False,
            )
        )  # fmt: skip
        self.timeline.add("node-feature-discovery", self.build_node, f"labelled {NFD_LABEL}")

    async def wait_for(self, predicate: Callable[[], T], timeout: float) -> T:  # noqa: ASYNC109
        """Until ``predicate()`` is truthy, checked on every watched change (and every 0.1 s:
        a reboot changes no object)."""
        async with asyncio.timeout(timeout):
            while not (found := predicate()):
                self._observer.changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await self._observer.changed.wait()
            return found

    def _nodes(self) -> list[JsonObj]:
        assert self._observer.nodes is not None
        return list(self._observer.nodes.cache.values())

    def _pool(self) -> JsonObj | None:
        assert self._observer.pools is not None
        return self._observer.pools.cache.get(self.pool)

    def _machine_os_config(self) -> JsonObj | None:
        assert self._observer.os_configs is not None
        return self._observer.os_configs.cache.get(self.pool)

    # -- outcome: from the watches and the drain controller's records ------------------------

    def _cordon_records(self) -> list[tuple[float, str, dict[str, str]]]:
        return self._observer.cordons

    def build_result(self) -> BuildResult | None:
        """The last build's outcome, from the Build watch; None before one ended."""
        if not self._observer.builds:
            return None
        name, started, end, finished = self._observer.builds[-1]
        if end is None:
            return None
        status = end.get("status") or {}
        phase, reason = machine_os_build_result(self.version, end) or ("", "")
        if not self.version.gates_on_build:
            phase, reason = str(status.get("phase")), str(status.get("reason", ""))
        return BuildResult(
            name=name,
            phase=phase,
            reason=reason,
            node=self.build_node,
            started=started,
            finished=finished,
        )

    def evictions(self) -> list[tuple[float, str, str]]:
        """The pods of this cluster's Nodes the drain controller evicted (eviction API)."""
        assert self.drain is not None
        return [
            (e.t, e.node, f"{e.namespace}/{e.name}")
            for e in self.drain.evictions
            if e.node in self.all_nodes
        ]


async def _until(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:  # noqa: ASYNC109
    """Until ``check()`` is true: what a controller of the control plane did shows only in
    what the API server holds."""
    async with asyncio.timeout(timeout):
        while True:
            if await check():
                return
            await asyncio.sleep(0.1)
