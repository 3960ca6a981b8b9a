"""The whole simulated cluster: API server, worker nodes with host trees, MCO actors, workloads.

``SimCluster`` sets up what the seed report's cluster had after "enable OCB and wait for the
first build": a layered ``worker`` pool whose nodes run image X (``ocb-image@sha256:6498…``,
the seed's digest), all Done, ``lastAppliedDrain=uncordon-<config>`` as after a past update;
DaemonSet pods on every node; the machine-os-builder and image-registry pods (Deployment-owned)
on the build node. Creating a MachineConfig then replays the seed. Every actor talks to the
simulator over HTTP with its own identity; the test or demo reads the outcome from the
simulator's write log, the actors' records and the shared timeline.

Usage::

    async with SimCluster(tmp_path, time_factor=0.01) as cluster:
        await cluster.create_machine_config("99-worker-seed")
        build = await cluster.wait_build_done(timeout=30)
        print(cluster.outcome().render())
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from drain_guard_sim.actors.build import MachineOSBuilder, OpenShiftBuildController, is_build_pod
from drain_guard_sim.actors.drain import DrainController
from drain_guard_sim.actors.gc import GC_USER, GarbageCollector
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.mcd import NodeMachine, UpdateRecord
from drain_guard_sim.actors.mco import (
    BUILD_CONTROLLER_USER,
    BUILDER_USER,
    CONTROL_PLANE_TOPOLOGY,
    CURRENT_CONFIG,
    CURRENT_IMAGE,
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    KCM_USER,
    LAST_APPLIED_DRAIN,
    LAYERING_LABEL,
    MCC_USER,
    MCD_USER,
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
    Informer,
    JsonObj,
    McoVersion,
    Timings,
    annotations_of,
    read_json,
)
from drain_guard_sim.actors.nodecontroller import NodeController, rendered_name
from drain_guard_sim.actors.nodewriters import NFD_USER, Kubelet, label_patch
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.apiserver.server import SimApiServer, WriteRecord
from drain_guard_sim.apiserver.tls import ServingCert

__all__ = [
    "AGENT_USER",
    "NODE_NAME_EXTRA",
    "BuildResult",
    "Cordon",
    "Outcome",
    "ReplicaSetController",
    "SimCluster",
    "worker_node",
]

AGENT_USER = "system:serviceaccount:drain-guard:drain-guard"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
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


def updated_pool_status(config: str, machines: int) -> JsonObj:
    """A layered pool's status with every machine on ``config`` and its build succeeded: the
    state each scenario starts from."""
    return {
        "configuration": {"name": config},
        "machineCount": machines,
        "updatedMachineCount": machines,
        "readyMachineCount": machines,
        "degradedMachineCount": 0,
        "conditions": [
            {"type": "BuildSuccess", "status": "True", "reason": "BuildSucceeded"},
            {"type": "Building", "status": "False"},
            {"type": "BuildPending", "status": "False"},
            {"type": "BuildFailed", "status": "False"},
            {"type": "Updated", "status": "True"},
        ],
    }


T = TypeVar("T")


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
        """The node's desired image equals its booted one: a pointless drain."""
        return self.desired_image == self.current_image


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

    def build_pod_evicted(self) -> bool:
        b = self.build
        prefix = f"{MCO_NAMESPACE}/{b.name}-" if b is not None else None
        return prefix is not None and any(p.startswith(prefix) for _, _, p in self.evictions)


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
        owner = old["metadata"]["ownerReferences"][0]["name"]
        ns = old["metadata"]["namespace"]
        name = f"{owner}-{_suffix(owner, str(next(self._serial)), node)}"
        pod = _pod(ns, name, node, old["metadata"].get("labels") or {}, "ReplicaSet", owner)
        # The old pod's owner, uid and all: a real garbage collector deletes a pod whose owner
        # reference names no object.
        pod["metadata"]["ownerReferences"] = old["metadata"]["ownerReferences"]
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


def _pod(
    ns: str, name: str, node: str, labels: dict[str, str], owner_kind: str, owner: str
) -> JsonObj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": dict(labels),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner_kind,
                    "name": owner,
                    "uid": _suffix(ns, owner, n=32),
                    "controller": True,
                }
            ],
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


def machine_config(name: str, kernel_arguments: tuple[str, ...] = ()) -> JsonObj:
    """A MachineConfig for the worker pool that writes one file (``/etc/<name>``);
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
    return {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {ROLE_LABEL: "worker"}},
        "spec": spec,
    }


class SimCluster:
    """A simulated OpenShift cluster with on-cluster layering enabled on ``worker``.

    ``version`` picks the MCO the actors play (4.15, the seed's, by default; 4.16 for 4.16 and
    4.17; 4.18); ``time_factor`` scales every MCO duration (0.01: a 10 s poll takes 0.1 s);
    ``build_node`` hosts the build pod and the machine-os-builder and registry pods
    (default: the first worker, the node the rollout targets first, as in the seed);
    ``node_controller=False`` leaves the nodes' desired config and image to the caller;
    ``node_writers=True`` adds each node's kubelet status reports (``nodewriters``, at a
    phase drawn from ``seed``), which MCO 4.15's drain controller queues the node on;
    ``port`` and ``tls`` are the API server's (default: any free port, plain HTTP).
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        nodes: int = 3,
        time_factor: float = 1.0,
        timings: Timings | None = None,
        build_node: str | None = None,
        version: McoVersion = McoVersion.V4_15,
        node_controller: bool = True,
        node_writers: bool = False,
        seed: int = 0,
        bookmark_interval: float = 1.0,
        port: int = 0,
        tls: ServingCert | None = None,
    ) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="simcluster-")
            workdir = Path(self._tmp.name)
        self.workdir = workdir
        self.node_names = [f"worker-{i}" for i in range(nodes)]
        self.timings = (timings or Timings()).scaled(time_factor)
        self.build_node = build_node or self.node_names[0]
        self.version = version
        self.with_node_controller = node_controller
        self.with_node_writers = node_writers
        self.seed = seed
        self.kubelets: dict[str, Kubelet] = {}
        self._race_arranger: asyncio.Task[None] | None = None
        self.api = SimApiServer(bookmark_interval=bookmark_interval, port=port, tls=tls)
        self.timeline = Timeline()
        self.hosts: dict[str, HostFS] = {}
        self.machines: dict[str, NodeMachine] = {}
        self.actors: list[Actor] = []
        self.reboot_hooks: list[Callable[[str], Awaitable[None]]] = []
        self.initial_config = ""
        self.initial_image = INITIAL_IMAGE
        self.drain: DrainController | None = None
        self.builder: MachineOSBuilder | None = None
        self._agent_kubeconfigs: dict[str, Path] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        await self.api.start()
        self._seed_objects()
        t, tl = self.timings, self.timeline
        kc = self.kubeconfig
        v = self.version
        self.drain = DrainController(kc(MCC_USER), tl, t, v)
        self.builder = MachineOSBuilder(kc(BUILDER_USER), tl, t, v)
        self.actors = [
            ReplicaSetController(kc(KCM_USER), tl, t),
            OpenShiftBuildController(
                kc(BUILD_CONTROLLER_USER), tl, t, lambda _b: self.build_node, v
            ),
            self.builder,
            self.drain,
            # Deletes the shield's budgets with their pods, as kube-controller-manager does.
            GarbageCollector(kc(GC_USER), tl, t),
        ]
        if self.with_node_controller:
            self.actors.append(NodeController(kc(MCC_USER), tl, t, version=v))
        if self.with_node_writers:
            for name in self.node_names:
                self.api.add_node_user(name)
                kubelet = Kubelet(kc(f"system:node:{name}"), tl, t, name, self.seed)
                self.kubelets[name] = kubelet
                self.actors.append(kubelet)
        for actor in self.actors:
            await actor.start()
        for name in self.node_names:
            machine = NodeMachine(name, self.hosts[name], kc(MCD_USER), tl, t, v)
            machine.on_reboot.append(self._run_reboot_hooks)
            self.machines[name] = machine
            await machine.start()
        # The daemons' startup writes (uncordon-<config>, state Done) happen before any test
        # or demo step, as on a cluster that has been running for a while.
        for machine in self.machines.values():
            await machine.wait_daemon_synced()

    async def stop(self) -> None:
        if self._race_arranger is not None:
            self._race_arranger.cancel()
            await asyncio.gather(self._race_arranger, return_exceptions=True)
            self._race_arranger = None
        for machine in self.machines.values():
            await machine.stop()
        for actor in reversed(self.actors):
            await actor.stop()
        await self.api.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def _run_reboot_hooks(self, node: str) -> None:
        for hook in self.reboot_hooks:
            await hook(node)

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

    # -- seed state ------------------------------------------------------------------------

    def _seed_objects(self) -> None:
        api = self.api
        configs = []
        for name in BASE_CONFIGS:
            mc = {
                "apiVersion": "machineconfiguration.openshift.io/v1",
                "kind": "MachineConfig",
                "metadata": {"name": name, "labels": {ROLE_LABEL: "worker"}},
                "spec": {"config": {"ignition": {"version": "3.4.0"}}},
            }
            configs.append(api.create("machineconfigs", mc))
        self.initial_config = rendered_name("worker", configs)
        api.create(
            "machineconfigs",
            {
                "apiVersion": "machineconfiguration.openshift.io/v1",
                "kind": "MachineConfig",
                "metadata": {"name": self.initial_config},
                "spec": {"config": {"ignition": {"version": "3.4.0"}}},
            },
        )
        api.create(
            "machineconfigpools",
            {
                "apiVersion": "machineconfiguration.openshift.io/v1",
                "kind": "MachineConfigPool",
                "metadata": {
                    "name": "worker",
                    "labels": {LAYERING_LABEL: ""},
                    "annotations": {POOL_IMAGE: self.initial_image},
                },
                "spec": {
                    "configuration": {"name": self.initial_config},
                    "nodeSelector": {"matchLabels": {WORKER_LABEL: ""}},
                    "maxUnavailable": 1,
                },
                "status": updated_pool_status(self.initial_config, len(self.node_names)),
            },
        )
        for name in self.node_names:
            api.create("nodes", worker_node(name, self.initial_config, self.initial_image))
            host = HostFS(self.workdir / "hosts" / name, self.initial_image)
            host.write_mcd_current_config(self.initial_config, self.initial_image)
            self.hosts[name] = host
        for ns, ds in DAEMONSETS:
            api.create(
                "daemonsets",
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "metadata": {"name": ds, "namespace": ns},
                    "spec": {"selector": {"matchLabels": {"app": ds}}},
                },
            )
            for node in self.node_names:
                pod = _pod(ns, f"{ds}-{_suffix(ds, node)}", node, {"app": ds}, "DaemonSet", ds)
                api.create("pods", pod)
        for ns, deploy, labels in DEPLOYMENTS:
            rs = f"{deploy}-{_suffix(deploy, n=10)}"
            pod = _pod(ns, f"{rs}-{_suffix(rs)}", self.build_node, labels, "ReplicaSet", rs)
            api.create("pods", pod)

    # -- driving the scenario --------------------------------------------------------------

    async def create_machine_config(
        self, name: str, kernel_arguments: tuple[str, ...] = (), *, lose_build_race: bool = False
    ) -> str:
        """``oc create`` a :func:`machine_config`; returns the config it renders to.

        ``lose_build_race``: :meth:`lose_build_races` first, so MCO 4.15 targets a node with
        the old image as in the seed; without it, the race is won.
        """
        if lose_build_race:
            self.lose_build_races()
        mc = machine_config(name, kernel_arguments)
        self.api.create("machineconfigs", mc)
        self.timeline.add("user", None, f"oc create machineconfig {name}")
        inputs = [
            m
            for m in self.api.list("machineconfigs")
            if (m["metadata"].get("labels") or {}).get(ROLE_LABEL) == "worker"
        ]
        return rendered_name("worker", inputs)

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
        if self._race_arranger is not None:
            return
        assert self.builder is not None, "start the cluster first"
        self.builder.slow_start = margin
        if not self.version.gates_on_build:
            self.builder.pending_after = self._until_targeted
        self._race_arranger = asyncio.create_task(
            self._label_after_each_machine_config(margin, self.api.resource_version)
        )

    async def _until_targeted(self, config: str) -> None:
        """Until a node's desiredConfig is ``config``, at most ``RACE_WAIT`` MCO seconds."""

        def targeted() -> bool:
            nodes = self.api.list("nodes")
            return any(annotations_of(n).get(DESIRED_CONFIG) == config for n in nodes)

        with contextlib.suppress(TimeoutError):
            await self.api.wait_for(targeted, self.timings.s(RACE_WAIT))

    async def _label_after_each_machine_config(self, margin: float, since: int) -> None:
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

    def _since_start(self, monotonic: float) -> float:
        return self.timeline.since_start(monotonic)

    def build_result(self) -> BuildResult | None:
        """The (last) build's outcome from the write log; None before any build ended."""
        created: WriteRecord | None = None
        result: BuildResult | None = None
        for rec in self.api.writes("builds"):
            if rec.verb == "create":
                created = rec
                result = None
            status = (rec.after or {}).get("status") or {}
            phase = status.get("phase")
            if (
                created is not None
                and phase in ("Complete", "Failed", "Error", "Cancelled")
                and result is None
            ):
                result = BuildResult(
                    name=rec.name,
                    phase=phase,
                    reason=status.get("reason", ""),
                    node=self._build_pod_node(rec.name),
                    started=self._since_start(created.time),
                    finished=self._since_start(rec.time),
                )
        return result

    def _build_pod_node(self, build: str) -> str | None:
        for rec in self.api.writes("pods", verb="create"):
            if rec.subresource or not rec.name.startswith(f"{build}-"):
                continue
            return str((rec.after or {}).get("spec", {}).get("nodeName"))
        return None

    async def wait_for(self, predicate: Callable[[], T], timeout: float) -> T:  # noqa: ASYNC109
        """Until ``predicate()`` is truthy, checked on every write (``RealCluster``'s too)."""
        return await self.api.wait_for(predicate, timeout)

    async def wait_build_done(self, timeout: float) -> BuildResult:  # noqa: ASYNC109
        """Wait (event-driven, on the write log) for the build to end; ``timeout`` in seconds."""
        result = await self.api.wait_for(self.build_result, timeout)
        assert result is not None
        return result

    def rollout_done(self) -> bool:
        pool = self.api.get("machineconfigpools", "worker")
        target = pool["spec"]["configuration"]["name"]
        image = annotations_of(pool).get(POOL_IMAGE)
        if target == self.initial_config or image == self.initial_image:
            return False
        for name in self.node_names:
            ann = annotations_of(self.api.get("nodes", name))
            if not (
                ann.get(CURRENT_CONFIG) == target
                and ann.get(CURRENT_IMAGE) == image
                and ann.get(STATE) == STATE_DONE
                and ann.get(DESIRED_DRAIN) == ann.get(LAST_APPLIED_DRAIN) == f"uncordon-{target}"
            ):
                return False
        return True

    async def wait_rollout_done(self, timeout: float) -> None:  # noqa: ASYNC109
        """Wait until every worker runs the new config and image, Done and uncordoned."""
        await self.api.wait_for(self.rollout_done, timeout)

    # -- outcome ---------------------------------------------------------------------------

    def cordons(self) -> list[Cordon]:
        """Every time the MCC set ``spec.unschedulable``, from the write log."""
        out = []
        for rec in self.api.writes("nodes", user=MCC_USER):
            before = ((rec.before or {}).get("spec") or {}).get("unschedulable", False)
            after = ((rec.after or {}).get("spec") or {}).get("unschedulable", False)
            if before or not after:
                continue
            ann = annotations_of(rec.after or {})
            t = self._since_start(rec.time)
            update = None
            for u in self.machines[rec.name].updates:
                if u.started <= t and u.drain_requested:
                    update = u
            out.append(
                Cordon(
                    node=rec.name,
                    t=t,
                    desired_drain=ann.get(DESIRED_DRAIN, ""),
                    desired_image=ann.get(DESIRED_IMAGE, ""),
                    current_image=ann.get(CURRENT_IMAGE, ""),
                    update=update,
                )
            )
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

    def outcome(self) -> Outcome:
        return Outcome(
            build=self.build_result(),
            cordons=self.cordons(),
            evictions=self.evictions(),
            updates=[u for m in self.machines.values() for u in m.updates],
            reboots={name: m.reboots for name, m in self.machines.items()},
        )

    def pods_on(self, node: str, label_selector: str | None = None) -> list[JsonObj]:
        return self.api.list(
            "pods", label_selector=label_selector, field_selector=f"spec.nodeName={node}"
        )

    def build_pods(self) -> list[JsonObj]:
        return [p for p in self.api.list("pods", MCO_NAMESPACE) if is_build_pod(p)]
