"""API load: requests per node per hour at rest, after a 410 and during a rollout, per verb,
every one sent by real ``drain-guard run`` processes.

How an hour is measured in minutes. The agent renews its watches itself: it asks for
``timeoutSeconds`` = ``--watch-timeout`` ±10 % (``drain_guard.kube.listwatch``), which a real
API server honours, and a real server sends a bookmark about every 60 s; its confinement
self-check runs every ``--confinement-check-interval``. So at rest the hourly load is set by
those three clocks. This benchmark divides all three by ``--time-scale`` k (the agents' flags,
taken from ``drain-guard run``'s own defaults, and the simulator's bookmark interval) and
runs 3600/k seconds: one simulated hour, counted by the simulator per user and verb, not
extrapolated from a rate. Nothing else the agent does at rest depends on time (no polling, no
resync).

Per cluster size (``--sizes``): the cluster's Nodes, ``--processes`` agent processes on the
first of them, each with its own identity, counted apart from everything else. Bookmarks are
shown to carry the watches: the simulator keeps only ``--history`` events while other Nodes
change ``--churn`` times a second, so a watch renewed from a resourceVersion older than a few
seconds would get 410 and re-list. A LIST after start-up at rest therefore means the
bookmarks failed (or the self-check's one-Node LIST, hourly). Then a forced compaction shows
the one case that must re-list (a 410), and a rollout (``benchmarks.rollout``) adds the
agents' requests for one update of each of their nodes (the hold, its release, the Events).

The polling script (``benchmarks.baseline``) runs beside the agents in real time for the same
wall-clock window; its hourly figure is that window's count x 3600 / window.

``--revision REF`` counts git revision REF's agent, built as deployed, instead of this
environment's: the before of a change, counted by the same benchmark.

``python -m benchmarks.apiload [--time-scale K] [--sizes N ...] [--processes P] [--revision REF]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import deployed
from benchmarks.baseline import Poller
from benchmarks.common import (
    IMAGE_A,
    WAIT,
    config_name,
    diff_counts,
    requests_by_verb,
    seconds_to_ready,
    seed_api,
    start_agent,
    stop_agent,
    write_result,
)
from benchmarks.rollout import roll
from drain_guard.settings.agent import Settings, add_run_arguments, settings_from
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.resources import RESOURCES, machine_os_resources
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from drain_guard_sim.harness.agentproc import agent_user

#: The shortest ``--watch-timeout`` the agent takes (a smoke test's hour is shorter).
MIN_WATCH_TIMEOUT = 5.0
POLLER_NODE = "poll-0"
POLLER_USER = "system:serviceaccount:drain-guard:poll-script"
REAL_BOOKMARK_INTERVAL = 60.0


@dataclass(frozen=True)
class Params:
    time_scale: int = 30
    history: int = 50
    churn: float = 10.0
    poll_interval: float = 2.0
    sizes: tuple[int, ...] = (10, 500, 2000, 5000)
    processes: int = 3
    revision: str | None = None
    #: Serve MachineOSBuilds and MachineOSConfigs (``v1``, as MCO 4.18+ does): the agents
    #: then list and watch them too (the noop-image rule's reads); else pools alone (4.15).
    machine_os: bool = False


async def measure_size(
    params: Params, size: int, workdir: Path, agent: deployed.Agent | None = None
) -> dict[str, Any]:
    """Every request ``params.processes`` real ``drain-guard run`` processes (``agent``, or
    this environment's) send on a cluster of ``size`` Nodes: at start, in one simulated hour
    at rest, after a forced 410 and in one rollout of their nodes."""
    k = params.time_scale
    nodes = [f"worker-{i}" for i in range(max(size, params.processes + 1))]
    agents = nodes[: params.processes]
    others = nodes[params.processes :][:10]  # the churn: Nodes no agent watches
    resources = RESOURCES + (machine_os_resources("v1") if params.machine_os else ())
    async with SimApiServer(
        bookmark_interval=REAL_BOOKMARK_INTERVAL / k, history=params.history, resources=resources
    ) as api:
        seed_api(api, [*nodes, POLLER_NODE])
        flags = scaled_clocks(k)
        here = workdir / f"size-{size}"
        before_start = _counts(api, agents)
        procs = [await start_agent(api, n, here, *flags, agent=agent) for n in agents]
        poll_host = HostFS(here / "hosts" / POLLER_NODE, IMAGE_A)
        poller = Poller(
            POLLER_NODE,
            api.kubeconfig(POLLER_USER, here / "kubeconfigs" / "poller"),
            poll_host.root,
            poll_host.cmdline_file,
            params.poll_interval,
        )
        churn = asyncio.create_task(_churn(api, others, params.churn))
        try:
            for proc in procs:
                await seconds_to_ready(proc)
            await asyncio.sleep(2.0)  # ready means listed; the watch requests follow
            start = _counts(api, agents)
            await poller.start()
            poll_before = requests_by_verb(api, POLLER_USER)
            window = 3600.0 / k
            began = time.monotonic()
            await asyncio.sleep(window)
            elapsed = time.monotonic() - began
            rest = _counts(api, agents)
            poll_rest = diff_counts(requests_by_verb(api, POLLER_USER), poll_before)
            await poller.stop()

            # The one case that must re-list: the server forgot the agents' resourceVersion.
            # A write first, with no await before the compaction, so that no bookmark can
            # have brought an agent's resourceVersion up to the compacted one.
            _touch(api, others[0], "before-410")
            api.compact()
            for n in agents:
                api.cut_watches(user=agent_user(n))
            await api.wait_for(lambda: _relisted(_counts(api, agents), rest), WAIT)
            await asyncio.sleep(3 * REAL_BOOKMARK_INTERVAL / k)
            after_410 = _counts(api, agents)

            rolled_from = len(api.write_log)
            rollout = await roll(api, agents, config_name(1), batch=len(agents))
            await _events_settled(api, agents)
            after_rollout = _counts(api, agents)
            rollout_events = _events_by_reason(api, agents, rolled_from)
        finally:
            churn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await churn
            for proc in procs:
                await stop_agent(proc)

    rest_per_node = _per_node(rest, start)
    per_hour_rest = sum(rest_per_node.values())
    rollout_per_node = _per_node(after_rollout, after_410)
    lists_at_rest = sum(v for key, v in rest_per_node.items() if key.startswith("list "))
    poll_per_hour = {key: round(n * 3600.0 / elapsed, 1) for key, n in poll_rest.items()}
    events_per_hold = sum(v for key, v in rollout_per_node.items() if key.endswith(" events"))
    return {
        "nodes": size,
        "processes": len(agents),
        "simulated_hour_wall_s": round(elapsed, 1),
        "start_requests_per_node": _per_node(start, before_start),
        "rest_requests_per_node_per_hour": rest_per_node,
        "rest_total_per_node_per_hour": round(per_hour_rest, 2),
        "lists_after_start_at_rest_per_node": lists_at_rest,
        "after_410_requests_per_node": _per_node(after_410, rest),
        "rollout_requests_per_node": rollout_per_node,
        "rollout_total_per_node": round(sum(rollout_per_node.values()), 2),
        "rollout_event_writes_per_hold": events_per_hold,
        "rollout_event_writes_per_hold_by_reason": rollout_events,
        "rollout_hour_total_per_node": round(per_hour_rest + sum(rollout_per_node.values()), 2),
        "rollout_hold_reaction_ms_median": round(
            1000 * sorted(rollout.hold_reactions.values())[len(agents) // 2], 3
        ),
        "poller": {
            "poll_interval_s": params.poll_interval,
            "window_s": round(elapsed, 1),
            "requests_per_hour": poll_per_hour,
            "total_per_hour": round(sum(poll_per_hour.values()), 1),
        },
    }


def defaults() -> Settings:
    """What ``drain-guard run`` runs with when no flag says otherwise (the deployed agent's
    clocks: the benchmark divides these, never constants of its own)."""
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from(parser.parse_args(["--node-name", "any"]), {})


def scaled_clocks(k: int) -> tuple[str, ...]:
    """The agent's watch timeout and self-check interval, its defaults divided by ``k``."""
    d = defaults()
    watch = max(MIN_WATCH_TIMEOUT, d.api.watch_timeout.total_seconds() / k)
    check = d.reporting.confinement_check_interval.total_seconds() / k
    return ("--watch-timeout", f"{watch:g}s", "--confinement-check-interval", f"{check:g}s")


async def _events_settled(api: SimApiServer, nodes: Sequence[str], quiet: float = 2.0) -> None:
    """Until the agents have written no Event for ``quiet`` seconds: their Events follow the
    hold's writes from a queue, and the last of a release's can come after the rollout's
    last step (a fixed second missed one at 2,000 nodes)."""
    users = {agent_user(n) for n in nodes}
    seen, since = -1, time.monotonic()
    async with asyncio.timeout(WAIT):
        while True:
            count = sum(1 for rec in api.writes("events") if rec.user in users)
            if count != seen:
                seen, since = count, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            await asyncio.sleep(0.1)


def _events_by_reason(api: SimApiServer, nodes: Sequence[str], start: int) -> dict[str, float]:
    """The agents' Event writes since write-log index ``start``, per node, by ``verb reason``
    (each one hold and its release in a rollout: the Events a hold costs)."""
    users = {agent_user(n) for n in nodes}
    total: dict[str, int] = {}
    for rec in api.write_log[start:]:
        if rec.resource == "events" and rec.user in users:
            key = f"{rec.verb} {(rec.after or {}).get('reason', '')}"
            total[key] = total.get(key, 0) + 1
    return {k: round(v / len(nodes), 2) for k, v in sorted(total.items())}


def _relisted(now: Mapping[str, Mapping[str, int]], then: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether every agent has listed its Node and its pods again since ``then``."""
    return all(
        now[n].get(key, 0) > then[n].get(key, 0) for n in now for key in ("list nodes", "list pods")
    )


def _counts(api: SimApiServer, nodes: Sequence[str]) -> dict[str, dict[str, int]]:
    return {n: requests_by_verb(api, agent_user(n)) for n in nodes}


def _per_node(
    after: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]]
) -> dict[str, float]:
    """Mean requests per node by ``verb resource``."""
    total: dict[str, int] = {}
    for node, counts in after.items():
        for key, n in diff_counts(counts, before[node]).items():
            total[key] = total.get(key, 0) + n
    return {k: round(v / len(after), 2) for k, v in sorted(total.items())}


def _touch(api: SimApiServer, node: str, value: str) -> None:
    api.patch("nodes", node, {"metadata": {"annotations": {"bench/heartbeat": value}}}, user=ADMIN)


async def _churn(api: SimApiServer, names: Sequence[str], per_second: float) -> None:
    """Unrelated Node updates: they move the resourceVersion past the agents' watches."""
    i = 0
    while True:
        _touch(api, names[i % len(names)], str(i))
        i += 1
        await asyncio.sleep(1.0 / per_second)


async def measure(params: Params, workdir: Path) -> dict[str, Any]:
    agent = None if params.revision is None else deployed.baseline(params.revision, workdir)
    sizes = []
    for size in params.sizes:
        one = await measure_size(params, size, workdir, agent)
        print(json.dumps(one), flush=True)
        sizes.append(one)
    worst = max(s["rest_total_per_node_per_hour"] for s in sizes)
    lists = max(s["lists_after_start_at_rest_per_node"] for s in sizes)
    return {
        "params": asdict(params),
        "method": {
            "agent_flags": list(scaled_clocks(params.time_scale)),
            "bookmark_interval_s": REAL_BOOKMARK_INTERVAL / params.time_scale,
            "note": "every request of real drain-guard run processes, one hour of their clocks"
            " compressed by time_scale; counted, not extrapolated. Poller: real time, window"
            " count x 3600 / window.",
        },
        "sizes": sizes,
        "targets": {
            "at_most_18_requests_per_node_per_hour_at_rest": {"value": worst, "met": worst <= 18},
            "lists_at_rest_only_the_self_check": {"value": lists, "met": lists <= 1},
        },
    }


def parse_args(argv: Sequence[str] | None) -> tuple[Params, Path | None]:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.apiload", description=__doc__
    )
    d = Params()
    p.add_argument("--time-scale", type=int, default=d.time_scale)
    p.add_argument("--history", type=int, default=d.history)
    p.add_argument("--churn", type=float, default=d.churn)
    p.add_argument("--poll-interval", type=float, default=d.poll_interval)
    p.add_argument("--sizes", type=int, nargs="*", default=list(d.sizes))
    p.add_argument("--processes", type=int, default=d.processes)
    p.add_argument(
        "--revision", default=None, help="count this git revision's deployed agent instead"
    )
    p.add_argument(
        "--machine-os",
        action="store_true",
        help="serve MachineOSBuilds and MachineOSConfigs (v1, MCO 4.18+): the agents watch them",
    )
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    params = Params(
        a.time_scale,
        a.history,
        a.churn,
        a.poll_interval,
        tuple(a.sizes),
        a.processes,
        a.revision,
        a.machine_os,
    )
    return params, a.out


def main(argv: Sequence[str] | None = None) -> int:
    params, out = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-apiload-") as tmp:
        result = asyncio.run(measure(params, Path(tmp)))
    print(f"wrote {write_result('apiload', result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
