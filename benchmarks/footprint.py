"""Footprint of one agent process: start to ready, memory, CPU, descriptors, at rest and churn.

The agent runs as deployed (``--variant deployed``): the image's packages alone, installed and
compiled as the Dockerfile does, run with the image's flags (``benchmarks/deployed.py``);
``--variant development`` runs ``python -m drain_guard`` in this virtual environment.

- start to ready: spawn of ``python -m drain_guard run`` → first ``/readyz`` 200 (both watches
  listed), over ``--starts`` fresh processes;
- at rest: CPU seconds over ``--rest-seconds`` windows, per hour and as a share of one core,
  bare (nobody talks to the agent) and as deployed (kubelet probes ``/healthz`` every 10 s and
  ``/readyz`` every 5 s, Prometheus scrapes ``/metrics`` every 30 s, as ``daemonset/`` sets);
  the simulator sends bookmarks every 60 s as a real API server does;
- churn: ``--rounds`` rounds of ``--pod-changes`` pod changes on the agent's node (create,
  relabel, delete: the pod count ends where it began) and ``--node-updates`` Node updates
  that are not drain requests; resident memory after each round (flat = no growth between
  rounds) and CPU seconds per round;
- import cost: resident memory of a bare interpreter, then after importing aiohttp, the whole
  agent, and the rest of kubernetes_asyncio, in fresh interpreters (median of ``--imports``);
- variants: resident memory and start to ready of each of ``--compare`` (``deployed.VARIANTS``:
  without the deferred import, without the optimisation, in the development environment),
  median of ``--compare-starts`` fresh processes each.

``python -m benchmarks.footprint [--starts N] [--rest-seconds S] ...``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from benchmarks import deployed
from benchmarks.common import (
    MCO_NS,
    seconds_to_ready,
    seed_api,
    start_agent,
    stop_agent,
    write_result,
)
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess

NODE = "worker-0"
MIB = 2**20
PROBES = (("/healthz", 10.0), ("/readyz", 5.0), ("/metrics", 30.0))

# Run in a fresh interpreter: VmRSS after each import stage (no psutil: it would count too).
IMPORT_SCRIPT = """
import json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
out = {"interpreter": rss()}
import aiohttp
out["aiohttp"] = rss()
import drain_guard.node.controller, drain_guard.cli
out["agent"] = rss()
import kubernetes_asyncio.client
kubernetes_asyncio.client.V1Pod  # a name the agent does not load: the library's whole client
out["rest_of_kubernetes_asyncio"] = rss()
json.dump(out, sys.stdout)
"""


@dataclass(frozen=True)
class Params:
    starts: int = 5
    rest_seconds: float = 60.0
    rest_runs: int = 2
    rounds: int = 3
    pod_changes: int = 1000
    node_updates: int = 1000
    imports: int = 5
    variant: str = "deployed"
    compare: tuple[str, ...] = deployed.VARIANTS
    compare_starts: int = 3


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def _snapshot(proc: psutil.Process) -> dict[str, Any]:
    mem = proc.memory_full_info()
    return {
        "rss_mib": round(mem.rss / MIB, 2),
        "uss_mib": round(mem.uss / MIB, 2),
        "fds": proc.num_fds(),
        "threads": proc.num_threads(),
        "cpu_s": round(_cpu(proc), 3),
    }


async def _import_cost(runs: int, agent: deployed.Agent) -> dict[str, Any]:
    samples: list[dict[str, int]] = []
    for _ in range(runs):
        out = await asyncio.to_thread(
            subprocess.run,
            [agent.python, "-c", IMPORT_SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **agent.env},
        )
        samples.append(json.loads(out.stdout))
    stages = list(samples[0])
    medians = {s: statistics.median(x[s] for x in samples) for s in stages}
    result: dict[str, Any] = {f"{s}_rss_mib": round(medians[s] / MIB, 2) for s in stages}
    previous = None
    for s in stages:
        if previous is not None:
            result[f"{s}_adds_mib"] = round((medians[s] - medians[previous]) / MIB, 2)
        previous = s
    return result


async def _variant(api: SimApiServer, agent: deployed.Agent, starts: int, workdir: Path) -> Any:
    """Median start to ready and resident memory 2 s after ready, over ``starts`` processes."""
    samples: list[dict[str, Any]] = []
    for s in range(starts):
        process = await start_agent(api, NODE, workdir / f"{agent.variant}-{s}", agent=agent)
        try:
            ready = await seconds_to_ready(process)
            await asyncio.sleep(2.0)
            samples.append({"start_to_ready_s": ready, **_snapshot(psutil.Process(process.pid))})
        finally:
            await stop_agent(process)
    keys = ("start_to_ready_s", "rss_mib", "uss_mib", "cpu_s")
    return {
        "variant": agent.variant,
        "starts": starts,
        **{k: round(statistics.median(x[k] for x in samples), 3) for k in keys},
        "rss_mib_runs": [x["rss_mib"] for x in samples],
    }


async def _probe(port: int, path: str, every: float) -> None:
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                await resp.read()
            await asyncio.sleep(every)


async def _rest_window(agent: AgentProcess, seconds: float, deployed: bool) -> dict[str, Any]:
    proc = psutil.Process(agent.pid)
    tasks: list[asyncio.Task[None]] = []
    if deployed:
        assert agent.port is not None
        tasks = [asyncio.create_task(_probe(agent.port, p, e)) for p, e in PROBES]
    before = _cpu(proc)
    began = time.monotonic()
    await asyncio.sleep(seconds)
    used = _cpu(proc) - before
    elapsed = time.monotonic() - began
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    per_hour = used * 3600.0 / elapsed
    return {
        "mode": "deployed" if deployed else "bare",
        "seconds": round(elapsed, 1),
        "cpu_s": round(used, 3),
        "cpu_s_per_hour": round(per_hour, 2),
        "core_percent": round(100.0 * used / elapsed, 4),
        **{k: v for k, v in _snapshot(proc).items() if k != "cpu_s"},
    }


def _pod(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"churn-{i}", "namespace": MCO_NS, "labels": {"app": "churn"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "sim"}]},
        "status": {"phase": "Running"},
    }


async def _churn_round(
    api: SimApiServer, agent: AgentProcess, pod_changes: int, node_updates: int, base: int
) -> dict[str, Any]:
    """Pod creates/relabels/deletes and Node updates, interleaved, paced in small batches."""
    proc = psutil.Process(agent.pid)
    cpu0 = _cpu(proc)
    began = time.monotonic()
    quarter = pod_changes // 4
    ops: list[tuple[str, int]] = [("create", i) for i in range(quarter)]
    ops += [("relabel", i % max(1, quarter)) for i in range(pod_changes - 2 * quarter)]
    ops += [("delete", i) for i in range(quarter)]
    node_ops = [("node", i) for i in range(node_updates)]
    merged = [op for pair in zip(ops, node_ops, strict=False) for op in pair]
    merged += ops[len(node_ops) :] + node_ops[len(ops) :]
    peak = 0
    for n, (kind, i) in enumerate(merged):
        if kind == "create":
            api.create("pods", _pod(i), MCO_NS)
        elif kind == "relabel":
            api.patch("pods", f"churn-{i}", {"metadata": {"labels": {"rev": str(n)}}}, MCO_NS)
        elif kind == "delete":
            api.delete("pods", f"churn-{i}", MCO_NS)
        else:
            api.patch(
                "nodes",
                NODE,
                {"metadata": {"annotations": {"bench/heartbeat": f"{base}-{i}"}}},
                user=ADMIN,
            )
        if n % 50 == 49:
            await asyncio.sleep(0.05)  # ~1000 changes/s: the watch streams keep up
            peak = max(peak, proc.memory_info().rss)
    await asyncio.sleep(1.0)  # let the agent drain its watch streams
    snap = _snapshot(proc)
    return {
        "changes": len(merged),
        "seconds": round(time.monotonic() - began, 2),
        "cpu_s": round(_cpu(proc) - cpu0, 3),
        "peak_rss_mib": round(max(peak, proc.memory_info().rss) / MIB, 2),
        **{k: v for k, v in snap.items() if k != "cpu_s"},
    }


async def measure(params: Params, workdir: Path, tree: Path | None) -> dict[str, Any]:
    spec = deployed.agent(params.variant, tree)
    imports = await _import_cost(params.imports, spec)
    print(f"import cost: {imports}", flush=True)
    starts: list[float] = []
    rest: list[dict[str, Any]] = []
    churn: list[dict[str, Any]] = []
    after_start: dict[str, Any] = {}
    async with SimApiServer(bookmark_interval=60.0) as api:
        seed_api(api, [NODE])
        for s in range(params.starts):
            agent = await start_agent(api, NODE, workdir / f"start-{s}", agent=spec)
            try:
                starts.append(await seconds_to_ready(agent))
            finally:
                if s < params.starts - 1:
                    await stop_agent(agent)
        print(f"start to ready: {[round(x, 3) for x in starts]}", flush=True)
        try:
            await asyncio.sleep(1.0)
            after_start = _snapshot(psutil.Process(agent.pid))
            for r in range(params.rest_runs):
                for probed in (False, True):
                    rest.append(await _rest_window(agent, params.rest_seconds, probed))
                    print(f"at rest {r + 1}: {rest[-1]}", flush=True)
            for r in range(params.rounds):
                churn.append(
                    await _churn_round(api, agent, params.pod_changes, params.node_updates, r)
                )
                print(f"churn round {r + 1}: {churn[-1]}", flush=True)
        finally:
            await stop_agent(agent)
        variants = []
        for name in params.compare:
            variants.append(
                await _variant(api, deployed.agent(name, tree), params.compare_starts, workdir)
            )
            print(f"variant: {variants[-1]}", flush=True)

    def rest_median(mode: str, key: str) -> float:
        return round(float(statistics.median(w[key] for w in rest if w["mode"] == mode)), 4)

    deployed_pct = rest_median("deployed", "core_percent")
    rss_at_rest = rest_median("deployed", "rss_mib")
    ready_median = statistics.median(starts)
    growth = churn[-1]["rss_mib"] - churn[0]["rss_mib"] if churn else 0.0
    return {
        "params": asdict(params),
        "start_to_ready_s": {
            "runs": [round(x, 3) for x in starts],
            "median": round(ready_median, 3),
            "max": round(max(starts), 3),
        },
        "after_start": after_start,
        "rest": rest,
        "rest_median": {
            mode: {
                "cpu_s_per_hour": rest_median(mode, "cpu_s_per_hour"),
                "core_percent": rest_median(mode, "core_percent"),
                "rss_mib": rest_median(mode, "rss_mib"),
                "fds": rest_median(mode, "fds"),
            }
            for mode in ("bare", "deployed")
        },
        "churn": churn,
        "import_cost": imports,
        "variants": variants,
        "targets": {
            "rest_under_0.5pct_core": {"value_pct": deployed_pct, "met": deployed_pct < 0.5},
            "memory_flat_under_churn": {
                "rss_growth_first_to_last_round_mib": round(growth, 2),
                # "flat": less than 1 MiB between the first and the last round.
                "met": growth < 1.0,
            },
            "start_to_ready_under_2s": {"value_s": round(ready_median, 3), "met": ready_median < 2},
            "rss_at_rest_at_most_64mib": {"value_mib": rss_at_rest, "met": rss_at_rest <= 64.0},
        },
    }


def parse_args(argv: Sequence[str] | None) -> tuple[Params, Path | None]:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.footprint", description=__doc__
    )
    d = Params()
    p.add_argument("--starts", type=int, default=d.starts)
    p.add_argument("--rest-seconds", type=float, default=d.rest_seconds)
    p.add_argument("--rest-runs", type=int, default=d.rest_runs)
    p.add_argument("--rounds", type=int, default=d.rounds)
    p.add_argument("--pod-changes", type=int, default=d.pod_changes)
    p.add_argument("--node-updates", type=int, default=d.node_updates)
    p.add_argument("--imports", type=int, default=d.imports)
    p.add_argument("--variant", choices=deployed.VARIANTS, default=d.variant)
    p.add_argument("--compare", nargs="*", choices=deployed.VARIANTS, default=list(d.compare))
    p.add_argument("--compare-starts", type=int, default=d.compare_starts)
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    params = Params(
        a.starts,
        a.rest_seconds,
        a.rest_runs,
        a.rounds,
        a.pod_changes,
        a.node_updates,
        a.imports,
        a.variant,
        tuple(a.compare),
        a.compare_starts,
    )
    return params, a.out


def main(argv: Sequence[str] | None = None) -> int:
    params, out = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-footprint-") as tmp:
        tree = deployed.tree_for([params.variant, *params.compare], Path(tmp))
        result = asyncio.run(measure(params, Path(tmp), tree))
    print(f"wrote {write_result('footprint', result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
