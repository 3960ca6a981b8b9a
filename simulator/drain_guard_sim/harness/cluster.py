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
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from drain_guard_sim.actors.build import MachineOSBuilder, OpenShiftBuildController, is_build_pod
from drain_guard_sim.actors.drain import DrainController
from drain_guard_sim.actors.gc import GC_USER, GarbageCollector
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.mcd import NodeMachine
from drain_guard_sim.actors.mco import (
    BUILD_CONTROLLER_USER,
    BUILDER_USER,
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
    POOL_IMAGE,
    ROLE_LABEL,
    STATE,
    STATE_DONE,
    WORKER_LABEL,
    Actor,
    JsonObj,
    McoVersion,
    Timings,
    annotations_of,
)
from drain_guard_sim.actors.nodecontroller import NodeController, rendered_name
from drain_guard_sim.actors.nodewriters import NFD_USER, Kubelet, label_patch
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.apiserver.server import SimApiServer, WriteRecord
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.scenario import (
    BASE_CONFIGS,
    DAEMONSETS,
    DEPLOYMENTS,
    INITIAL_IMAGE,
    NFD_LABEL,
    RACE_MARGIN,
    RACE_WAIT,
    BuildResult,
    Cordon,
    Outcome,
    ReplicaSetController,
    _pod,
    _suffix,
    machine_config,
    updated_pool_status,
    worker_node,
)

__all__ = ["AGENT_USER", "NODE_NAME_EXTRA", "SimCluster"]

AGENT_USER = "system:serviceaccount:drain-guard:drain-guard"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

T = TypeVar("T")


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
