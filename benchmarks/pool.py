"""The pool, measured (issue 38): does drain-guard ever make a pool slower than MCO alone?

Per MCO version and scenario, the simulated cluster (``SimCluster``, MCO's actors) plays the
scenario once with MCO alone and once with an agent per node (``drain-guard run`` processes,
as the demo runs them), and reports, from the moment the scenario's change is made:

- ``pointless``: drains the MCC carried out for the image the node already ran (X→X);
- ``evicted``: build pods the MCC evicted;
- ``finished``: MCO seconds until every node runs the pool's target, Done and uncordoned
  (None: not by the deadline, the pool stalled);
- ``longest_hold`` (MCO seconds) and ``max_hold_ends``: holds the agent ended only because
  they reached ``--max-hold``.

Scenarios (each where the version has it):

- ``seed``: a MachineConfig, the seed's order (4.15's node controller wins its race);
- ``revert``: two rollouts, then the second MachineConfig deleted: the pool goes back to a
  config built before (D1);
- ``stuck-build``: a second MachineConfig while the first one's build runs (4.15, D6);
- ``failed-build``: the seed's MachineConfig, its build pod deleted by someone else;
- ``admin-cordon``: an admin cordons a node while the build runs, and uncordons it when the
  build is done;
- ``degraded-pool``: a node Degraded when the MachineConfig comes; the admin repairs it
  ``REPAIR`` MCO seconds later.

Durations are MCO's scaled by ``--time-factor``; the agents' ``--max-hold`` is MCO's 45 min
scaled alike, so a hold that runs to it shows as 2700 s. Run with modest counts on a shared
machine: ``python -m benchmarks.pool`` (every version and scenario, about half an hour), or
``--versions 4.16 --scenarios revert``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import write_result
from drain_guard_sim.actors.mco import (
    CURRENT_CONFIG,
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    MCO_NAMESPACE,
    REASON,
    STATE,
    McoVersion,
    Timings,
    annotations_of,
    condition_true,
)
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.demoagents import Agents

SCENARIOS = ("seed", "revert", "stuck-build", "failed-build", "admin-cordon", "degraded-pool")
#: MCO's own --max-hold default, in MCO seconds.
MAX_HOLD = 2700.0
#: How long a scenario may take, in MCO seconds, before the pool counts as stalled.
DEADLINE = 3 * 3600.0
#: When the admin repairs the Degraded node of ``degraded-pool`` (MCO seconds after the change).
REPAIR = 600.0
DEFAULT_VERSIONS = (McoVersion.V4_15, McoVersion.V4_16, McoVersion.V4_18)
#: Real seconds the drain controller lets pass between a drain request and the sync acting on
#: it (``Timings.drain_request_floor``): MCO's own shortest gap on its timer's path, 2 s, at
#: the default time factor; a sync an earlier Node event queued may land 7 ms after a request
#: here, under the agent's reaction, where on a cluster it lands 0.7 s after it.
DRAIN_REQUEST_FLOOR = 0.02


def applies(version: McoVersion, scenario: str) -> bool:
    """``stuck-build`` is 4.15's alone; ``revert`` needs kept builds (4.16+)."""
    if scenario == "stuck-build":
        return version is McoVersion.V4_15
    if scenario == "revert":
        return version is not McoVersion.V4_15
    return True


@dataclass(frozen=True)
class PoolRun:
    version: str
    scenario: str
    agents: bool
    pointless: int
    evicted: int
    finished: float | None
    longest_hold: float
    max_hold_ends: int
    #: MCO seconds the rebooted nodes' daemons waited for their agents to be ready again:
    #: the harness restarts a node's agent during the node's downtime (60 MCO s) and starts
    #: the daemon once both are over, and an agent process's start (about a second of real
    #: time on a loaded machine) is a hundred MCO seconds here.
    agent_restarts: float = 0.0


def _done(cluster: SimCluster, config: str) -> bool:
    """Every node on ``config``, Done, its last request an answered uncordon."""
    for name in cluster.node_names:
        ann = annotations_of(cluster.api.get("nodes", name))
        if not (
            ann.get(CURRENT_CONFIG) == config
            and ann.get(STATE) == "Done"
            and ann.get(DESIRED_DRAIN) == ann.get(LAST_APPLIED_DRAIN) == f"uncordon-{config}"
        ):
            return False
    return True


def _holds(cluster: SimCluster, since: int, factor: float) -> list[float]:
    """Each hold's length in MCO seconds (desiredDrain hold-… until it is not), from the
    write log; a hold still on at the end counts until now."""
    started: dict[str, float] = {}
    out: list[float] = []
    for rec in cluster.api.writes("nodes", since=since):
        before = annotations_of(rec.before or {}).get(DESIRED_DRAIN, "")
        after = annotations_of(rec.after or {}).get(DESIRED_DRAIN, "")
        if after.startswith("hold-") and not before.startswith("hold-"):
            started[rec.name] = rec.time
        elif before.startswith("hold-") and not after.startswith("hold-"):
            began = started.pop(rec.name, None)
            if began is not None:
                out.append((rec.time - began) / factor)
    out.extend((time.monotonic() - t) / factor for t in started.values())
    return out


async def _scenario(cluster: SimCluster, scenario: str) -> tuple[int, Callable[[], bool]]:
    """Make the scenario's change; (the write log's position before it, its end)."""
    api = cluster.api
    if scenario == "revert":
        first = await cluster.create_machine_config("99-worker-first")
        await cluster.wait_for(lambda: _done(cluster, first), timeout=600)
        second = await cluster.create_machine_config("99-worker-second")
        await cluster.wait_for(lambda: _done(cluster, second), timeout=600)
        since = api.resource_version
        api.delete("machineconfigs", "99-worker-second")
        return since, lambda: _done(cluster, first)
    since = api.resource_version
    if scenario == "degraded-pool":
        bad = {STATE: "Degraded", REASON: "failed to drain node: timed out"}
        api.patch("nodes", cluster.node_names[-1], {"metadata": {"annotations": bad}})
        await cluster.wait_for(
            lambda: condition_true(api.get("machineconfigpools", cluster.pool), "Degraded"),
            timeout=600,
        )
    config = await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
    if scenario == "stuck-build":
        await cluster.wait_for(cluster.build_pods, timeout=600)
        config = await cluster.create_machine_config("99-worker-second")
    elif scenario == "failed-build":
        [pod] = await cluster.wait_for(cluster.build_pods, timeout=600)
        api.delete("pods", pod["metadata"]["name"], MCO_NAMESPACE)
    elif scenario == "admin-cordon":
        await cluster.wait_for(cluster.build_pods, timeout=600)
        other = cluster.node_names[-1]
        api.patch("nodes", other, {"spec": {"unschedulable": True}})
        await cluster.wait_build_done(timeout=600)
        api.patch("nodes", other, {"spec": {"unschedulable": None}})
    elif scenario == "degraded-pool":
        await asyncio.sleep(cluster.timings.s(REPAIR))
        good = {STATE: "Done", REASON: ""}
        api.patch("nodes", cluster.node_names[-1], {"metadata": {"annotations": good}})
    final = config
    return since, lambda: _done(cluster, final)


async def play(
    version: McoVersion, scenario: str, with_agents: bool, workdir: Path, factor: float, nodes: int
) -> PoolRun:
    """One scenario on one version, with or without agents."""
    timings = Timings(drain_request_floor=DRAIN_REQUEST_FLOOR)
    async with SimCluster(
        workdir, nodes=nodes, time_factor=factor, version=version, timings=timings
    ) as cluster:
        agents: Agents | None = None
        restarts: list[tuple[float, float]] = []  # (when, how long in MCO seconds)
        if with_agents:
            agents = Agents(cluster, workdir, MAX_HOLD)
            for node in cluster.node_names:
                await agents.start(node)

            downtime = cluster.timings.s(cluster.timings.reboot)

            async def restart(node: str) -> None:
                # Run from the start of the node's downtime: the daemon waits only for what
                # the agent's start takes beyond it.
                assert agents is not None
                t0 = time.monotonic()
                await agents.restart(node)
                beyond = max(0.0, time.monotonic() - t0 - downtime)
                restarts.append((t0, beyond / factor))

            cluster.reboot_hooks.append(restart)
        try:
            began = time.monotonic()
            since, done = await _scenario(cluster, scenario)
            if scenario == "revert":
                began = time.monotonic()
            finished: float | None = None
            try:
                await cluster.wait_for(done, timeout=cluster.timings.s(DEADLINE))
                finished = (time.monotonic() - began) / factor
            except TimeoutError:
                pass
            holds = _holds(cluster, since, factor)
            start = cluster.timeline.since_start(began)
            cordons = [c for c in cluster.cordons() if c.t >= start]
            evicted = [
                e
                for e in cluster.evictions()
                if e[0] >= start and e[2].startswith(f"{MCO_NAMESPACE}/build-")
            ]
            expired = [
                d for d in (agents.decisions if agents else []) if d.outcome == "release:expired"
            ]
            return PoolRun(
                version=version.value,
                scenario=scenario,
                agents=with_agents,
                pointless=sum(1 for c in cordons if c.unchanged_image),
                evicted=len(evicted),
                finished=finished,
                longest_hold=max(holds, default=0.0),
                max_hold_ends=len({(d.node, d.request) for d in expired}),
                agent_restarts=sum(seconds for when, seconds in restarts if when >= began),
            )
        finally:
            if agents is not None:
                cluster.reboot_hooks.clear()
                await agents.stop_all()


def _less_restarts(run: PoolRun) -> float | None:
    """The pool's time with drain-guard less its daemons' waits for their agents: with
    ``maxUnavailable`` 1 a node's reboot is on the pool's path, and so is that wait, which on
    a real node is a few seconds (docs/benchmarks.md, "The pool")."""
    return None if run.finished is None else run.finished - run.agent_restarts


def _fmt(seconds: float | None) -> str:
    return "stalled" if seconds is None else f"{seconds:.0f}"


def table(runs: Sequence[PoolRun]) -> str:
    """The Markdown table docs/benchmarks.md shows: MCO alone | with drain-guard."""
    lines = [
        "| MCO | scenario | pointless drains | build pods evicted | pool finished (MCO s) "
        "| of which agents' restarts | less the restarts | longest hold (MCO s) "
        "| holds ended at max-hold |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(r.version, r.scenario, r.agents): r for r in runs}
    for version, scenario, _ in sorted({(r.version, r.scenario, 0) for r in runs}):
        alone, guarded = (
            by_key.get((version, scenario, False)),
            by_key.get((version, scenario, True)),
        )
        if alone is None or guarded is None:
            continue
        lines.append(
            f"| {version} | {scenario} | {alone.pointless} / {guarded.pointless} "
            f"| {alone.evicted} / {guarded.evicted} "
            f"| {_fmt(alone.finished)} / {_fmt(guarded.finished)} "
            f"| {guarded.agent_restarts:.0f} | {_fmt(_less_restarts(guarded))} "
            f"| {guarded.longest_hold:.0f} | {guarded.max_hold_ends} |"
        )
    return "\n".join(lines)


async def run_all(
    versions: Sequence[McoVersion], scenarios: Sequence[str], factor: float, nodes: int
) -> list[PoolRun]:
    runs: list[PoolRun] = []
    with tempfile.TemporaryDirectory(prefix="pool-bench-") as tmp:
        for version in versions:
            for scenario in scenarios:
                if not applies(version, scenario):
                    continue
                for with_agents in (False, True):
                    workdir = Path(tmp) / f"{version.value}-{scenario}-{int(with_agents)}"
                    workdir.mkdir()
                    run = await play(version, scenario, with_agents, workdir, factor, nodes)
                    print(asdict(run), flush=True)
                    runs.append(run)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pool", description=__doc__)
    p.add_argument(
        "--versions",
        nargs="+",
        type=McoVersion,
        default=list(DEFAULT_VERSIONS),
        help="MCO versions (default: 4.15 4.16 4.18)",
    )
    p.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    p.add_argument("--time-factor", type=float, default=0.01, help="scales MCO's durations")
    p.add_argument("--nodes", type=int, default=2, help="workers in the pool")
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    runs = asyncio.run(run_all(a.versions, a.scenarios, a.time_factor, a.nodes))
    print(table(runs))
    params = {"time_factor": a.time_factor, "nodes": a.nodes, "max_hold": MAX_HOLD}
    result = {"params": params, "runs": [asdict(r) for r in runs], "table": table(runs)}
    print(f"wrote {write_result('pool', result, a.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
