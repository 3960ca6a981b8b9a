"""``drain-guard demo``: the seed bug report, replayed in a simulated cluster without and with
drain-guard, with a timeline of each run and a verdict.

The cluster is simulated (``drain_guard_sim``): a Kubernetes API server and MCO 4.15's daemon, drain
controller, node controller and on-cluster build, modelled on MCO's source. The agents are the
real thing: one ``drain-guard run`` process per node, talking to the simulated API server
through kubernetes_asyncio, reading the booted image from a simulated host tree, restarted when
their node reboots (as a DaemonSet pod is). Durations are MCO's, scaled by ``--time-factor``;
the timelines show MCO seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from drain_guard_sim.actors.mco import McoVersion, Timings
from drain_guard_sim.actors.timeline import Timeline, TimelineEntry
from drain_guard_sim.harness.agentproc import AgentError, AgentProcess, spawn_agent
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.controlplane import ControlPlane, default_bin_dir, missing_binaries
from drain_guard_sim.harness.realcluster import RealCluster
from drain_guard_sim.harness.scenario import Cordon, Outcome

__all__ = ["configure_parser", "run"]

AGENT_ACTOR = "drain-guard"
#: The cluster a run plays on: the simulator's, or the real control plane's (``--api real``).
Cluster = SimCluster | RealCluster
START_TIMEOUT = 30.0  # seconds for an agent to start and make its first decision
#: The names ``--mco-version`` takes: each simulated version, and the releases it plays
#: (docs/mco-versions.md: 4.17 is played by the 4.16 model, 4.19 by the 4.18 one).
MCO_NAMES: dict[str, McoVersion] = {
    "4.15": McoVersion.V4_15,
    "4.16-early": McoVersion.V4_16_EARLY,
    "4.16": McoVersion.V4_16,
    "4.17": McoVersion.V4_16,
    "4.18-early": McoVersion.V4_18_EARLY,
    "4.18": McoVersion.V4_18,
    "4.19": McoVersion.V4_18,
}
# Timeline lines worth showing a newcomer (actor, text); the full timeline has every step.
KEY_LINES = (
    ("user", ""),
    ("node-controller", "Setting node"),
    ("machine-config-daemon", "Starting transition"),
    ("machine-config-daemon", "Update prepared"),
    ("machine-config-daemon", "drain is already completed"),
    ("machine-config-daemon", "Image pullspecs equal"),
    ("machine-config-daemon", "Updating OS to layered image"),
    ("machine-config-daemon", "Marking Degraded"),
    ("machine-config-daemon", "Already in desired image"),
    ("node-controller", "Requeueing layered pool"),
    ("node", "rebooted into"),
    ("machine-config-controller", "cordon succeeded"),
    ("machine-config-controller", "evicting pod openshift-machine-config-operator/"),
    ("machine-config-controller", "evicting pod openshift-image-registry/"),
    ("machine-config-controller", "non-recognized drain verb"),
    ("build-controller", ""),
    ("demo", ""),
    ("machine-os-builder", "Build succeeded"),
    (AGENT_ACTOR, ""),
)


def configure_parser(parser: argparse.ArgumentParser, agent_max_hold: float | None = None) -> None:
    """The demo's flags; ``agent_max_hold``, when the caller knows it (``drain-guard demo``
    does: the agent's own default), is the default of ``--agent-max-hold``, else required."""
    parser.add_argument("--nodes", type=int, default=3, help="worker nodes (default: 3)")
    parser.add_argument(
        "--api",
        choices=("sim", "real"),
        default="sim",
        help="the API server: sim (the embedded simulator, default) or real (kube-apiserver,"
        " kube-controller-manager and etcd built by make control-plane, one started per run;"
        " the MCO actors are the same simulated ones, as clients of it)",
    )
    parser.add_argument(
        "--time-factor",
        type=float,
        help="simulated seconds per MCO second (default: 0.05 on sim, a 120 s build takes 6 s;"
        " 0.1 on real, whose requests take longer)",
    )
    parser.add_argument(
        "--timeline",
        choices=("short", "full", "none"),
        default="short",
        help="how much of each run's timeline to print (default: short)",
    )
    parser.add_argument(
        "--mco-version",
        choices=list(MCO_NAMES),
        default=McoVersion.V4_15.value,
        help="the MCO the simulated cluster plays: 4.15 (the seed's, default), 4.16-early (4.16 "
        "before PR 4484), 4.16 or 4.17 (4.16 from then, 4.17), 4.18-early (4.18 before the "
        "on-cluster-layering backport), 4.18 or 4.19 (4.18's latest z-stream, 4.19); "
        "docs/mco-versions.md",
    )
    max_hold_help = (
        "the agents' --max-hold in MCO seconds, scaled by --time-factor like every MCO duration"
    )
    if agent_max_hold is None:
        parser.add_argument(
            "--agent-max-hold",
            type=float,
            required=True,
            metavar="SECONDS",
            help=f"{max_hold_help}; drain-guard demo passes the agent's own default (the"
            " simulator does not import the agent, so it keeps no copy of it)",
        )
    else:
        parser.add_argument(
            "--agent-max-hold",
            type=float,
            default=agent_max_hold,
            metavar="SECONDS",
            help=f"{max_hold_help} (default: the agent's own, %(default)g)",
        )
    # Its errors name the command the user typed: drain-guard demo, or drain-guard-sim demo.
    parser.set_defaults(prog=parser.prog)
    parser.add_argument("--workdir", type=Path, help="keep host trees and logs here")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="give up after this many seconds per run"
    )


def run(args: argparse.Namespace) -> int:
    if args.time_factor is None:
        args.time_factor = 0.1 if args.api == "real" else 0.05
    if args.api == "real":
        missing = missing_binaries(default_bin_dir())
        if missing:
            print(
                f"{args.prog}: --api real needs {', '.join(missing)} in {default_bin_dir()}"
                " (make control-plane builds them)",
                file=sys.stderr,
            )
            return 1
    if args.nodes < 2:
        print(f"{args.prog}: --nodes must be at least 2", file=sys.stderr)
        return 2
    if not 0 < args.time_factor <= 1:
        print(f"{args.prog}: --time-factor must be in (0, 1]", file=sys.stderr)
        return 2
    if not args.agent_max_hold > 0:
        print(f"{args.prog}: --agent-max-hold must be above 0", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_demo(args, sys.stdout))
    except RuntimeError as exc:
        print(f"{args.prog}: {exc}", file=sys.stderr)
        return 1


# -- the agents ------------------------------------------------------------------------------


#: The agent's --noop-expect-within default (5 min), in MCO seconds, scaled for its agents.
NOOP_EXPECT_WITHIN = 300.0


class Agents:
    """One agent per node, as a DaemonSet would run them; a node's reboot restarts its agent."""

    def __init__(self, cluster: Cluster, logdir: Path, max_hold: float) -> None:
        self.cluster = cluster
        self.logdir = logdir
        # The agents' --max-hold in simulated seconds (MCO's scaled, as every duration here).
        self.max_hold = max(1, round(max_hold * cluster.timings.time_factor))
        # How long the noop-image guard waits for a build MCO is about to start, scaled alike
        # (the agent's --noop-expect-within is MCO's minutes, not the simulation's).
        self.expect_within_ms = max(
            1, round(NOOP_EXPECT_WITHIN * cluster.timings.time_factor * 1000)
        )
        self.procs: dict[str, AgentProcess] = {}
        self.decisions: list[AgentDecision] = []
        self._last: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._closed = False

    async def start(self, node: str) -> None:
        cluster = self.cluster
        agent = await spawn_agent(
            node,
            cluster.agent_kubeconfig(node),
            cluster.hosts[node],
            "--max-hold",
            f"{self.max_hold}s",
            "--noop-expect-within",
            f"{self.expect_within_ms}ms",
            log_path=self.logdir / f"agent-{node}.log",
            on_record=lambda record: self._decision(node, record),
        )
        self.procs[node] = agent
        try:
            await agent.wait_synced(START_TIMEOUT)
        except (TimeoutError, AgentError):
            await agent.kill()
            raise RuntimeError(
                f"the agent for {node} was not ready in time:\n{agent.log_text(20)}"
            ) from None

    def _decision(self, node: str, record: dict[str, Any]) -> None:
        """Put each change of an agent's decision on the shared timeline."""
        try:
            decision = AgentDecision.from_record(record)
        except ValueError as err:
            self.cluster.timeline.add(AGENT_ACTOR, node, f"unreadable decision record: {err}")
            return
        self.decisions.append(decision)
        if self._last.get(node) == (decision.outcome, decision.reasons):
            return
        self._last[node] = (decision.outcome, decision.reasons)
        if decision.outcome == "idle":
            return
        why = decision.why or decision.request
        self.cluster.timeline.add(AGENT_ACTOR, node, f"{decision.outcome}: {why}")

    async def restart(self, node: str) -> None:
        await self.stop(node)
        if not self._closed:  # a reboot finishing while the demo shuts down starts nothing
            await self.start(node)

    async def stop(self, node: str) -> None:
        agent = self.procs.pop(node, None)
        if agent is not None:
            await agent.stop(timeout=10, kill_after=True)

    async def stop_all(self) -> None:
        self._closed = True
        for node in list(self.procs):
            await self.stop(node)

    def holds(self) -> dict[str, set[str]]:
        return held_reasons(self.decisions)


#: The outcomes of the agent's decisions (the ``outcome`` field) that hold a drain.
HOLDING = frozenset({"hold", "holding", "update-hold"})


@dataclass(frozen=True)
class AgentDecision:
    """One decision of an agent as the demo reads it: the structured fields of the agent's
    ``decision`` log record (``--log-format json``), never its text."""

    node: str
    request: str
    outcome: str
    reasons: tuple[str, ...]
    why: str

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AgentDecision:
        """Raises ValueError naming the field when the record lacks one or has it mistyped."""
        reasons = record.get("reasons")
        if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
            raise ValueError(f"field 'reasons' is {reasons!r}, not a list of text")
        return cls(
            node=_text(record, "node"),
            request=_text(record, "request"),
            outcome=_text(record, "outcome"),
            reasons=tuple(reasons),
            why=_text(record, "why"),
        )


def _text(record: Mapping[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} is {value!r}, not text")
    return value


def held_reasons(decisions: Iterable[AgentDecision]) -> dict[str, set[str]]:
    """Node → the reasons of every hold its agent placed or kept."""
    out: dict[str, set[str]] = {}
    for decision in decisions:
        if decision.outcome in HOLDING:
            out.setdefault(decision.node, set()).update(decision.reasons)
    return out


# -- one run -----------------------------------------------------------------------------------


@dataclass
class RunResult:
    title: str
    outcome: Outcome
    timeline: Timeline
    time_factor: float
    initial_image: str
    holds: dict[str, set[str]] | None
    rollout_done: bool
    start: float  # timeline seconds when the MachineConfig was created
    gave_up: bool = False
    #: MCO 4.16+'s story: whether the control-plane pool finished its own rollout.
    masters_done: bool = False
    #: MCO 4.16+'s story: when the worker MachineConfig was deleted (timeline seconds; None:
    #: not reached), and whether the pool was back on the config before it.
    revert_start: float | None = None
    revert_done: bool = False


async def _run_once(args: argparse.Namespace, workdir: Path, with_agents: bool) -> RunResult:
    title = "with drain-guard" if with_agents else "without drain-guard"
    # A node reboots in 20 s here (a real one takes a minute or two): it shortens the demo
    # without changing the story. Every other duration is MCO's own.
    timings = Timings(reboot=20.0)
    version = MCO_NAMES[args.mco_version]
    async with contextlib.AsyncExitStack() as stack:
        cluster: Cluster
        # 4.16+: one control-plane node, which runs the build (build pods tolerate its taint)
        # and MCO's machine-os-builder, as on a real cluster.
        masters = 0 if version is McoVersion.V4_15 else 1
        build_node = "master-0" if masters else None
        if args.api == "real":
            # A control plane of the run's own: the run's names are the simulator's.
            plane = await asyncio.to_thread(
                ControlPlane.start, default_bin_dir(), workdir / "control-plane"
            )
            stack.push_async_callback(asyncio.to_thread, plane.stop)
            cluster = RealCluster(
                plane, workdir, nodes=args.nodes, time_factor=args.time_factor,
                timings=timings, version=version, masters=masters, build_node=build_node,
            )  # fmt: skip
        else:
            cluster = SimCluster(
                workdir, nodes=args.nodes, time_factor=args.time_factor, timings=timings,
                version=version, masters=masters, build_node=build_node,
            )  # fmt: skip
        await stack.enter_async_context(cluster)
        agents: Agents | None = None
        rollout_done = gave_up = False
        try:
            if with_agents:
                agents = Agents(cluster, workdir, args.agent_max_hold)
                for node in cluster.all_nodes:
                    await agents.start(node)
                cluster.reboot_hooks.append(agents.restart)
            if masters:
                story = await _control_plane_update(cluster, args)
                result = _result(
                    title, cluster, agents, story.rollout_done, story.gave_up, story.masters_done
                )
                result.revert_start, result.revert_done = story.revert_start, story.revert_done
                return result
            # The seed's order: the node controller's sync lands between the render and the
            # build's BuildPending (only MCO 4.15 acts on it; cluster.create_machine_config).
            await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
            try:
                build = await cluster.wait_build_done(timeout=args.timeout)
                if build.succeeded:
                    await cluster.wait_rollout_done(timeout=args.timeout)
                    rollout_done = True
                else:
                    # The failed build stops the rollout; let the drain in progress finish.
                    node = build.node or cluster.build_node
                    await cluster.wait_for(
                        lambda: cluster.machines[node].reboots > 0, timeout=args.timeout
                    )
            except TimeoutError:
                gave_up = True
                cluster.timeline.add("demo", None, f"gave up after {args.timeout:g}s")
        finally:
            if agents is not None:
                cluster.reboot_hooks.clear()
                await agents.stop_all()
        return _result(title, cluster, agents, rollout_done, gave_up)


def _result(
    title: str,
    cluster: Cluster,
    agents: Agents | None,
    rollout_done: bool,
    gave_up: bool,
    masters_done: bool = False,
) -> RunResult:
    return RunResult(
        title=title,
        outcome=cluster.outcome(),
        timeline=cluster.timeline,
        time_factor=cluster.timings.time_factor,
        initial_image=cluster.initial_image,
        holds=agents.holds() if agents is not None else None,
        rollout_done=rollout_done,
        start=next((e.t for e in cluster.timeline.entries if e.actor == "user"), 0.0),
        gave_up=gave_up,
        masters_done=masters_done,
    )


@dataclass
class _PlaneStory:
    masters_done: bool = False
    rollout_done: bool = False
    gave_up: bool = False
    revert_start: float | None = None
    revert_done: bool = False


async def _control_plane_update(cluster: Cluster, args: argparse.Namespace) -> _PlaneStory:
    """MCO 4.16+'s story: a MachineConfig of the worker pool starts its build on the
    control-plane node; while it runs, a MachineConfig of the control-plane pool makes that
    pool drain and reboot its node, which evicts the build pod. Once the worker pool has
    rolled out, the worker MachineConfig is deleted: the pool goes back to the config built
    before (D1: on 4.16/4.17 every worker is sent a same-image update that no build will
    replace; 4.18+ rolls the old build's image out)."""
    story = _PlaneStory()
    rendered = await cluster.create_machine_config("99-worker-seed")
    try:
        async with asyncio.timeout(args.timeout):
            await cluster.timeline.wait_for(
                lambda e: e.actor == "build-controller" and " is Running in pod " in e.message
            )
        master_config = await cluster.create_master_config("99-master-chrony")
        build = await cluster.wait_build_done(timeout=args.timeout)
        await cluster.wait_for(
            lambda: cluster.pool_updated(cluster.master_pool, master_config), args.timeout
        )
        story.masters_done = True
        if not build.succeeded:
            return story
        await cluster.wait_rollout_done(timeout=args.timeout, config=rendered)
        story.rollout_done = True
        story.revert_start = cluster.timeline.since_start(time.monotonic())
        await cluster.delete_machine_config("99-worker-seed")
        await cluster.wait_for(
            lambda: cluster.pool_updated(cluster.pool, cluster.initial_config), args.timeout
        )
        story.revert_done = True
    except TimeoutError:
        cluster.timeline.add("demo", None, f"gave up after {args.timeout:g}s")
        story.gave_up = True
    return story


# -- output ------------------------------------------------------------------------------------


def _short(text: str) -> str:
    """Shorter registry paths, digests and rendered-config hashes, for 100-column terminals."""
    text = text.replace(
        "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/", ""
    )
    text = re.sub(r"sha256:([0-9a-f]{12})[0-9a-f]{52}", r"sha256:\1…", text)
    return re.sub(r"(rendered-[a-z0-9-]+?-[0-9a-f]{8})[0-9a-f]{24}", r"\1…", text)


def _key(entry: TimelineEntry) -> bool:
    return any(entry.actor == a and t in entry.message for a, t in KEY_LINES)


def print_timeline(result: RunResult, mode: str, out: TextIO) -> None:
    """The run's timeline from the MachineConfig's creation, repeated lines folded."""
    if mode == "none":
        return
    entries = [e for e in result.timeline.entries if mode == "full" or _key(e)]
    t0 = result.start
    out.write(f"\n== Timeline {result.title} (MCO seconds since the MachineConfig) ==\n")
    shown: list[tuple[TimelineEntry, int]] = []
    for entry in entries:
        if entry.t < t0 and mode != "full":
            continue
        last = shown[-1][0] if shown else None
        if last is not None and (last.actor, last.node, last.message) == (
            entry.actor,
            entry.node,
            entry.message,
        ):
            shown[-1] = (last, shown[-1][1] + 1)
        else:
            shown.append((entry, 1))
    for entry, count in shown:
        moved = TimelineEntry(entry.t - t0, entry.actor, entry.node, entry.message)
        repeat = f"  (x{count})" if count > 1 else ""
        out.write(_short(moved.format(result.time_factor)) + repeat + "\n")
    if result.gave_up and mode != "full":
        out.write("\n(the run did not finish; its last steps:)\n")
        for entry in result.timeline.entries[-30:]:
            moved = TimelineEntry(entry.t - t0, entry.actor, entry.node, entry.message)
            out.write(_short(moved.format(result.time_factor)) + "\n")


def _digest(image: str) -> str:
    return image.rpartition("@")[2][:19]


def _cordon_text(c: Cordon, result: RunResult) -> str:
    at = (c.t - result.start) / result.time_factor
    plan = ""
    if c.update is not None:
        kind = "same image" if c.update.same_image else "new image"
        plan = (
            f"; the MCD's update: {_digest(c.update.from_image)} -> "
            f"{_digest(c.update.to_image)} ({kind})"
        )
    return f"{c.node} at {at:.0f}s{plan}"


def verdict(without: RunResult, with_: RunResult) -> tuple[list[tuple[str, str, str]], bool]:
    """The rows of the verdict table and whether the run with agents met every goal."""

    def during(r: RunResult) -> str:
        cs = r.outcome.during_build()
        return str(len(cs)) + (f" ({', '.join(c.node for c in cs)})" if cs else "")

    def build(r: RunResult) -> str:
        b = r.outcome.build
        if b is None:
            return "none"
        reason = f" ({b.reason})" if b.reason else ""
        return f"{b.phase}{reason} on {b.node}"

    def unchanged(r: RunResult) -> str:
        return str(len(r.outcome.unchanged_image_cordons()))

    def holds(r: RunResult) -> str:
        if r.holds is None:
            return "-"
        if not r.holds:
            return "none"
        return "; ".join(f"{n}: {', '.join(sorted(rs))}" for n, rs in sorted(r.holds.items()))

    def after(r: RunResult) -> str:
        cs = r.outcome.after_build()
        return str(len(cs)) + (f" ({', '.join(c.node for c in cs)})" if cs else "")

    def rollout(r: RunResult) -> str:
        return "complete" if r.rollout_done else "stopped (build failed)"

    rows = [
        ("drains (cordons) during the build", during(without), during(with_)),
        ("build outcome", build(without), build(with_)),
        ("drains while desired image = booted", unchanged(without), unchanged(with_)),
        ("holds (reasons)", holds(without), holds(with_)),
        ("drains after the build", after(without), after(with_)),
        ("rollout of the new image", rollout(without), rollout(with_)),
    ]
    b = with_.outcome.build
    ok = (
        b is not None
        and b.succeeded
        and not with_.outcome.during_build()
        and not with_.outcome.unchanged_image_cordons()
        and with_.rollout_done
    )
    return rows, ok


def plane_verdict(without: RunResult, with_: RunResult) -> tuple[list[tuple[str, str, str]], bool]:
    """MCO 4.16+'s story: the rows of the verdict table and whether the run with agents met
    every goal (no build pod evicted, the build succeeded, both pools rolled out)."""

    def evicted(r: RunResult) -> str:
        pods = r.outcome.build_pods_evicted()
        return str(len(pods)) + (
            f" ({', '.join(p.rpartition('/')[2] for p in pods)})" if pods else ""
        )

    def build(r: RunResult) -> str:
        b = r.outcome.build
        if b is None:
            return "none"
        reason = f" ({b.reason})" if b.reason else ""
        took = (b.finished - b.started) / r.time_factor
        return f"{b.phase}{reason} after {took:.0f}s"

    def holds(r: RunResult) -> str:
        if r.holds is None:
            return "-"
        if not r.holds:
            return "none (nothing needed holding)"
        return "; ".join(f"{n}: {', '.join(sorted(rs))}" for n, rs in sorted(r.holds.items()))

    def during(r: RunResult) -> str:
        cs = r.outcome.during_build()
        return str(len(cs)) + (f" ({', '.join(c.node for c in cs)})" if cs else "")

    def done(flag: bool) -> str:
        return "complete" if flag else "not complete"

    def revert_drains(r: RunResult) -> str:
        if r.revert_start is None:
            return "-"
        cs = [c for c in r.outcome.unchanged_image_cordons() if c.t >= r.revert_start]
        return str(len(cs)) + (f" ({', '.join(c.node for c in cs)})" if cs else "")

    def revert_holds(r: RunResult) -> str:
        if r.holds is None or r.revert_start is None:
            return "-"
        held = revert_held(r)
        return ", ".join(held) if held else "none: let through at once"

    rows = [
        ("build pods evicted", evicted(without), evicted(with_)),
        ("build outcome", build(without), build(with_)),
        ("drains (cordons) during the build", during(without), during(with_)),
        ("holds (reasons)", holds(without), holds(with_)),
        ("control-plane pool's rollout", done(without.masters_done), done(with_.masters_done)),
        ("worker pool's rollout (new image)", done(without.rollout_done), done(with_.rollout_done)),
        ("revert: drains for the booted image", revert_drains(without), revert_drains(with_)),
        ("revert: drains held", revert_holds(without), revert_holds(with_)),
        ("revert: pool back on its config", done(without.revert_done), done(with_.revert_done)),
    ]
    b = with_.outcome.build
    ok = (
        b is not None
        and b.succeeded
        and not with_.outcome.build_pods_evicted()
        and with_.masters_done
        and with_.rollout_done
        and with_.revert_done
        and not revert_held(with_)
    )
    return rows, ok


def revert_held(r: RunResult) -> list[str]:
    """The nodes whose agent held a drain after the revert began."""
    if r.revert_start is None:
        return []
    start = r.revert_start
    return sorted(
        {
            e.node or ""
            for e in r.timeline.entries
            if e.actor == AGENT_ACTOR and e.t >= start and e.message.startswith(tuple(HOLDING))
        }
    )


def revert_decisions(r: RunResult) -> list[str]:
    """Each agent's first decision after the revert began that was not idle."""
    if r.revert_start is None:
        return []
    seen: dict[str, str] = {}
    for e in r.timeline.entries:
        if e.actor == AGENT_ACTOR and e.t >= r.revert_start and e.node and e.node not in seen:
            seen[e.node] = f"{e.node}: {e.message}"
    return [seen[n] for n in sorted(seen)]


EXPLAINED_PLANE = (
    "MCO {v} waits for the build before it targets any worker, so the worker pool drains"
    " nothing during the build. But MCO's build pods tolerate the control-plane taint, and the"
    " control-plane pool rolls out on its own: its drain of the node that runs the build evicts"
    " the build pod{lost}. drain-guard held that one drain (build-pod) while the build ran,"
    " then let it go: the control-plane node drained once, after the build, and the worker pool"
    " rolled the new image out.{builder}"
)


EXPLAINED_4_15 = (
    "  MCO 4.15's daemon fixes its target image when an update starts. The update begun\n"
    "  during the build (same image) was held by drain-guard while its drain was harmful\n"
    "  (the build pod ran) and pointless (no new image existed). Its drain once released\n"
    "  (the same image, listed above) is fine: the build was over, so it evicted no build,\n"
    "  and the node's desired image was the new one by then, so it is the one drain the\n"
    '  node needed for it. The daemon rebooted without a rebase ("Image pullspecs equal"),\n'
    '  then started the real update, whose drain was already done ("drain is already\n'
    '  completed on this node"), and rebased into the new image: one drain for the node, as\n'
    "  for every other. Holding longer would only have delayed that same drain: the daemon\n"
    "  keeps the target it fixed until the update ends. The other nodes then updated one\n"
    "  at a time, each with one drain for a real image change.\n"
)


def print_verdict(
    without: RunResult, with_: RunResult, out: TextIO, version: McoVersion = McoVersion.V4_15
) -> bool:
    if version is not McoVersion.V4_15:
        return _print_plane_verdict(without, with_, out, version)
    rows, ok = verdict(without, with_)
    head = ("", without.title, with_.title)
    widths = [max(len(r[i]) for r in (*rows, head)) for i in range(3)]
    out.write("\n== Verdict ==\n")
    for row in (head, *rows):
        out.write(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )
    out.write("\nDrains after the build, explained:\n")
    for c in with_.outcome.after_build():
        out.write(f"  - {_cordon_text(c, with_)}\n")
    out.write(EXPLAINED_4_15)
    out.write(
        "\nPASS: no drain during the build, the build succeeded, no drain while the desired image\n"
        "was the booted one.\n"
        if ok
        else "\nFAIL: see the verdict above.\n"
    )
    return ok


def _table(rows: list[tuple[str, str, str]], head: tuple[str, str, str], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in (*rows, head)) for i in range(3)]
    out.write("\n== Verdict ==\n")
    for row in (head, *rows):
        out.write(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def _print_plane_verdict(
    without: RunResult, with_: RunResult, out: TextIO, version: McoVersion
) -> bool:
    rows, ok = plane_verdict(without, with_)
    _table(rows, ("", without.title, with_.title), out)
    if version.job_builds:
        lost = (
            " (a Job: its pod is replaced and the build starts over, its first minutes lost;"
            " a fourth lost pod fails it), and with it machine-os-builder, whose drain during a"
            " build makes 4.18/4.19 build again and degrade the pool (OCPBUGS-58238, not played"
            " by the simulator)"
        )
        builder = (
            " With no build pod there, the agent would still hold the drain of the node that runs"
            " machine-os-builder while a MachineOSBuild is in flight."
        )
    else:
        lost, builder = " and the build fails: the worker pool's update stops", ""
    text = EXPLAINED_PLANE.format(v=version.value, lost=lost, builder=builder)
    wrapped = textwrap.fill(
        text, width=88, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )
    out.write("\nExplained:\n" + wrapped + "\n")
    if version.job_builds:
        revert = (
            "The revert: MCO {v} reuses the old MachineOSBuild and names its image, so every"
            " worker's drain was for a real update: nothing needed holding."
        )
    else:
        revert = (
            "The revert: MCO {v} starts no build for a config it built before and sends every"
            " worker that config with the image it runs (D1): a drain and a reboot that no build"
            " will replace. drain-guard reads the pool's MachineOSBuild and MachineOSConfig,"
            " sees nothing coming, and lets each such drain through at once rather than hold it"
            " to --max-hold."
        )
    out.write(textwrap.fill(revert.format(v=version.value), width=88, initial_indent="  ",
                            subsequent_indent="  ", break_on_hyphens=False) + "\n")  # fmt: skip
    for line in revert_decisions(with_):
        out.write(f"    {_short(line)}\n")
    if with_.holds == {}:
        out.write("\nNothing needed holding in this run.\n")
    out.write(
        "\nPASS: no build pod evicted, the build succeeded, both pools rolled out, no drain"
        " held in the revert.\n"
        if ok
        else "\nFAIL: see the verdict above.\n"
    )
    return ok


def times_note(api: str, time_factor: float) -> str:
    """What the timelines' seconds are: MCO's, the run's scaled back up; on the real API
    server its own delays are scaled up with them, which a reader would not guess."""
    speed = f"{1 / time_factor:g}"
    note = (
        f"Times are MCO seconds: every MCO duration is played {speed}x faster (--time-factor"
        f" {time_factor:g}), and the timelines scale the run's clock back up"
    )
    if api == "real":
        note += f", so the real API server's own delays show {speed}x longer than they took"
    return textwrap.fill(note + ".", width=86) + "\n"


async def _demo(args: argparse.Namespace, out: TextIO) -> int:
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return await _demo_in(args, args.workdir, out)
    with tempfile.TemporaryDirectory(prefix="drain-guard-demo-") as tmp:
        return await _demo_in(args, Path(tmp), out)


async def _demo_in(args: argparse.Namespace, base: Path, out: TextIO) -> int:
    version = MCO_NAMES[args.mco_version]
    if args.api == "real":
        out.write(
            "drain-guard demo --api real: the cluster's API server is a real kube-apiserver\n"
            "with kube-controller-manager and etcd (one started per run, from make\n"
            "control-plane); the MCO actors are the simulated ones, as its clients.\n\n"
        )
    if version is McoVersion.V4_15:
        out.write(
            "drain-guard demo: the seed report (MCO 4.15 on-cluster layering) in a simulated\n"
            f"{args.nodes}-worker cluster. Creating a MachineConfig starts an image build on\n"
            "worker-0. MCO 4.15's node controller races the build controller: here it loses,\n"
            "as in the seed (a slow build start, and a node label written by another controller\n"
            "that queued the node controller just after the render), and targets worker-0 with\n"
            "the new config but the old image. (--mco-version 4.18 plays a later MCO.)\n"
        )
    else:
        out.write(
            f"drain-guard demo: MCO {args.mco_version} on-cluster layering in a simulated\n"
            f"cluster of {args.nodes} layered workers and one control-plane node, master-0.\n"
            "Creating a worker MachineConfig starts an image build on master-0 (MCO's build\n"
            "pods tolerate the control-plane taint); while it runs, a MachineConfig of the\n"
            f"control-plane pool makes MCO drain master-0. (MCO {args.mco_version} waits for\n"
            "the build before it targets any worker: the seed's race is 4.15's.)\n"
        )
        if args.mco_version != version.value:
            out.write(f"(MCO {args.mco_version} is played by the simulator's {version.value}.)\n")
    out.write(times_note(args.api, args.time_factor))
    out.write("\n-- run 1: without drain-guard --\n")
    out.flush()
    without = await _run_once(args, base / "without", with_agents=False)
    print_timeline(without, args.timeline, out)
    out.write("\n-- run 2: with one drain-guard agent per node --\n")
    out.flush()
    with_ = await _run_once(args, base / "with", with_agents=True)
    print_timeline(with_, args.timeline, out)
    ok = print_verdict(without, with_, out, version)
    out.flush()
    return 0 if ok else 1
