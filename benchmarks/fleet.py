"""Fleet: 10, 100 and 500 simulated nodes, an agent on each, one rollout across the fleet.

The simulator runs in this process; the agents run in ``--processes`` host processes
(``benchmarks.inproc``: separate clients, connections, registries; shared interpreter). The
rollout is ``benchmarks.rollout`` in waves of 10 % of the fleet. Per size: the simulator's
HTTP request rate during the rollout (every HTTP request is an agent's: MCO's writes are made
in process), the agents' requests, CPU seconds and memory per node, and the reaction times of
every hold and release, from the write log.

``python -m benchmarks.fleet [--sizes 10 100 500] [--processes 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import (
    IMAGE_A,
    config_name,
    seed_api,
    summary_ms,
    write_result,
)
from benchmarks.inproc import AgentSpec, start_hosts
from benchmarks.rollout import roll
from drain_guard_sim.agentproc import agent_user
from drain_guard_sim.apiserver import SimApiServer
from drain_guard_sim.hostfs import HostFS

MIB = 2**20
STARTUP_SETTLE = 2.0  # seconds after the last agent is ready, before the rest window


@dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...] = (10, 100, 500)
    processes: int = 2
    wave_fraction: float = 0.1
    rest_seconds: float = 10.0
    profile: bool = False  # profile this process (simulator + driver) during the rollout


def _agent_requests(api: SimApiServer, users: set[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for (user, verb, resource), n in api.requests.items():
        if user in users:
            out[f"{verb} {resource}"] += n
    return out


def _cpu(procs: Sequence[psutil.Process]) -> float:
    return sum(float(p.cpu_times().user + p.cpu_times().system) for p in procs)


def _profile_summary(profiler: Any, n: int) -> dict[str, Any]:
    """From a pyinstrument session: the functions with the most time of their own, and the
    simulator's own functions (``drain_guard_sim``) with the most time including their callees."""
    root = profiler.last_session.root_frame()
    total = float(root.time) if root is not None else 0.0
    own: dict[str, float] = {}
    inclusive: dict[str, float] = {}
    stack = [(root, frozenset[str]())] if root is not None else []
    while stack:
        frame, outer = stack.pop()
        key = f"{frame.file_path_short}:{frame.line_no}({frame.function})"
        if not frame.is_synthetic and frame.file_path_short:
            if frame.total_self_time > 0:
                own[key] = own.get(key, 0.0) + frame.total_self_time
            if "simulator/drain_guard_sim/" in frame.file_path_short and key not in outer:
                inclusive[key] = inclusive.get(key, 0.0) + frame.time  # recursion counted once
        stack.extend((child, outer | {key}) for child in frame.children)

    def rows(values: dict[str, float]) -> list[dict[str, Any]]:
        top = sorted(values.items(), key=lambda kv: -kv[1])[:n]
        return [
            {"function": k, "seconds": round(v, 3), "share": round(v / total, 3) if total else 0.0}
            for k, v in top
        ]

    return {
        "sampled_s": round(total, 2),
        "self_time": rows(own),
        "simulator_inclusive": rows(inclusive),
    }


async def _one_size(size: int, params: Params, workdir: Path) -> dict[str, Any]:
    nodes = [f"worker-{i:04d}" for i in range(size)]
    users = {agent_user(n) for n in nodes}
    async with SimApiServer(bookmark_interval=60.0) as api:
        seed_api(api, nodes)
        specs = []
        for node in nodes:
            host = HostFS(workdir / "hosts" / node, IMAGE_A)
            kubeconfig = api.kubeconfig(agent_user(node), workdir / "kubeconfigs" / node)
            specs.append(AgentSpec(node, str(kubeconfig), str(host.root), str(host.cmdline_file)))
        groups = [specs[i :: params.processes] for i in range(params.processes)]
        groups = [g for g in groups if g]
        me = psutil.Process()
        started = time.monotonic()
        agent_hosts = await start_hosts(groups, workdir)
        all_ready = time.monotonic() - started
        procs = [psutil.Process(h.pid) for h in agent_hosts]
        try:
            # Ready means listed; each watch request follows its list within moments.
            await asyncio.sleep(STARTUP_SETTLE)
            start_requests = _agent_requests(api, users)
            cpu0 = _cpu(procs)
            await asyncio.sleep(params.rest_seconds)
            rest_requests = _agent_requests(api, users) - start_requests
            rest_cpu = _cpu(procs) - cpu0

            before = _agent_requests(api, users)
            total_before = sum(api.requests.values())
            cpu0, sim_cpu0 = _cpu(procs), float(sum(me.cpu_times()[:2]))
            batch = max(1, round(size * params.wave_fraction))
            profiler: Any = None
            if params.profile:
                # Sampling, so that the simulator keeps its pace and the agents' 10 s request
                # timeouts hold (cProfile slows it several-fold and breaks the run).
                # pyinstrument is the optional extra 'bench': imported by name, so that type
                # checks pass where it is not installed.
                pyinstrument = importlib.import_module("pyinstrument")
                profiler = pyinstrument.Profiler(interval=0.001, async_mode="disabled")
                profiler.start()
            result = await roll(api, nodes, config_name(size), batch, timeout=120.0)
            if profiler is not None:
                profiler.stop()
            rollout_cpu = _cpu(procs) - cpu0
            sim_cpu = float(sum(me.cpu_times()[:2])) - sim_cpu0
            rollout_requests = _agent_requests(api, users) - before
            total = sum(api.requests.values()) - total_before
            rss = sum(p.memory_info().rss for p in procs)
        finally:
            await asyncio.gather(*(h.stop() for h in agent_hosts))
    holds = list(result.hold_reactions.values())
    releases = list(result.release_reactions.values())
    out = {
        "nodes": size,
        "agent_processes": len(groups),
        "wave_size": batch,
        "start_to_all_ready_s": round(all_ready, 2),
        "start_requests_per_node": round(sum(start_requests.values()) / size, 2),
        "start_requests": dict(start_requests),
        "rest_seconds": params.rest_seconds,
        "rest_requests": dict(rest_requests),
        "rest_cpu_s_per_node_per_hour": round(rest_cpu / size * 3600.0 / params.rest_seconds, 3),
        "rollout_seconds": round(result.seconds, 2),
        "rollout_requests": dict(rollout_requests),
        "rollout_requests_per_node": round(sum(rollout_requests.values()) / size, 2),
        "simulator_requests_per_s_during_rollout": round(total / result.seconds, 1),
        "simulator_cpu_s_during_rollout": round(sim_cpu, 2),
        "rollout_agent_cpu_ms_per_node": round(1000 * rollout_cpu / size, 2),
        "agent_rss_mib_total": round(rss / MIB, 1),
        "agent_rss_mib_per_node": round(rss / MIB / size, 2),
        "hold_reaction": summary_ms(holds),
        "release_reaction": summary_ms(releases),
    }
    if profiler is not None:
        out["simulator_profile"] = _profile_summary(profiler, 12)
    print(f"fleet {size}: {out}", flush=True)
    return out


async def measure(params: Params, workdir: Path) -> dict[str, Any]:
    sizes = [await _one_size(n, params, workdir / f"fleet-{n}") for n in params.sizes]
    per_node = [s["rollout_requests_per_node"] for s in sizes]
    return {
        "params": asdict(params),
        "sizes": sizes,
        "targets": {
            "cost_per_node_flat": {
                "rollout_requests_per_node": per_node,
                "met": max(per_node) - min(per_node) <= 0.5,
            }
        },
    }


def parse_args(argv: Sequence[str] | None) -> tuple[Params, Path | None]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__)
    d = Params()
    p.add_argument("--sizes", type=int, nargs="+", default=list(d.sizes))
    p.add_argument("--processes", type=int, default=d.processes)
    p.add_argument("--wave-fraction", type=float, default=d.wave_fraction)
    p.add_argument("--rest-seconds", type=float, default=d.rest_seconds)
    p.add_argument(
        "--profile",
        action="store_true",
        help="profile the simulator's process during the rollout with pyinstrument (extra"
        " 'bench'; results: fleet_profile.json)",
    )
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    params = Params(tuple(a.sizes), a.processes, a.wave_fraction, a.rest_seconds, a.profile)
    return params, a.out


def main(argv: Sequence[str] | None = None) -> int:
    params, out = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        result = asyncio.run(measure(params, Path(tmp)))
    name = "fleet_profile" if params.profile else "fleet"
    print(f"wrote {write_result(name, result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
