"""The seed's scenario, written once for both servers: ``Scenario`` is the cluster, its objects,
its actors, how a test drives it and what happened; ``SimCluster`` (the simulator) and
``RealCluster`` (the real control plane) say only how their server starts, writes, names the
actors and reads back.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import hashlib
import itertools
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypedDict, TypeVar

from drain_guard_sim.actors.build import MachineOSBuilder, built_image
from drain_guard_sim.actors.buildrunner import OpenShiftBuildController
from drain_guard_sim.actors.drain import DrainController
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.machineos import (
    CURRENT_BUILD_ANNOTATION,
    build_conditions,
    build_state,
    config_image,
    image_field,
    machine_os_build,
    machine_os_config,
)
from drain_guard_sim.actors.mcd import UpdateRecord
from drain_guard_sim.actors.mco import (
    CONTROL_PLANE_TOPOLOGY,
    CURRENT_CONFIG,
    CURRENT_IMAGE,
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    GROUP_MCO,
    LAST_APPLIED_DRAIN,
    LAYERING_LABEL,
    MCO_NAMESPACE,
    OCB_IMAGE_REPO,
    POOL_IMAGE,
    REASON,
    REGISTRY_NAMESPACE,
    ROLE_LABEL,
    STATE,
    STATE_DONE,
    WORKER_LABEL,
    Actor,
    JsonObj,
    McoVersion,
    Timings,
    annotations_of,
    condition_true,
    read_json,
)
from drain_guard_sim.actors.nodecontroller import NodeController, rendered_name
from drain_guard_sim.actors.nodemachine import NodeMachine
from drain_guard_sim.actors.osbuilder import MachineOSBuildController
from drain_guard_sim.actors.timeline import Timeline

__all__ = [
    "ACTOR_ROLES",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "NFD_LABEL",
    "BuildResult",
    "Cordon",
    "Outcome",
    "ReplicaSetController",
    "Scenario",
    "ScenarioOptions",
    "machine_config",
    "pool_label",
    "worker_node",
]


INITIAL_IMAGE = (
    f"{OCB_IMAGE_REPO}@sha256:6498f333a29f6d3943e852b039e77d894e47ee29b0212af38cf120ca7c4b85ce"
)
BASE_CONFIGS = ("00-worker", "01-worker-container-runtime", "01-worker-kubelet")
DAEMONSETS = (
    (MCO_NAMESPACE, "machine-config-daemon"),
    ("openshift-dns", "dns-default"),
    ("openshift-dns", "node-resolver"),
    ("openshift-image-registry", "node-ca"),
    ("openshift-monitoring", "node-exporter"),
    ("openshift-multus", "multus"),
    ("openshift-cluster-node-tuning-operator", "tuned"),
)
# (namespace, deployment, labels): the pods the seed's drain evicted besides the build pod.
DEPLOYMENTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    (MCO_NAMESPACE, "machine-os-builder", {"k8s-app": "machine-os-builder"}),
    (REGISTRY_NAMESPACE, "image-registry", {"docker-registry": "default"}),
    ("openshift-monitoring", "openshift-state-metrics", {"k8s-app": "openshift-state-metrics"}),
)
READY = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
#: The seed's losing order (``SimCluster.lose_build_races``), in MCO seconds: a label written
#: this long after the MachineConfig queues the node controller's sync 5 s later, i.e. this
#: long after the render's write (5 s after the MachineConfig), and each of the build's two
#: ConfigMap creates takes this long, so the build is marked pending 2 x this after the
#: render: the sync lands in the middle of the window, this far from either end.
RACE_MARGIN = 2.0
#: How long (MCO seconds) a build arranged to lose waits at most for the node controller's
#: target before it is marked pending anyway (a node controller that targets nothing, such as
#: a paused pool's, does not stall the build).
RACE_WAIT = 120.0
NFD_LABEL = "feature.node.kubernetes.io/kernel-version.full"
T = TypeVar("T")


def updated_pool_status(config: str, machines: int, version: McoVersion) -> JsonObj:
    """A layered pool's status with every machine on ``config`` and its build succeeded: the
    state each scenario starts from (4.15's build conditions are the pool's; 4.16+'s are
    the MachineOSBuild's)."""
    builds = [
        {"type": "BuildSuccess", "status": "True", "reason": "BuildSucceeded"},
        {"type": "Building", "status": "False"},
        {"type": "BuildPending", "status": "False"},
        {"type": "BuildFailed", "status": "False"},
    ]
    return {
        "configuration": {"name": config},
        "machineCount": machines,
        "updatedMachineCount": machines,
        "readyMachineCount": machines,
        "degradedMachineCount": 0,
        "conditions": [
            *([] if version.gates_on_build else builds),
            {"type": "Updated", "status": "True"},
        ],
    }


def machine_os_build_result(version: McoVersion, build: JsonObj) -> tuple[str, str] | None:
    """A 4.16+ MachineOSBuild's end as :class:`BuildResult` names it (phase, reason), as the
    4.15 Build's would read: Complete; Error, BuildPodDeleted (its pod deleted); Failed,
    BackoffLimitExceeded (4.18+: its Job's fourth pod lost). None before it ended."""
    state = build_state(build)
    if state == "Succeeded":
        return "Complete", ""
    if state in ("Failed", "Interrupted"):
        return ("Failed", "BackoffLimitExceeded") if version.job_builds else (
            "Error", "BuildPodDeleted")  # fmt: skip
    return None


def _suffix(*parts: str, n: int = 5) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class BuildResult:
    """How the build ended, as ``oc get build`` shows it (phase and reason)."""

    name: str
    phase: str
    reason: str
    node: str | None
    started: float
    finished: float

    @property
    def succeeded(self) -> bool:
        return self.phase == "Complete"


@dataclass(frozen=True)
class Cordon:
    """The MCC cordoned a node: when, for which request, and what the node said then."""

    node: str
    t: float
    desired_drain: str
    desired_image: str
    current_image: str
    update: UpdateRecord | None  # the MCD update that asked for it (its planned transition)

    @property
    def unchanged_image(self) -> bool:
        """The node's desired image equals its booted one: a pointless drain (a node of a pool
        without layering has no image: its drains are for its configs)."""
        return bool(self.desired_image) and self.desired_image == self.current_image


@dataclass
class Outcome:
    """What happened, reconstructed from the simulator's write log and the actors' records."""

    build: BuildResult | None
    cordons: list[Cordon]
    evictions: list[tuple[float, str, str]]  # (t, node, namespace/name)
    updates: list[UpdateRecord]
    reboots: dict[str, int]

    def during_build(self) -> list[Cordon]:
        b = self.build
        if b is None:
            return []
        return [c for c in self.cordons if b.started <= c.t <= b.finished]

    def after_build(self) -> list[Cordon]:
        b = self.build
        return [c for c in self.cordons if b is None or c.t > b.finished]

    def unchanged_image_cordons(self) -> list[Cordon]:
        return [c for c in self.cordons if c.unchanged_image]

    def build_pods_evicted(self) -> list[str]:
        """The build pods (``namespace/name``) the drain controller evicted."""
        return [p for _, _, p in self.evictions if p.startswith(f"{MCO_NAMESPACE}/build-")]

    def build_pod_evicted(self) -> bool:
        return bool(self.build_pods_evicted())


class ReplicaSetController(Actor):
    """kube-controller-manager's ReplicaSet controller (and the kubelet) in miniature.

    A deleted ReplicaSet-owned pod comes back, Running, on a schedulable node, preferably
    another one: what happens to the image registry or machine-os-builder when drained.
    """

    actor_name = "replicaset-controller"

    def __init__(self, kubeconfig: Path, timeline: Timeline, timings: Timings) -> None:
        super().__init__(kubeconfig, timeline, timings)
        self.nodes: Informer | None = None
        self.pods: Informer | None = None
        self._serial = itertools.count()

    async def started(self) -> None:
        self.nodes = Informer(self.core.list_node)
        self.pods = Informer(self.core.list_pod_for_all_namespaces, self._on_pod)
        for inf, name in ((self.nodes, "nodes"), (self.pods, "pods")):
            self.spawn(inf.run(), f"rs-{name}")
            await inf.synced.wait()

    def _on_pod(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        owners = obj["metadata"].get("ownerReferences") or []
        if etype == "DELETED" and any(o.get("kind") == "ReplicaSet" for o in owners):
            self.spawn(self._replace(obj), f"rs-replace-{obj['metadata']['name']}")

    async def _replace(self, old: JsonObj) -> None:
        assert self.nodes is not None
        await asyncio.sleep(self.timings.s(self.timings.replicaset_delay))
        old_node = old["spec"].get("nodeName")
        schedulable = sorted(
            name
            for name, n in self.nodes.cache.items()
            if not (n.get("spec") or {}).get("unschedulable")
        )
        if not schedulable:
            return
        node = next((n for n in schedulable if n != old_node), schedulable[0])
        # The old pod's owner, uid and all: a real garbage collector deletes a pod whose owner
        # reference names no object.
        owner_ref = old["metadata"]["ownerReferences"][0]
        owner = owner_ref["name"]
        ns = old["metadata"]["namespace"]
        name = f"{owner}-{_suffix(owner, str(next(self._serial)), node)}"
        pod = _pod(ns, name, node, old["metadata"].get("labels") or {}, owner_ref)
        await read_json(await self.core.create_namespaced_pod(ns, pod, _preload_content=False))
        await read_json(
            await self.core.patch_namespaced_pod_status(
                name,
                ns,
                {"status": {"phase": "Running", "conditions": READY}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )
        self.log(node, f"ReplicaSet {ns}/{owner}: created pod {name} on {node}")


def _owner_reference(owner: JsonObj) -> JsonObj:
    """The controller reference to ``owner`` (a DaemonSet or ReplicaSet) its pods carry."""
    meta = owner["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def _pod(ns: str, name: str, node: str, labels: dict[str, str], owner: JsonObj) -> JsonObj:
    """A Running pod on ``node`` controlled by ``owner`` (an owner reference)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": dict(labels),
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "sim"}]},
        "status": {"phase": "Running", "conditions": READY},
    }


def worker_node(name: str, cfg: str, image: str) -> JsonObj:
    """An idle, layered worker Node booted into ``image`` with ``cfg`` applied, as after a
    finished update: the one Node the simulator, the tests and the benchmarks start from."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                WORKER_LABEL: "",
            },
            "annotations": {
                CURRENT_CONFIG: cfg,
                DESIRED_CONFIG: cfg,
                CURRENT_IMAGE: image,
                DESIRED_IMAGE: image,
                STATE: STATE_DONE,
                REASON: "",
                DESIRED_DRAIN: f"uncordon-{cfg}",
                LAST_APPLIED_DRAIN: f"uncordon-{cfg}",
                CONTROL_PLANE_TOPOLOGY: "HighlyAvailable",
            },
        },
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {
                "osImage": "Red Hat Enterprise Linux CoreOS 415.92",
                "kubeletVersion": "v1.28.7",
            },
        },
    }


def machine_config(
    name: str, kernel_arguments: tuple[str, ...] = (), *, pool: str = "worker"
) -> JsonObj:
    """A MachineConfig for ``pool`` that writes one file (``/etc/<name>``);
    ``kernel_arguments`` adds those, which MCO 4.15's layered update never applies (the node
    then fails its boot-time validation and stays Degraded: the rollout stops there)."""
    spec: JsonObj = {
        "config": {
            "ignition": {"version": "3.4.0"},
            "storage": {
                "files": [
                    {
                        "path": f"/etc/{name}",
                        "mode": 420,
                        "contents": {"source": f"data:,{name}"},
                    }
                ]
            },
        }
    }
    if kernel_arguments:
        spec["kernelArguments"] = list(kernel_arguments)
    return _machine_config(name, spec, pool)


def _machine_config(name: str, spec: JsonObj, pool: str | None) -> JsonObj:
    """A MachineConfig, an input of ``pool``'s rendered config (None: none's, a rendered one)."""
    return {
        "apiVersion": f"{GROUP_MCO}/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {ROLE_LABEL: pool} if pool else {}},
        "spec": spec,
    }


def pool_label(pool: str) -> str:
    """The label that puts a Node in ``pool`` (its ``nodeSelector``)."""
    return f"node-role.kubernetes.io/{pool}"


def cluster_label(pool: str) -> str:
    """The label of every Node of the cluster named after its layered ``pool`` (both pools'),
    which its drain controller selects: clusters sharing a control plane never meet."""
    return f"sim.drain-guard.io/cluster-{pool}"


#: The taint of a control-plane Node; MCO's build pods tolerate it.
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}
#: The OS image a Node of a pool without layering boots.
BASE_OS_IMAGE = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:" + "5" * 64


#: The actors' identities a server provides (``Scenario._actor_kubeconfig``): on the real control
#: plane a service account each (``actorrbac.ACTOR_RULES``), on the simulator MCO's users.
ACTOR_ROLES = (
    "machine-config-daemon",
    "machine-config-controller",
    "machine-os-builder",
    "build-controller",
    "replicaset-controller",
)
_EMPTY_CONFIG: JsonObj = {"config": {"ignition": {"version": "3.4.0"}}}


class ScenarioOptions(TypedDict, total=False):
    """What every server's cluster takes: ``nodes`` (3), ``time_factor`` (1.0: MCO's own
    durations) scaling ``timings``, ``build_node`` (the first node) and ``version`` (4.15)."""

    nodes: int
    time_factor: float
    timings: Timings | None
    build_node: str | None
    version: McoVersion
    masters: int


class Scenario(abc.ABC):
    """The seed's cluster, written once for every server: its objects, its actors, how a test
    drives it and what happened.

    What differs between servers is behind the abstract methods: how it starts and stops
    (``_open``, ``_close``), how it writes the seed's objects (``_create_*``), who each actor
    is (``_actor_kubeconfig``) and which actors the server needs besides MCO's
    (``_server_actors``: the simulator's garbage collector, the real server's pod kubelet), and
    how it reads back (``wait_for``, ``_nodes``, ``_pool``, ``_cordon_records``,
    ``build_result``, ``evictions``). ``pool`` names the pool; its Nodes are ``<pool>-0`` ...
    """

    def __init__(
        self,
        workdir: Path | None,
        *,
        pool: str,
        nodes: int = 3,
        time_factor: float = 1.0,
        timings: Timings | None = None,
        build_node: str | None = None,
        version: McoVersion = McoVersion.V4_15,
        node_controller: bool = True,
        masters: int = 0,
    ) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"{type(self).__name__.lower()}-")
            workdir = Path(self._tmp.name)
        self.workdir = workdir
        self.pool = pool
        self.node_names = [f"{pool}-{i}" for i in range(nodes)]
        #: The control-plane pool (without layering) of ``masters`` Nodes, if any: its own
        #: MachineConfigs and node controller; the layered pool's build pods may run there
        #: (they tolerate the control-plane taint), and its rollout drains them.
        self.master_pool = "master" if pool == "worker" else f"{pool}-master"
        self.master_names = [f"{self.master_pool}-{i}" for i in range(masters)]
        self.master_config = ""
        self.timings = (timings or Timings()).scaled(time_factor)
        self.build_node = build_node or self.node_names[0]
        assert self.build_node in self.node_names + self.master_names, self.build_node
        self.version = version
        self.with_node_controller = node_controller
        self.timeline = Timeline()
        self.hosts: dict[str, HostFS] = {}
        self.machines: dict[str, NodeMachine] = {}
        self.actors: list[Actor] = []
        self.reboot_hooks: list[Callable[[str], Awaitable[None]]] = []
        self.initial_config = ""
        self.initial_image = INITIAL_IMAGE
        self.drain: DrainController | None = None
        self.builder: MachineOSBuilder | None = None
        self.node_controller: NodeController | None = None
        self._racing = False
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        await self._open()
        await self._seed_objects()
        t, tl, v = self.timings, self.timeline, self.version
        kc = {role: await self._actor_kubeconfig(role) for role in ACTOR_ROLES}
        mcc = kc["machine-config-controller"]
        # Its pool's Nodes only: on a shared control plane, another test's Nodes (left
        # mid-drain, their pods under budgets) kept its workers from this cluster's drain.
        self.drain = DrainController(mcc, tl, t, v, node_selector=cluster_label(self.pool))
        builder = MachineOSBuildController if v.gates_on_build else MachineOSBuilder
        self.builder = builder(kc["machine-os-builder"], tl, t, v)
        self.actors = [
            ReplicaSetController(kc["replicaset-controller"], tl, t),
            OpenShiftBuildController(kc["build-controller"], tl, t, lambda _b: self.build_node, v),
            self.builder,
            self.drain,
            *await self._server_actors(),
        ]
        if self.with_node_controller:
            self.node_controller = NodeController(mcc, tl, t, pool=self.pool, version=v)
            self.actors.append(self.node_controller)
            if self.master_names:
                masters = NodeController(mcc, tl, t, pool=self.master_pool, version=v)
                self.actors.append(masters)
        for actor in self.actors:
            await actor.start()
        for name in self.all_nodes:
            machine = NodeMachine(name, self.hosts[name], kc["machine-config-daemon"], tl, t, v)
            machine.on_reboot.append(self._run_reboot_hooks)
            self.machines[name] = machine
            await machine.start()
        # The daemons' startup writes (uncordon-<config>, state Done) happen before any test
        # or demo step, as on a cluster that has been running for a while.
        for machine in self.machines.values():
            await machine.wait_daemon_synced()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for machine in self.machines.values():
            await machine.stop()
        for actor in reversed(self.actors):
            await actor.stop()
        await self._close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` until it ends or the cluster stops."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_reboot_hooks(self, node: str) -> None:
        for hook in self.reboot_hooks:
            await hook(node)

    @abc.abstractmethod
    async def _open(self) -> None:
        """Make the server ready for the seed's objects."""

    @abc.abstractmethod
    async def _close(self) -> None:
        """After the actors: stop the server or leave it clean for the next cluster."""

    # -- identities ------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def admin_kubeconfig(self) -> Path:
        """The administrator's kubeconfig."""

    @abc.abstractmethod
    def agent_kubeconfig(self, node: str) -> Path:
        """The kubeconfig of ``node``'s drain-guard agent."""

    @abc.abstractmethod
    async def _actor_kubeconfig(self, role: str) -> Path:
        """The kubeconfig of the actor playing ``role`` (one of ``ACTOR_ROLES``)."""

    @abc.abstractmethod
    async def _server_actors(self) -> list[Actor]:
        """The actors this server needs besides MCO's (started before the node controller)."""

    # -- seed state ------------------------------------------------------------------------

    async def _seed_objects(self) -> None:
        """The cluster after "enable OCB and wait for the first build" (``SimCluster``)."""
        configs = [
            await self._create_machine_config(
                _machine_config(base.replace("worker", self.pool), _EMPTY_CONFIG, self.pool)
            )
            for base in BASE_CONFIGS
        ]
        self.initial_config = rendered_name(self.pool, configs)
        await self._create_machine_config(_machine_config(self.initial_config, _EMPTY_CONFIG, None))
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
            owner = _owner_reference(await self._create_owner("DaemonSet", ns, ds, {"app": ds}))
            for node_name in self.all_nodes:
                name = f"{ds}-{_suffix(ds, node_name)}"
                await self._create_pod(_pod(ns, name, node_name, {"app": ds}, owner))
        for ns, deploy, labels in DEPLOYMENTS:
            rs = f"{deploy}-{_suffix(deploy, self.pool, n=10)}"
            owner = _owner_reference(await self._create_owner("ReplicaSet", ns, rs, labels))
            await self._create_pod(_pod(ns, f"{rs}-{_suffix(rs)}", self.build_node, labels, owner))

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
                _machine_config(base.replace("worker", self.master_pool), _EMPTY_CONFIG,
                                self.master_pool)
            )
            for base in BASE_CONFIGS
        ]  # fmt: skip
        self.master_config = rendered_name(self.master_pool, configs)
        await self._create_machine_config(_machine_config(self.master_config, _EMPTY_CONFIG, None))
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

    # -- driving the scenario --------------------------------------------------------------

    async def create_machine_config(
        self, name: str, kernel_arguments: tuple[str, ...] = (), *, lose_build_race: bool = False
    ) -> str:
        """``oc create`` a :func:`machine_config` for the pool (``worker`` in ``name`` becomes
        the pool's name: MachineConfigs are cluster-wide); returns the config it renders to.

        ``lose_build_race``: :meth:`lose_build_races` first, so MCO 4.15 targets a node with
        the old image as in the seed; without it, the race is won.
        """
        if lose_build_race:
            self.lose_build_races()
        name = name.replace("worker", self.pool)
        await self._create_machine_config(machine_config(name, kernel_arguments, pool=self.pool))
        self.timeline.add("user", None, f"oc create machineconfig {name}")
        return rendered_name(self.pool, await self._pool_machine_configs())

    async def delete_machine_config(self, name: str) -> None:
        """``oc delete`` the pool's MachineConfig ``name`` (as given to
        :meth:`create_machine_config`): the pool goes back to the config rendered without it."""
        name = name.replace("worker", self.pool)
        await self._delete_machine_config(name)
        self.timeline.add("user", None, f"oc delete machineconfig {name}")

    def lose_build_races(self, margin: float = RACE_MARGIN) -> None:
        """Arrange the order the seed's log shows for every MachineConfig created from now on.

        MCO 4.15 targets a node with the new config and the old image only when the node
        controller syncs between the render's write and the build controller's BuildPending,
        which the build controller writes in its handler of that same pool event; the node
        controller's own sync for it comes 5 s later. Here the build start is slow (each of
        its ConfigMap creates takes ``margin`` s longer, as on a slow API server) and another
        controller labels ``build_node`` ``margin`` s after each MachineConfig, which queues
        the node controller's sync ``margin`` s after the render and as long before the
        BuildPending (MCO seconds; below 5 s the build pod exists before the cordon). On MCO
        4.15 the slow start also lasts until the node controller has targeted a node with the
        new config (at most ``RACE_WAIT``): on a loaded machine the margin alone, a fraction of
        a second in real time, was sometimes not enough, and the race was won.
        """
        if self._racing:
            return
        assert self.builder is not None, "start the cluster first"
        self._racing = True
        self.builder.slow_start = margin
        if not self.version.gates_on_build:
            self.builder.pending_after = self._until_targeted
        self._label_after_each_machine_config(margin)

    def win_build_races(self) -> None:
        """Arrange the order of a race won for every MachineConfig created from now on.

        MCO 4.15's node controller syncs 5 s after the render, the build controller marks the
        build pending after four writes begun in its handler of the render: here the node
        controller skips each sync in which its pool still says BuildSuccess of an earlier
        build, and syncs on the BuildPending write's event instead, however long the four
        writes take on a loaded machine.
        """
        assert self.node_controller is not None, "start the cluster (with its node controller)"
        self.node_controller.may_sync = self._build_of_target_marked

    def _build_of_target_marked(self, pool: JsonObj) -> bool:
        """Whether ``pool`` is past its target's BuildPending: building, failed, or built
        (its last finished build is the target's), or at its initial config."""
        target = ((pool.get("spec") or {}).get("configuration") or {}).get("name")
        if target == self.initial_config or not condition_true(pool, "BuildSuccess"):
            return True
        result = self.build_result()
        return result is not None and result.name == f"build-{target}"

    @abc.abstractmethod
    def _label_after_each_machine_config(self, margin: float) -> None:
        """From now on, another controller labels ``build_node`` ``margin`` MCO seconds after
        each MachineConfig a user creates."""

    async def _until_targeted(self, config: str) -> None:
        """Until a node's desiredConfig is ``config``, at most ``RACE_WAIT`` MCO seconds."""

        def targeted() -> bool:
            return any(annotations_of(n).get(DESIRED_CONFIG) == config for n in self._nodes())

        with contextlib.suppress(TimeoutError):
            await self.wait_for(targeted, self.timings.s(RACE_WAIT))

    @abc.abstractmethod
    async def wait_for(self, predicate: Callable[[], T], timeout: float) -> T:  # noqa: ASYNC109
        """Until ``predicate()`` is truthy (checked on every change the server shows)."""

    async def wait_build_done(self, timeout: float) -> BuildResult:  # noqa: ASYNC109
        """Wait (event-driven) for the build to end; ``timeout`` in seconds."""
        result = await self.wait_for(self.build_result, timeout)
        assert result is not None
        return result

    def rollout_done(self, config: str | None = None) -> bool:
        """Whether every worker runs the pool's target and image, Done and uncordoned: with
        ``config``, that target and its build's image. Without it, any target but the
        initial one does, which after a second rollout may be the one before it (the pool
        names a new MachineConfig's render a moment after the MachineConfig is created)."""
        pool = self._pool()
        if pool is None:
            return False
        target = pool["spec"]["configuration"]["name"]
        image = self.pool_image()
        if config is not None and (target != config or image != built_image(config)):
            return False
        if target == self.initial_config or image == self.initial_image:
            return False
        nodes = {n["metadata"]["name"]: n for n in self._nodes()}
        for name in self.node_names:
            ann = annotations_of(nodes.get(name) or {})
            if not (
                ann.get(CURRENT_CONFIG) == target
                and ann.get(CURRENT_IMAGE) == image
                and ann.get(STATE) == STATE_DONE
                and ann.get(DESIRED_DRAIN) == ann.get(LAST_APPLIED_DRAIN) == f"uncordon-{target}"
            ):
                return False
        return True

    def pool_updated(self, pool: str, config: str) -> bool:
        """Whether every Node of ``pool`` (the layered pool or the control-plane pool) runs
        ``config``, Done and uncordoned."""
        names = self.node_names if pool == self.pool else self.master_names
        nodes = {n["metadata"]["name"]: n for n in self._nodes()}
        for name in names:
            ann = annotations_of(nodes.get(name) or {})
            if not (
                ann.get(CURRENT_CONFIG) == config
                and ann.get(STATE) == STATE_DONE
                and ann.get(DESIRED_DRAIN) == ann.get(LAST_APPLIED_DRAIN) == f"uncordon-{config}"
            ):
                return False
        return True

    async def wait_rollout_done(
        self,
        timeout: float,  # noqa: ASYNC109
        config: str | None = None,
    ) -> None:
        """Wait until every worker runs the new config (``config``) and image, Done and
        uncordoned."""
        await self.wait_for(lambda: self.rollout_done(config), timeout)

    def pool_image(self) -> str:
        """The image the pool's nodes are to run: 4.15's pool annotation, 4.16+'s
        MachineOSConfig's status."""
        if self.version.gates_on_build:
            return config_image(self.version, self._machine_os_config())
        return annotations_of(self._pool() or {}).get(POOL_IMAGE, "")

    @abc.abstractmethod
    def _machine_os_config(self) -> JsonObj | None:
        """4.16+: the pool's MachineOSConfig as the server holds it now."""

    @abc.abstractmethod
    def _nodes(self) -> list[JsonObj]:
        """The pool's Nodes as the server holds them now."""

    @abc.abstractmethod
    def _pool(self) -> JsonObj | None:
        """The pool as the server holds it now."""

    # -- outcome ---------------------------------------------------------------------------

    def cordons(self) -> list[Cordon]:
        """Every time the MCC cordoned a node, with the MCD update that asked for it."""
        out = []
        for t, node, ann in self._cordon_records():
            update = None
            for u in self.machines[node].updates:
                if u.started <= t and u.drain_requested:
                    update = u
            out.append(
                Cordon(
                    node=node,
                    t=t,
                    desired_drain=ann.get(DESIRED_DRAIN, ""),
                    desired_image=ann.get(DESIRED_IMAGE, ""),
                    current_image=ann.get(CURRENT_IMAGE, ""),
                    update=update,
                )
            )
        return out

    def outcome(self) -> Outcome:
        return Outcome(
            build=self.build_result(),
            cordons=self.cordons(),
            evictions=self.evictions(),
            updates=[u for m in self.machines.values() for u in m.updates],
            reboots={name: m.reboots for name, m in self.machines.items()},
        )

    @abc.abstractmethod
    def _cordon_records(self) -> list[tuple[float, str, dict[str, str]]]:
        """Each cordon: when (timeline seconds), the node, its annotations then."""

    @abc.abstractmethod
    def build_result(self) -> BuildResult | None:
        """The (last) build's outcome; None before any build ended."""

    @abc.abstractmethod
    def evictions(self) -> list[tuple[float, str, str]]:
        """Pods the drain controller evicted: (timeline seconds, node, namespace/name)."""
