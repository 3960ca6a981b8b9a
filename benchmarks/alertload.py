"""Alert gating's load on the alert source: a fleet's queries against a real Prometheus.

Each agent with ``--alert-url`` sends one ``GET api/v1/alerts`` per ``--alert-interval``, so a
fleet of ``--nodes`` agents sends ``nodes / interval`` queries a second, spread over the
interval. This runs Debian's ``prometheus`` on loopback with ``--alerts`` rules that all fire
(each alert with the labels and annotations of a typical rule), then sends queries at that
rate, open loop (a slow answer does not slow the sender), for ``--seconds``; it records the
answers' latency and size and the CPU time Prometheus spent, against an idle window of the
same length before. One central query would cost one query per interval instead.

    python -m benchmarks.alertload --nodes 2000 --interval 30 --alerts 200 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import yaml

from benchmarks.common import percentile, write_result


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _rules(alerts: int) -> dict[str, Any]:
    """``alerts`` rules that fire at once, shaped like a cluster's (labels, two annotations)."""
    rules = [
        {
            "alert": f"BenchAlert{i:04d}",
            "expr": "vector(1)",
            "labels": {"severity": "warning", "namespace": f"ns-{i % 50}"},
            "annotations": {
                "summary": f"Bench alert {i} fires: a component is degraded.",
                "description": "A long description of what is wrong, why it matters and what"
                " to do about it, as the runbooks of a cluster's rules have.",
            },
        }
        for i in range(alerts)
    ]
    return {"groups": [{"name": "bench", "interval": "5s", "rules": rules}]}


async def _query(
    session: aiohttp.ClientSession, url: str, latencies: list[float], sizes: list[int]
) -> None:
    started = time.monotonic()
    async with session.get(url) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}")
    latencies.append(time.monotonic() - started)
    sizes.append(len(body))


async def _measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rules = tmp / "rules.yml"
    rules.write_text(yaml.safe_dump(_rules(args.alerts)))
    config = tmp / "prometheus.yml"
    config.write_text(
        yaml.safe_dump({"global": {"evaluation_interval": "5s"}, "rule_files": [str(rules)]})
    )
    port = _free_port()
    proc = subprocess.Popen(  # noqa: ASYNC220 (started once, before the measurement)
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/api/v1/alerts"
    try:
        process = psutil.Process(proc.pid)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            while True:  # until every rule fires
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            data = await resp.json()
                            if len(data["data"]["alerts"]) >= args.alerts:
                                break
                await asyncio.sleep(0.5)

            def cpu() -> float:
                times = process.cpu_times()
                return float(times.user + times.system)

            idle_start = cpu()
            await asyncio.sleep(args.seconds)
            idle = cpu() - idle_start

            rate = args.nodes / args.interval
            latencies: list[float] = []
            sizes: list[int] = []
            tasks: list[asyncio.Task[None]] = []
            busy_start = cpu()
            started = time.monotonic()
            sent = 0
            while (now := time.monotonic() - started) < args.seconds:
                due = int(now * rate) + 1
                while sent < due:
                    tasks.append(asyncio.create_task(_query(session, url, latencies, sizes)))
                    sent += 1
                await asyncio.sleep(max(0.0, (sent / rate) - (time.monotonic() - started)))
            results = await asyncio.gather(*tasks, return_exceptions=True)
            busy = cpu() - busy_start
            elapsed = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    errors = sum(1 for r in results if isinstance(r, BaseException))
    return {
        "parameters": {k: v for k, v in vars(args).items() if k != "out"},
        "queries": sent,
        "queries_per_second": round(sent / elapsed, 1),
        "errors": errors,
        "answer_bytes_median": int(percentile(sorted(sizes), 50)) if sizes else None,
        "latency_ms": {
            "p50": round(percentile(sorted(latencies), 50) * 1000, 1),
            "p99": round(percentile(sorted(latencies), 99) * 1000, 1),
        },
        "prometheus_cpu_seconds_idle": round(idle, 2),
        "prometheus_cpu_seconds_queried": round(busy, 2),
        "prometheus_cores_for_queries": round((busy - idle) / elapsed, 3),
        "bytes_per_second": int(sum(sizes) / elapsed),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m benchmarks.alertload")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--interval", type=float, default=30.0, help="--alert-interval, s")
    parser.add_argument("--alerts", type=int, default=200, help="alerts firing at once")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(_measure(args, Path(tmp)))
    print(result)
    write_result("alertload", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
