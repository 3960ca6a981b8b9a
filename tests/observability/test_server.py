"""The HTTP endpoint on a real loopback port: routes, status codes, formats, read-only."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from drain_guard.config import parse_listen
from drain_guard.metrics import Metrics
from drain_guard.server import make_app, serve
from drain_guard.status import AgentStatus, HoldReasonStatus

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@dataclass
class FakeSource:
    """A StatusSource whose answers the test sets."""

    is_alive: bool = True
    readiness: tuple[bool, str] = (True, "")
    snapshot: AgentStatus = field(
        default_factory=lambda: AgentStatus(
            node="worker-0",
            decision="holding",
            explanation="drain held: a build pod runs on this node",
            version="0.1.0",
            started_at=T0,
            generated_at=T0,
            held_request="drain-rendered-worker-1",
            hold_reasons=(HoldReasonStatus("build-pod", "ns/build-1 Running"),),
            since=T0,
        )
    )

    def status(self) -> AgentStatus:
        return self.snapshot

    def alive(self) -> bool:
        return self.is_alive

    def ready(self) -> tuple[bool, str]:
        return self.readiness


@dataclass
class Served:
    source: FakeSource
    metrics: Metrics
    base: str
    http: aiohttp.ClientSession


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    source, metrics = FakeSource(), Metrics()
    runner, port = await serve(make_app(source, metrics), parse_listen("127.0.0.1:0"))
    try:
        async with aiohttp.ClientSession() as http:
            yield Served(source, metrics, f"http://127.0.0.1:{port}", http)
    finally:
        await runner.cleanup()


async def get(s: Served, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    async with s.http.get(s.base + path, headers=headers) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


async def test_healthz(served: Served) -> None:
    assert (await get(served, "/healthz"))[::2] == (200, "ok\n")
    served.source.is_alive = False
    status, _, body = await get(served, "/healthz")
    assert status == 503
    assert "not running" in body


async def test_readyz_gives_the_reason(served: Served) -> None:
    assert (await get(served, "/readyz"))[::2] == (200, "ok\n")
    served.source.readiness = (False, "pod watch not synced")
    assert (await get(served, "/readyz"))[::2] == (503, "pod watch not synced\n")


async def test_status_json_and_text(served: Served) -> None:
    async with served.http.get(served.base + "/status") as resp:
        assert resp.status == 200
        assert resp.content_type == "application/json"
        doc = await resp.json()
    assert doc == served.source.snapshot.to_json()
    assert doc["heldRequest"] == "drain-rendered-worker-1"

    status, ctype, body = await get(served, "/status?format=text")
    assert status == 200
    assert ctype.startswith("text/plain")
    assert body == served.source.snapshot.to_text()

    assert (await get(served, "/status?format=yaml"))[0] == 400


async def test_metrics_text_format(served: Served) -> None:
    served.metrics.hold_committed(["build-pod"], T0, 0.01)
    status, ctype, body = await get(served, "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(body)
        for s in f.samples
    }
    assert samples[("drain_guard_hold_active", (("reason", "build-pod"),))] == 1
    assert samples[("drain_guard_hold_started_timestamp_seconds", ())] == T0.timestamp()
    assert samples[("drain_guard_holds_total", (("reason", "build-pod"),))] == 1


async def test_metrics_openmetrics_negotiation(served: Served) -> None:
    status, ctype, body = await get(
        served, "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert status == 200
    assert ctype.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n")
    assert "drain_guard_build_info{" in body


async def test_head_is_allowed_and_writes_are_not(served: Served) -> None:
    for path in ("/healthz", "/readyz", "/status", "/metrics"):
        async with served.http.head(served.base + path) as resp:
            assert resp.status == 200, path
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            async with served.http.request(method, served.base + path) as resp:
                assert resp.status == 405, (method, path)
    assert (await get(served, "/release"))[0] == 404


async def test_serve_logs_the_bound_address(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="drain_guard.server")
    runner, port = await serve(make_app(FakeSource(), Metrics()), parse_listen("127.0.0.1:0"))
    try:
        assert port > 0
        found = [
            m
            for r in caplog.records
            if (m := re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)", r.getMessage()))
        ]
        assert [int(m.group(1)) for m in found] == [port]
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as resp,
        ):
            assert resp.status == 200
    finally:
        await runner.cleanup()


async def test_port_in_use_is_an_error(served: Served) -> None:
    port = int(served.base.rsplit(":", 1)[1])
    with pytest.raises(OSError, match="in use"):
        await serve(make_app(FakeSource(), Metrics()), parse_listen(f"127.0.0.1:{port}"))
