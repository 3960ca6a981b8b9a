"""The shield inside ``drain-guard run`` against the simulator: budgets, status, metrics, exit."""

from __future__ import annotations

import json
import signal

from prometheus_client.parser import text_string_to_metric_families

from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    AGENT_USER,
    MCO_NS,
    WAIT,
    StartAgent,
    add_build_pod,
    metric,
)

OURS = "app.kubernetes.io/managed-by=drain-guard"


def budgets(api: SimApiServer) -> list[str]:
    return [b["metadata"]["name"] for b in api.list("poddisruptionbudgets", label_selector=OURS)]


def finish_pod(api: SimApiServer, name: str = "build-pod") -> None:
    pod = api.get("pods", name, MCO_NS)
    pod["status"]["phase"] = "Succeeded"
    api.update("pods", pod, MCO_NS, subresource="status")


async def test_the_agent_shields_a_build_pod_while_it_runs(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    await api.wait_for(lambda: budgets(api) == ["drain-guard-build-pod"], timeout=WAIT)
    [created] = [w for w in api.writes("poddisruptionbudgets") if w.verb == "create"]
    assert created.user == AGENT_USER
    await agent.wait_log(lambda r: "budget" in str(r.get("message", "")))
    status, body = await agent.http("/status")
    assert status == 200
    shield = json.loads(body)["shield"]
    assert [b["name"] for b in shield["budgets"]] == ["build-pod"]
    assert await metric(agent, "drain_guard_shield_budgets") == 1
    assert await metric(agent, "drain_guard_synced", resource="poddisruptionbudget") == 1

    finish_pod(api)
    await api.wait_for(lambda: budgets(api) == [], timeout=WAIT)
    assert await agent.stop() == 0
    assert budgets(api) == []


async def test_a_killed_agent_leaves_the_budget_and_uninstall_removes_it(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    await api.wait_for(lambda: budgets(api) == ["drain-guard-build-pod"], timeout=WAIT)
    assert await agent.stop(signal.SIGKILL) != 0
    assert budgets(api) == ["drain-guard-build-pod"]  # guards the pod while no agent runs

    agent = await start_agent("--release-on-exit")
    assert await agent.stop() == 0  # SIGTERM with --release-on-exit: an uninstall
    assert budgets(api) == []


async def test_the_shield_can_be_turned_off(api: SimApiServer, start_agent: StartAgent) -> None:
    add_build_pod(api)
    agent = await start_agent("--shield-build-pods", "false")
    _, body = await agent.http("/status")
    assert json.loads(body)["shield"] is None
    assert await metric(agent, "drain_guard_shield_budgets") == 0
    _, text = await agent.http("/metrics")
    synced = {
        sample.labels["resource"]
        for family in text_string_to_metric_families(text)
        if family.name == "drain_guard_synced"
        for sample in family.samples
    }
    assert synced == {"node", "pod"}
    assert api.request_count(user=AGENT_USER, resource="poddisruptionbudgets.policy") == 0
    assert budgets(api) == []
