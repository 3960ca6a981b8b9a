"""End to end: a real Prometheus scrapes a ``drain-guard run`` process that holds a drain.

The agent runs against the API simulator (fixtures in tests/conftest.py); Prometheus runs on
loopback from a temp dir with a 1 s scrape and rule interval, loads the shipped alert rules,
and everything is read back through Prometheus's HTTP API.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from drain_guard import __version__, protocol
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    CONFIG_B,
    IMAGE_B,
    NODE,
    StartAgent,
    add_build_pod,
    mcd_request,
    require_tool,
    wait_annotation,
)
from tests.observability.prometheus import Prometheus, prometheus

RULES = Path(__file__).resolve().parents[2] / "daemonset" / "rules" / "drain-guard.rules.yml"
DRAIN_B = f"drain-{CONFIG_B}"
#: Prometheus discovers static targets within ~5 s and then scrapes every second.
SCRAPE_WAIT = 30.0

pytestmark = pytest.mark.prometheus


def values(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in result}


async def scraped(prom: Prometheus, promql: str) -> list[dict[str, Any]]:
    async with asyncio.timeout(SCRAPE_WAIT):
        return await prom.wait_for(promql)


async def test_prometheus_scrapes_an_agent_holding_a_drain(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    require_tool("prometheus")  # before starting anything
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    since = protocol.parse_rfc3339(ann[protocol.HELD_SINCE])

    # /status tells the same story as the metrics below (once the agent has seen its patch
    # answered: the Node can show the hold a moment before).
    async with asyncio.timeout(SCRAPE_WAIT):
        while True:
            code, body = await agent.http("/status")
            assert code == 200
            status = json.loads(body)
            if status["decision"] in ("hold", "holding"):
                break
            await asyncio.sleep(0.1)
    assert status["heldRequest"] == DRAIN_B
    assert [r["reason"] for r in status["holdReasons"]] == ["build-pod"]
    assert status["since"] == ann[protocol.HELD_SINCE]

    target = f"127.0.0.1:{agent.port}"
    async with prometheus(tmp_path, [target], {"node": NODE}, [RULES]) as prom:
        [up] = await scraped(prom, 'up{job="drain-guard"} == 1')
        assert up["metric"] == {
            "__name__": "up",
            "job": "drain-guard",
            "instance": target,
            "node": NODE,
        }
        # The agent updates its metrics right after its hold patch is answered.
        await scraped(prom, 'drain_guard_hold_active{reason="build-pod"} == 1')
        held = values(await prom.query('drain_guard_hold_active{job="drain-guard"}'), "reason")
        assert held == {r.value: 0 for r in protocol.Reason} | {"build-pod": 1}
        [started] = await prom.query("drain_guard_hold_started_timestamp_seconds")
        assert float(started["value"][1]) == since.timestamp()
        holds = values(await prom.query("drain_guard_holds_total"), "reason")
        assert holds == {r.value: 0 for r in protocol.Reason} | {"build-pod": 1}
        releases = values(await prom.query("drain_guard_releases_total"), "outcome")
        assert set(releases) == {o.value for o in protocol.Outcome}
        assert set(releases.values()) == {0}
        [reactions] = await prom.query("drain_guard_reaction_seconds_count")
        assert float(reactions["value"][1]) == 1
        assert values(await prom.query("drain_guard_synced"), "resource") == {
            "node": 1,
            "pod": 1,
            "poddisruptionbudget": 1,
        }
        assert values(await prom.query("drain_guard_build_pods"), "node") == {NODE: 1}
        assert values(
            await prom.query('drain_guard_drain_requests_total{verb="drain"}'), "verb"
        ) == {"drain": 1}
        [info] = await prom.query("drain_guard_build_info")
        assert info["metric"]["version"] == __version__

        # The shipped rules load and evaluate against the agent's series without errors;
        # the hold is minutes old, not 30, so the hold alert is not pending.
        [group] = (await prom.api("rules"))["groups"]
        assert group["name"] == "drain-guard"
        assert {r["name"]: (r["health"], r.get("lastError", "")) for r in group["rules"]} == {
            name: ("ok", "") for name in (r["name"] for r in group["rules"])
        }
        alerts = {a["labels"]["alertname"] for a in (await prom.api("alerts"))["alerts"]}
        assert "DrainGuardHoldTooLong" not in alerts

        # Release: the build finishes; Prometheus sees the hold end with outcome "safe".
        pod = api.get("pods", "build-pod", "openshift-machine-config-operator")
        pod["status"]["phase"] = "Succeeded"
        api.update("pods", pod, "openshift-machine-config-operator", subresource="status")
        await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
        await scraped(prom, 'drain_guard_releases_total{outcome="safe"} == 1')
        await scraped(prom, "drain_guard_hold_started_timestamp_seconds == 0")
        assert set(values(await prom.query("drain_guard_hold_active"), "reason").values()) == {0}
    assert await agent.stop() == 0
