"""Scrape flood: hold reaction while ``/metrics`` is flooded, against the same agent idle.

One agent guards one simulated node. Reaction (the MCD's request landing → the agent's hold
committed, from the simulator's write log, as in ``reaction``) is measured for ``--requests``
requests with the agent's HTTP server idle, then again while a separate process floods
``/metrics`` from ``--concurrency`` loopback connections asking for gzip, bounded by
``--flood-seconds`` and ``--flood-requests``. The flood is a separate process so that it
loads the agent, not the simulator's event loop. Also recorded: the agent's peak RSS and open
descriptors, its CPU share during the flood, how the flood's requests were answered (200
served, 503 refused as busy, an error when cut), and a kubelet-like liveness probe every
second (a new connection, failed unless answered in 3 s). ``--baseline REF`` measures git
revision REF's deployed agent alike, after, in the same run.

    python -m benchmarks scrapeflood          # or: python -m benchmarks.scrapeflood --help
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from benchmarks import deployed
from benchmarks.common import (
    percentile,
    seconds_to_ready,
    seed_api,
    start_agent,
    stop_agent,
    summary_ms,
    write_result,
)
from benchmarks.reaction import AGENT_NODE, Mcd, cycle
from drain_guard_sim.apiserver.server import SimApiServer

#: The DaemonSet's liveness probe: every 10 s, failed after 3 s; probed every second here.
PROBE_PERIOD = 1.0
PROBE_TIMEOUT = 3.0


async def _flood(url: str, concurrency: int, seconds: float, limit: int) -> dict[str, int]:
    """GET ``url`` from ``concurrency`` connections until ``seconds`` or ``limit`` requests."""
    counts: dict[str, int] = {}
    sent = 0
    deadline = time.monotonic() + seconds
    headers = {"Accept-Encoding": "gzip"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal sent
            while sent < limit and time.monotonic() < deadline:
                sent += 1
                try:
                    async with session.get(url, headers=headers) as resp:
                        await resp.read()
                        key = str(resp.status)
                except (aiohttp.ClientError, OSError):
                    key = "error"
                counts[key] = counts.get(key, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return counts


async def _reactions(api: SimApiServer, mcd: Mcd, n: int, offset: int) -> list[float]:
    return [await cycle(api, mcd, AGENT_NODE, offset + i) for i in range(n)]


async def _probe(url: str, answers: list[float | str], stop: asyncio.Event) -> None:
    """The kubelet's liveness probe: a new connection each ``PROBE_PERIOD``, failed unless
    answered 200 within ``PROBE_TIMEOUT`` (the DaemonSet's timeoutSeconds)."""
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        while not stop.is_set():
            began = time.monotonic()
            try:
                async with session.get(url) as resp:
                    await resp.read()
                    outcome: float | str = (
                        time.monotonic() - began if resp.status == 200 else str(resp.status)
                    )
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                outcome = type(exc).__name__
            answers.append(outcome)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PROBE_PERIOD):
                    await stop.wait()


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    how = deployed.agent(args.variant, deployed.tree_for([args.variant], workdir))
    result = await _measure_agent(args, workdir / "agent", how)
    if args.baseline is not None:
        base = deployed.baseline(args.baseline, workdir)
        result["baseline"] = await _measure_agent(args, workdir / "baseline-agent", base)
        result["baseline"]["revision"] = args.baseline
    return result


async def _measure_agent(
    args: argparse.Namespace, workdir: Path, how: deployed.Agent
) -> dict[str, Any]:
    async with SimApiServer() as api:
        seed_api(api, [AGENT_NODE])
        agent = await start_agent(api, AGENT_NODE, workdir, agent=how)
        mcd = Mcd(api)
        try:
            await seconds_to_ready(agent)
            proc = psutil.Process(agent.pid)
            idle_rss = proc.memory_info().rss
            idle_fds = proc.num_fds()
            idle = await _reactions(api, mcd, args.requests, 0)
            url = f"http://127.0.0.1:{agent.port}/metrics"
            probes: list[float | str] = []
            stop_probing = asyncio.Event()
            prober = asyncio.create_task(
                _probe(f"http://127.0.0.1:{agent.port}/healthz", probes, stop_probing)
            )
            flooder = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "benchmarks.scrapeflood",
                "--flood-only",
                url,
                "--concurrency",
                str(args.concurrency),
                "--flood-seconds",
                str(args.flood_seconds),
                "--flood-requests",
                str(args.flood_requests),
                stdout=asyncio.subprocess.PIPE,
            )
            assert flooder.stdout is not None
            await flooder.stdout.readline()  # "flooding": its connections are being opened
            flooded: list[float] = []
            peak_rss, peak_fds = idle_rss, idle_fds
            cpu_before = proc.cpu_times()
            flood_began = time.monotonic()
            while len(flooded) < args.requests and flooder.returncode is None:
                flooded.append((await _reactions(api, mcd, 1, args.requests + len(flooded)))[0])
                peak_rss = max(peak_rss, proc.memory_info().rss)
                peak_fds = max(peak_fds, proc.num_fds())
            cpu_after = proc.cpu_times()
            flood_wall = time.monotonic() - flood_began
            stop_probing.set()
            await prober
            out, _ = await flooder.communicate()
            answers = json.loads(out)
        finally:
            await mcd.close()
            await stop_agent(agent)
    idle_ms = summary_ms(idle)
    flood_ms = summary_ms(flooded)
    answered = [p for p in probes if isinstance(p, float)]
    cpu = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
    return {
        "probes": {
            "sent": len(probes),
            "failed": [p for p in probes if not isinstance(p, float) or p > PROBE_TIMEOUT],
            "answered_max_ms": round(1000 * max(answered), 1) if answered else None,
            "answered_median_ms": round(1000 * percentile(answered, 50), 1) if answered else None,
        },
        "agent_fds": {"idle": idle_fds, "peak_during_flood": peak_fds},
        "agent_cpu_share_during_flood": round(cpu / flood_wall, 3),
        "parameters": vars(args) | {"out": None},
        "idle": idle_ms,
        "flood": flood_ms,
        "flood_answers": answers,
        "median_ratio": round(percentile(flooded, 50) / percentile(idle, 50), 2),
        "p99_ratio": round(percentile(flooded, 99) / percentile(idle, 99), 2),
        "agent_rss_mib": {
            "idle": round(idle_rss / 2**20, 1),
            "peak_during_flood": round(peak_rss / 2**20, 1),
        },
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.scrapeflood")
    parser.add_argument("--requests", type=int, default=200, help="holds measured per phase")
    parser.add_argument("--concurrency", type=int, default=300, help="flood connections")
    parser.add_argument("--flood-seconds", type=float, default=30.0, help="flood's upper bound")
    parser.add_argument("--flood-requests", type=int, default=200_000, help="flood's bound")
    parser.add_argument("--flood-only", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=deployed.VARIANTS, default="deployed")
    parser.add_argument(
        "--baseline", default=None, help="git revision whose deployed agent is measured after"
    )
    parser.add_argument("--out", type=Path, default=None, help="result directory")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.flood_only:
        url = str(args.flood_only)
        if not url.startswith("http://127.0.0.1:"):
            raise SystemExit("the flood targets loopback only")
        print("flooding", flush=True)
        counts = asyncio.run(_flood(url, args.concurrency, args.flood_seconds, args.flood_requests))
        print(json.dumps(counts), flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-scrapeflood-") as tmp:
        result = asyncio.run(measure(args, Path(tmp)))
    keys = ("median_ratio", "p99_ratio", "probes", "agent_fds", "agent_cpu_share_during_flood")
    print(json.dumps({k: result[k] for k in keys}))
    if "baseline" in result:
        print("baseline", json.dumps({k: result["baseline"][k] for k in keys}))
    print(f"wrote {write_result('scrapeflood', result, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
