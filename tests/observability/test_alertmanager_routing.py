"""Notifications the Alertmanager way (issue 37): docs/examples/alertmanager.yml, loaded by a
real Alertmanager (Debian's ``prometheus-alertmanager``), routes every alert of the rules file
to drain-guard's receivers and delivers them, firing and resolved, to a webhook receiver on
loopback.

The test posts the alerts as Prometheus would: each rule's name, labels and annotations, with
the ``node`` label the agents' ServiceMonitor adds. The example's webhook URLs point at the
test's receiver, and its grouping waits (30 s, 5 min) are cut to a second, so the test takes
seconds; the routes, matchers and receivers are the example's own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from tests.helpers import WAIT
from tests.observability.alertmanager import alertmanager

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "alertmanager.yml"
RULES = ROOT / "daemonset" / "rules" / "drain-guard.rules.yml"
NODE = "worker-1"
OTHER = "Watchdog"  # an alert of someone else's, always firing on OpenShift

pytestmark = pytest.mark.alertmanager


class Webhook:
    """A webhook receiver on loopback: each notification's JSON, per path."""

    def __init__(self) -> None:
        self.base = ""
        self.received: dict[str, asyncio.Queue[dict[str, Any]]] = {}

    def queue(self, path: str) -> asyncio.Queue[dict[str, Any]]:
        return self.received.setdefault(path, asyncio.Queue())

    async def handle(self, request: web.Request) -> web.Response:
        await self.queue(request.path).put(await request.json())
        return web.Response()

    async def next(self, path: str) -> dict[str, Any]:
        async with asyncio.timeout(WAIT):
            return await self.queue(path).get()


@contextlib.asynccontextmanager
async def webhook() -> AsyncIterator[Webhook]:
    hook = Webhook()
    app = web.Application()
    app.router.add_post("/{receiver}", hook.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    hook.base = f"http://127.0.0.1:{port}"
    try:
        yield hook
    finally:
        await runner.cleanup()


def example_delivering_to(base: str) -> str:
    """The example, its webhooks sent to ``base``/RECEIVER, its grouping waits a second."""
    config = yaml.safe_load(EXAMPLE.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{base}/{receiver['name']}"
    for route in config["route"]["routes"]:
        route.update(group_wait="0s", group_interval="1s")
    return str(yaml.safe_dump(config))


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


async def test_the_example_routes_every_drain_guard_alert_and_delivers_it(
    tmp_path: Path,
) -> None:
    every = rules()
    critical = {r["alert"] for r in every if r["labels"]["severity"] == "critical"}
    warning = {r["alert"] for r in every} - critical
    assert critical
    assert warning
    async with webhook() as hook, alertmanager(tmp_path, example_delivering_to(hook.base)) as am:
        for rule in every:
            annotations = {"summary": rule["annotations"]["summary"]}
            annotations["runbook_url"] = rule["annotations"]["runbook_url"]
            await am.post(
                rule["alert"], labels={**rule["labels"], "node": NODE}, annotations=annotations
            )
        await am.post(OTHER, labels={"severity": "none"})

        routed = await am.receivers()
        assert routed[OTHER] == ["default"]
        assert {name for name, to in routed.items() if to == ["drain-guard"]} == warning
        assert {name for name, to in routed.items() if to == ["drain-guard-critical"]} == critical

        # One notification per alert and node (group_by), each with the rule's annotations.
        delivered: dict[str, dict[str, Any]] = {}
        while set(delivered) != warning:
            note = await hook.next("/drain-guard")
            assert note["receiver"] == "drain-guard"
            assert note["status"] == "firing"
            assert note["groupLabels"]["node"] == NODE
            (alert,) = note["alerts"]
            delivered[alert["labels"]["alertname"]] = alert
        hold_too_long = delivered["DrainGuardHoldTooLong"]
        assert hold_too_long["annotations"]["runbook_url"].endswith("DrainGuardHoldTooLong.md")

        (page,) = sorted(critical)
        note = await hook.next("/drain-guard-critical")
        assert (note["status"], note["groupLabels"]) == (
            "firing",
            {"alertname": page, "node": NODE},
        )

        # Resolved, as Prometheus sends it: the receiver hears that too (send_resolved).
        await am.post(page, resolved=True, labels={"severity": "critical", "node": NODE})
        note = await hook.next("/drain-guard-critical")
        assert note["status"] == "resolved"
        assert [a["labels"]["alertname"] for a in note["alerts"]] == [page]
