"""The seed's scenario, written once for both servers: ``Scenario`` is the cluster, its objects,
its actors, how a test drives it and what happened; ``SimCluster`` (the simulator) and
``RealCluster`` (the real control plane) say only how their server starts, writes, names the
actors and reads back. The seed's objects are in ``seedobjects``, how the scenario writes
them in ``seeding``, what happened in ``outcome``.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Self, TypedDict, TypeVar

from drain_guard_sim.actors.build import MachineOSBuilder, built_image
from drain_guard_sim.actors.buildrunner import OpenShiftBuildController
from drain_guard_sim.actors.drain import DrainController
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.machineos import config_image
from drain_guard_sim.actors.mco import (
    CURRENT_CONFIG,
    CURRENT_IMAGE,
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    POOL_IMAGE,
    STATE,
    STATE_DONE,
    Actor,
    JsonObj,
    McoVersion,
    Timings,
    annotations_of,
    condition_true,
)
from drain_guard_sim.actors.nodecontroller import NodeController, rendered_name
from drain_guard_sim.actors.nodemachine import NodeMachine
from drain_guard_sim.actors.osbuilder import MachineOSBuildController
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.harness.outcome import BuildResult, ScenarioOutcome
from drain_guard_sim.harness.replicasets import ReplicaSetController
from drain_guard_sim.harness.seeding import ScenarioSeeding
from drain_guard_sim.harness.seedobjects import INITIAL_IMAGE, cluster_label, machine_config

__all__ = ["ACTOR_ROLES", "Scenario", "ScenarioOptions"]


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
T = TypeVar("T")


#: The actors' identities a server provides (``Scenario._actor_kubeconfig``): on the real control
#: plane a service account each (``actorrbac.ACTOR_RULES``), on the simulator MCO's users.
ACTOR_ROLES = (
    "machine-config-daemon",
    "machine-config-controller",
    "machine-os-builder",
    "build-controller",
    "replicaset-controller",
)


class ScenarioOptions(TypedDict, total=False):
    """What every server's cluster takes: ``nodes`` (3), ``time_factor`` (1.0: MCO's own
    durations) scaling ``timings``, ``build_node`` (the first node) and ``version`` (4.15)."""

    nodes: int
    time_factor: float
    timings: Timings | None
    build_node: str | None
    version: McoVersion
    masters: int


class Scenario(ScenarioSeeding, ScenarioOutcome):
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
