"""API load: requests per node per hour at rest and during a rollout, per verb.

How an hour is measured in minutes. The agent renews its watches itself: it asks for
``timeoutSeconds`` = 600 s ±10 % (``drain_guard.kube.listwatch``), which a real API server
honours (its own ``--min-request-timeout`` default, 1800 s → 30-60 min, applies only to watches
that give none), and a real server sends a bookmark about every 60 s. So at rest the hourly load
is set by those two clocks. This benchmark divides both by ``--time-scale`` k (watch timeout
600/k s, bookmarks every 60/k s) and runs 3600/k seconds: one simulated hour, counted by the
simulator per user and verb, not extrapolated from a rate. Nothing else the agent does at rest
depends on time (no polling, no resync).

Bookmarks are shown to carry the watches: the simulator keeps only ``--history`` events while
unrelated Nodes change ``--churn`` times a second, so a watch renewed from a resourceVersion
older than a few seconds would get 410 and re-list. A LIST after start-up therefore means the
bookmarks failed. Then a forced compaction shows the one case that must re-list (a 410).

The whole process: the figures above are the agent's parts packed into one process
(``benchmarks.inproc``), without the confinement self-check. ``whole_at_rest`` counts every
request real ``drain-guard run`` processes send in one simulated hour at rest (the self-check
included, its interval divided alike), at each of ``--sizes`` Nodes.

The rollout (``benchmarks.rollout``) adds the agents' requests for one update of each node.
The polling script (``benchmarks.baseline``) runs beside the agents in real time for the
same wall-clock window; its hourly figure is that window's count x 3600 / window.

``python -m benchmarks.apiload [--agents N] [--time-scale K] ...``
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

from benchmarks.baseline import Poller
from benchmarks.common import (
    IMAGE_A,
    config_name,
    diff_counts,
    requests_by_verb,
    seconds_to_ready,
    seed_api,
    start_agent,
    stop_agent,
    write_result,
)
from benchmarks.inproc import AGENT_WATCH_TIMEOUT, AgentSpec, start_hosts
from benchmarks.rollout import roll
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from drain_guard_sim.harness.agentproc import agent_user

#: The deployed agent's self-check interval (``--confinement-check-interval``).
CONFINEMENT_INTERVAL = 3600.0
#: The shortest ``--watch-timeout`` the agent takes (a smoke test's hour is shorter).
MIN_WATCH_TIMEOUT = 5.0
POLLER_NODE = "poll-0"
POLLER_USER = "system:serviceaccount:drain-guard:poll-script"
REAL_BOOKMARK_INTERVAL = 60.0


@dataclass(frozen=True)
class Params:
    agents: int = 5
    time_scale: int = 30
    history: int = 50
    churn: float = 10.0
    poll_interval: float = 2.0
    sizes: tuple[int, ...] = (10, 500, 2000, 5000)
    processes: int = 3


async def whole_at_rest(params: Params, size: int, workdir: Path) -> dict[str, Any]:
    """Every request ``params.processes`` real ``drain-guard run`` processes send in one
    simulated hour at rest, on a cluster of ``size`` Nodes: watch renewals and the
    confinement self-check, its clocks divided by the time scale as the watches' are."""
    k = params.time_scale
    nodes = [f"worker-{i}" for i in range(size)]
    agents = nodes[: params.processes]
    async with SimApiServer(bookmark_interval=REAL_BOOKMARK_INTERVAL / k) as api:
        seed_api(api, nodes)
        flags = (
            "--watch-timeout",
            f"{max(MIN_WATCH_TIMEOUT, AGENT_WATCH_TIMEOUT / k):g}s",
            "--confinement-check-interval",
            f"{CONFINEMENT_INTERVAL / k:g}s",
        )
        procs = [await start_agent(api, n, workdir / f"whole-{size}", *flags) for n in agents]
        try:
            for proc in procs:
                await seconds_to_ready(proc)
            await asyncio.sleep(2.0)  # ready means listed; the watch requests follow
            before = _counts(api, agents)
            window = 3600.0 / k
            began = time.monotonic()
            await asyncio.sleep(window)
            elapsed = time.monotonic() - began
            after = _counts(api, agents)
        finally:
            for proc in procs:
                await stop_agent(proc)
    per_node = _per_node(after, before)
    return {
        "nodes": size,
        "processes": len(agents),
        "simulated_hour_wall_s": round(elapsed, 1),
        "requests_per_node_per_hour": per_node,
        "total_per_node_per_hour": round(sum(per_node.values()), 2),
    }


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


async def _churn(api: SimApiServer, names: Sequence[str], per_second: float) -> None:
    """Unrelated Node updates: they move the resourceVersion past the agents' watches."""
    i = 0
    while True:
        api.patch(
            "nodes",
            names[i % len(names)],
            {"metadata": {"annotations": {"bench/heartbeat": str(i)}}},
            user=ADMIN,
        )
        i += 1
        await asyncio.sleep(1.0 / per_second)


async def measure(params: Params, workdir: Path) -> dict[str, Any]:
    k = params.time_scale
    nodes = [f"worker-{i}" for i in range(params.agents)]
    bystanders = [f"bystander-{i}" for i in range(10)]
    watch_timeout = max(1, round(AGENT_WATCH_TIMEOUT / k))
    async with SimApiServer(
        bookmark_interval=REAL_BOOKMARK_INTERVAL / k, history=params.history
    ) as api:
        seed_api(api, [*nodes, *bystanders, POLLER_NODE])
        hosts = {n: HostFS(workdir / "hosts" / n, IMAGE_A) for n in [*nodes, POLLER_NODE]}
        specs = [
            AgentSpec(
                n,
                str(api.kubeconfig(agent_user(n), workdir / "kubeconfigs" / n)),
                str(hosts[n].root),
                str(hosts[n].cmdline_file),
            )
            for n in nodes
        ]
        agent_hosts = await start_hosts([specs], workdir, watch_timeout=watch_timeout)
        poll_host = hosts[POLLER_NODE]
        poller = Poller(
            POLLER_NODE,
            api.kubeconfig(POLLER_USER, workdir / "kubeconfigs" / "poller"),
            poll_host.root,
            poll_host.cmdline_file,
            params.poll_interval,
        )
        churn = asyncio.create_task(_churn(api, bystanders, params.churn))
        try:
            await asyncio.sleep(2.0)  # ready means listed; the watch requests follow
            start = _counts(api, nodes)
            await poller.start()
            poll_before = requests_by_verb(api, POLLER_USER)
            window = 3600.0 / k
            began = time.monotonic()
            await asyncio.sleep(window)
            elapsed = time.monotonic() - began
            rest = _counts(api, nodes)
            poll_rest = diff_counts(requests_by_verb(api, POLLER_USER), poll_before)
            await poller.stop()

            # The one case that must re-list: the server forgot the agents' resourceVersion.
            api.compact()
            for n in nodes:
                api.cut_watches(user=agent_user(n))
            await asyncio.sleep(3 * REAL_BOOKMARK_INTERVAL / k)
            after_410 = _counts(api, nodes)

            config = config_name(1)
            rollout = await roll(api, nodes, config, batch=len(nodes))
            after_rollout = _counts(api, nodes)
        finally:
            churn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await churn
            await asyncio.gather(*(h.stop() for h in agent_hosts))

    start_per_node = {k2: v / len(nodes) for k2, v in _sum(start).items()}
    rest_per_node = _per_node(rest, start)
    per_hour_rest = sum(rest_per_node.values())
    rollout_per_node = _per_node(after_rollout, after_410)
    lists_at_rest = sum(v for key, v in rest_per_node.items() if key.startswith("list "))
    poll_per_hour = {key: round(n * 3600.0 / elapsed, 1) for key, n in poll_rest.items()}
    return {
        "params": asdict(params),
        "method": {
            "agent_watch_timeout_s": watch_timeout,
            "bookmark_interval_s": REAL_BOOKMARK_INTERVAL / k,
            "simulated_hour_wall_s": round(elapsed, 1),
            "note": "one hour of the agent's clocks compressed by time_scale; counted, not "
            "extrapolated. Poller: real time, window count x 3600 / window.",
        },
        "start_requests_per_node": start_per_node,
        "rest_requests_per_node_per_hour": rest_per_node,
        "rest_total_per_node_per_hour": round(per_hour_rest, 2),
        "lists_after_start_at_rest_per_node": lists_at_rest,
        "after_410_requests_per_node": _per_node(after_410, rest),
        "rollout_requests_per_node": rollout_per_node,
        "rollout_total_per_node": round(sum(rollout_per_node.values()), 2),
        "rollout_hour_total_per_node": round(per_hour_rest + sum(rollout_per_node.values()), 2),
        "rollout_hold_reaction_ms_median": round(
            1000 * sorted(rollout.hold_reactions.values())[len(nodes) // 2], 3
        ),
        "poller": {
            "poll_interval_s": params.poll_interval,
            "window_s": round(elapsed, 1),
            "requests_per_hour": poll_per_hour,
            "total_per_hour": round(sum(poll_per_hour.values()), 1),
        },
        "targets": {
            "no_list_after_start_at_rest": {"value": lists_at_rest, "met": lists_at_rest == 0},
            "under_30_requests_per_node_per_hour_at_rest": {
                "value": round(per_hour_rest, 2),
                "met": per_hour_rest < 30,
            },
        },
    }


def _sum(counts: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for per_node in counts.values():
        for key, n in per_node.items():
            total[key] = total.get(key, 0) + n
    return total


def parse_args(argv: Sequence[str] | None) -> tuple[Params, Path | None]:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.apiload", description=__doc__
    )
    d = Params()
    p.add_argument("--agents", type=int, default=d.agents)
    p.add_argument("--time-scale", type=int, default=d.time_scale)
    p.add_argument("--history", type=int, default=d.history)
    p.add_argument("--churn", type=float, default=d.churn)
    p.add_argument("--poll-interval", type=float, default=d.poll_interval)
    p.add_argument("--sizes", type=int, nargs="*", default=list(d.sizes))
    p.add_argument("--processes", type=int, default=d.processes)
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    params = Params(
        a.agents, a.time_scale, a.history, a.churn, a.poll_interval, tuple(a.sizes), a.processes
    )
    return params, a.out


def main(argv: Sequence[str] | None = None) -> int:
    params, out = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-apiload-") as tmp:
        result = asyncio.run(measure(params, Path(tmp)))
        result["whole_process_at_rest"] = []
        for size in params.sizes:
            whole = asyncio.run(whole_at_rest(params, size, Path(tmp)))
            print(json.dumps(whole), flush=True)
            result["whole_process_at_rest"].append(whole)
    print(f"wrote {write_result('apiload', result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
