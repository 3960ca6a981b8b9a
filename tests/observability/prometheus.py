"""A real Prometheus server for tests: loopback only, temp dir, 1 s scrape and rule interval;
and how it and Alertmanager are run (``serving``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.helpers import require_tool

START_TIMEOUT = 30.0
ATTEMPTS = 3


def free_port() -> int:
    """A port free right now on 127.0.0.1 (Prometheus cannot bind port 0 and report it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Prometheus:
    """A running Prometheus and its HTTP API."""

    def __init__(self, base: str, http: aiohttp.ClientSession) -> None:
        self.base = base
        self.http = http

    async def api(self, path: str, **params: str) -> Any:
        async with self.http.get(f"{self.base}/api/v1/{path}", params=params) as resp:
            body = await resp.json()
        assert body["status"] == "success", body
        return body["data"]

    async def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the vector's samples as ``{"metric": {...}, "value": [t, "v"]}``."""
        data = await self.api("query", query=promql)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    async def wait_for(self, promql: str) -> list[dict[str, Any]]:
        """Poll ``promql`` until it returns samples (e.g. ``up{job="x"} == 1``); the caller
        bounds the wait with ``asyncio.timeout``."""
        while True:
            if result := await self.query(promql):
                return result
            await asyncio.sleep(0.2)


def _config(targets: Sequence[str], labels: Mapping[str, str], rule_files: Sequence[Path]) -> str:
    return yaml.safe_dump(
        {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": "drain-guard",
                    "static_configs": [{"targets": list(targets), "labels": dict(labels)}],
                }
            ],
        }
    )


@contextlib.asynccontextmanager
async def prometheus(
    tmp: Path,
    targets: Sequence[str],
    labels: Mapping[str, str] | None = None,
    rule_files: Sequence[Path] = (),
) -> AsyncIterator[Prometheus]:
    """Start Prometheus scraping ``targets`` (job ``drain-guard``); stop it on exit."""
    config = tmp / "prometheus.yml"
    config.write_text(_config(targets, labels or {}, rule_files))

    def args(port: int, attempt: int) -> list[str]:
        return [
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / f'data-{attempt}'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]

    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
        serving("prometheus", args, tmp, http) as base,
    ):
        yield Prometheus(base, http)


@contextlib.asynccontextmanager
async def serving(
    tool: str,
    args: Callable[[int, int], list[str]],
    tmp: Path,
    http: aiohttp.ClientSession,
) -> AsyncIterator[str]:
    """Run the system tool ``tool`` (Prometheus, Alertmanager) with ``args(port, attempt)``
    on a free loopback port until it is ready (``/-/ready``), and stop it on exit; its base
    URL. Neither binds port 0 and reports it: a port taken meanwhile is tried again."""
    binary = require_tool(tool)
    log = tmp / f"{tool}.log"
    for attempt in range(ATTEMPTS):
        port = free_port()
        with log.open("ab") as out:
            proc = await asyncio.create_subprocess_exec(
                binary, *args(port, attempt), stdout=out, stderr=subprocess.STDOUT, cwd=tmp
            )
        try:
            base = f"http://127.0.0.1:{port}"
            if await _ready(http, base, proc):
                yield base
                return
            # Exited early: most likely the port was taken meanwhile; try another.
            if attempt == ATTEMPTS - 1:
                raise AssertionError(f"{tool} did not start:\n{log.read_text()}")
        finally:
            if proc.returncode is None:
                proc.terminate()
                try:
                    async with asyncio.timeout(10):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def _ready(http: aiohttp.ClientSession, base: str, proc: asyncio.subprocess.Process) -> bool:
    """Wait for ``/-/ready``; False if the process exited first."""
    async with asyncio.timeout(START_TIMEOUT):
        while proc.returncode is None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(f"{base}/-/ready") as resp:
                    if resp.status == 200:
                        return True
            await asyncio.sleep(0.1)
    return False
