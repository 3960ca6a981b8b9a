"""Alert gating against a real Alertmanager (``--alert-api alertmanager``): a ``drain-guard
run`` process (against the API simulator) asks Alertmanager's API for the active alerts.

The test posts the alerts itself, as Prometheus would: ``DrainGate`` (the agent's
``--alert-filter``) and ``Watchdog`` (firing throughout, not matched). An operator lets
drains go on while an alert fires by silencing it, or it is inhibited (the alert
``Maintenance`` inhibits ``DrainGate`` here): the agent asks only for alerts neither
silenced nor inhibited (docs/configuration.md, ``--alert-api``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    CONFIG_B,
    IMAGE_B,
    NODE,
    WAIT,
    StartAgent,
    mcd_request,
    wait_annotation,
)
from tests.observability.alertmanager import Alertmanager, alertmanager, inhibiting

DRAIN_B = f"drain-{CONFIG_B}"
HELD = "hold-" + DRAIN_B
GATE = "DrainGate"
INHIBITOR = "Maintenance"

pytestmark = pytest.mark.alertmanager


def gating(am: Alertmanager) -> tuple[str, ...]:
    return (
        f"--alert-url={am.base}",
        "--alert-api=alertmanager",
        f"--alert-filter=^{GATE}$",
        "--alert-interval=1s",
    )


async def test_an_alert_posted_to_alertmanager_holds_the_drain_until_it_resolves(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    async with alertmanager(tmp_path, inhibiting(INHIBITOR, GATE)) as am:
        await am.post(GATE)
        await am.post("Watchdog")
        async with asyncio.timeout(WAIT):
            await am.wait_state(GATE, "active")
        agent = await start_agent(*gating(am))
        mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)
        assert ann[protocol.HOLD_REASONS] == "alert"
        assert ann[protocol.HOLD_DETAIL] == f"alert: firing: {GATE}"
        _, body = await agent.http("/status")
        assert json.loads(body)["alerts"]["firing"] == [GATE]  # Watchdog fires, not matched

        await am.post(GATE, resolved=True)  # as Prometheus sends a resolved alert
        ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
        assert protocol.HELD_DRAIN not in ann
        assert await am.states() == {"Watchdog": "active"}
        released = await agent.wait_log(lambda r: r.get("outcome") == "safe")
        assert released["request"] == DRAIN_B


@pytest.mark.parametrize("suppressed_by", ["silence", "inhibition"])
async def test_a_silenced_or_inhibited_alert_does_not_hold_until_that_ends(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path, suppressed_by: str
) -> None:
    """While the alert is suppressed the drain passes; once the silence expires (or the
    inhibiting alert resolves) the alert holds the next drain."""
    async with alertmanager(tmp_path, inhibiting(INHIBITOR, GATE)) as am:
        await am.post(GATE)
        if suppressed_by == "silence":
            silence = await am.silence(GATE)
        else:
            await am.post(INHIBITOR)
        async with asyncio.timeout(WAIT):
            await am.wait_state(GATE, "suppressed")
        agent = await start_agent(*gating(am))
        # Its first answer: none matching (the alert guard waits for one before deciding).
        await agent.wait_log(lambda r: r.get("message") == "matching alerts firing: none")
        mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        passed = await agent.wait_log(lambda r: r.get("request") == DRAIN_B)
        assert passed["outcome"] == "pass"
        assert protocol.HELD_DRAIN not in api.get("nodes", NODE)["metadata"]["annotations"]

        if suppressed_by == "silence":
            await am.expire(silence)
        else:
            await am.post(INHIBITOR, resolved=True)
        async with asyncio.timeout(WAIT):
            await am.wait_state(GATE, "active")
        await agent.wait_log(lambda r: r.get("message") == f"matching alerts firing: {GATE}")
        drain_c = "drain-rendered-worker-" + "c" * 32
        mcd_request(api, drain_c, **{protocol.DESIRED_IMAGE: IMAGE_B})
        ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + drain_c)
        assert ann[protocol.HOLD_DETAIL] == f"alert: firing: {GATE}"
