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
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from drain_guard_sim.actors.mco import McoVersion, Timings
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.controlplane import ControlPlane, default_bin_dir, missing_binaries
from drain_guard_sim.harness.demoagents import Agents, Cluster
from drain_guard_sim.harness.demoreport import RunResult, print_timeline, print_verdict, times_note
from drain_guard_sim.harness.realcluster import RealCluster

__all__ = ["configure_parser", "run"]

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


# -- one run -----------------------------------------------------------------------------------


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
