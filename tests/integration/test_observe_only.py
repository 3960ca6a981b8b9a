"""``drain-guard run --observe-only``: decides as usual, reports every would-be hold in its log,
``/status`` and metrics, and writes nothing at all (the simulator's write log is the witness)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.cluster import SimCluster
from tests.helpers import (
    AGENT_USER,
    CONFIG_B,
    IMAGE_A,
    IMAGE_B,
    MCO_NS,
    WAIT,
    StartAgent,
    add_build_pod,
    mcd_request,
    metric,
    reap,
    spawn,
)

WOULD_HOLDS = "drain_guard_would_holds_total"


async def _observed_eviction(agent: AgentProcess) -> dict[str, Any]:
    """The agent's ``/status`` ``observed`` once it counts an evicted build pod (its pass on
    the pod's deletion follows the drain controller's eviction)."""
    async with asyncio.timeout(WAIT):
        while True:
            _, body = await agent.http("/status")
            observed: dict[str, Any] = json.loads(body)["observed"]
            if observed["buildPodsEvicted"] >= 1:
                return observed
            await asyncio.sleep(0.1)


def _would_hold(record: dict[str, object], request: str) -> bool:
    return (
        record.get("message") == "decision"
        and record.get("outcome") == "hold"
        and record.get("observeOnly") is True
        and record.get("request") == request
    )


async def test_observe_only_reports_every_would_be_hold_and_writes_nothing(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    # The environment variable, as the manifests' switch sets it.
    agent = await start_agent(env={"DRAIN_GUARD_OBSERVE_ONLY": "true"})
    assert await metric(agent, "drain_guard_observe_only") == 1

    # 1. A drain while a build pod runs, for a new image: would hold for build-pod.
    add_build_pod(api)
    first = f"drain-{CONFIG_B}"
    mcd_request(api, first, **{protocol.DESIRED_IMAGE: IMAGE_B})
    record = await agent.wait_log(lambda r: _would_hold(r, first))
    assert record["reasons"] == ["build-pod"]
    assert str(record["why"]).startswith("observe-only, not written: would hold")
    status, body = await agent.http("/status")
    doc = json.loads(body)
    assert status == 200
    assert doc["observeOnly"] is True
    assert doc["decision"] == "hold"
    assert doc["heldRequest"] is None
    assert doc["explanation"].startswith("observe-only, not written: would hold " + first)
    # Re-deciding on every pod event counts the request once and logs it once.
    add_build_pod(api, name="another-build-pod")
    await agent.wait_log(lambda r: r.get("message") == "decision" and "another" in str(r["why"]))
    assert await metric(agent, "drain_guard_would_holds_total", reason="build-pod") == 1

    # 2. An operator's hold request on a pending request for the booted image: would hold
    # for noop-image and manual.
    api.delete("pods", "build-pod", "openshift-machine-config-operator")
    api.delete("pods", "another-build-pod", "openshift-machine-config-operator")
    second = "drain-rendered-worker-" + "c" * 32
    mcd_request(
        api,
        second,
        **{
            protocol.DESIRED_IMAGE: IMAGE_A,
            protocol.HOLD_REQUEST: "2999-01-01T00:00:00Z;maintenance",
        },
    )
    record = await agent.wait_log(lambda r: _would_hold(r, second))
    assert sorted(record["reasons"]) == ["manual", "noop-image"]
    for reason, count in (("build-pod", 1), ("noop-image", 1), ("manual", 1)):
        assert await metric(agent, "drain_guard_would_holds_total", reason=reason) == count
    for reason in ("build-pod", "noop-image", "manual"):
        assert await metric(agent, "drain_guard_holds_total", reason=reason) == 0
    assert await metric(agent, "drain_guard_drain_requests_total", verb="drain") == 2
    assert await metric(agent, "drain_guard_shield_budgets") == 0
    # What it saw over its run, in /status as the metrics count it (no cordon: no eviction).
    _, body = await agent.http("/status")
    assert json.loads(body)["observed"] == {
        "drainRequests": 2,
        "wouldHolds": {"build-pod": 1, "manual": 1, "noop-image": 1},
        "buildPodsEvicted": 0,
        "lastEvicted": None,
    }

    # A shutdown writes nothing either (no release, no budget clean-up, no Event).
    assert await agent.stop(signal.SIGTERM) == 0
    assert [w for w in api.writes() if w.user == AGENT_USER] == []
    assert "observe-only" in agent.log_text()


async def test_enforcing_agent_reports_observe_only_off(start_agent: StartAgent) -> None:
    agent = await start_agent()
    assert await metric(agent, "drain_guard_observe_only") == 0
    _, body = await agent.http("/status")
    assert json.loads(body)["observeOnly"] is False


@pytest.mark.timeout(240)
async def test_seed_scenario_observe_only_writes_nothing_and_reports_each_hold(
    tmp_path: Path,
) -> None:
    """Observe-only agents in the seed scenario: the cluster goes as without drain-guard (the
    build node is drained during the build), and every drain an enforcing agent would have
    held (each drain while a build pod ran or for the booted image) is reported."""
    agents: list[AgentProcess] = []
    async with SimCluster(tmp_path / "cluster", nodes=2, time_factor=0.05) as cluster:
        try:
            for node in cluster.node_names:
                await spawn(
                    node,
                    cluster.agent_kubeconfig(node),
                    cluster.hosts[node],
                    "--observe-only",
                    started=agents,
                )
            await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
            build = await cluster.wait_build_done(timeout=120)
            outcome = cluster.outcome()
            # Each pointless drain (desired image = booted) reached its agent, which says so.
            pointless = outcome.unchanged_image_cordons()
            assert pointless
            for cordon in pointless:
                agent = agents[cluster.node_names.index(cordon.node)]
                request = cordon.desired_drain

                def reported(r: dict[str, object], request: str = request) -> bool:
                    return _would_hold(r, request)

                record = await agent.wait_log(reported)
                assert "noop-image" in record["reasons"]
            # The build node's agent saw its build pod evicted by the drain, and counts that
            # request under build-pod as well as noop-image (issue 37: build-pod stayed 0).
            build_agent = agents[cluster.node_names.index(cluster.build_node)]
            observed = await _observed_eviction(build_agent)
            assert str(observed["lastEvicted"]).startswith(f"{MCO_NS}/")
            for reason in ("build-pod", "noop-image"):
                assert await metric(build_agent, WOULD_HOLDS, reason=reason) >= 1
                assert observed["wouldHolds"][reason] >= 1
            for agent in agents:
                assert await agent.stop() == 0
        finally:
            await reap(agents)
        writes = [w for w in cluster.api.writes() if w.user == AGENT_USER]

    assert writes == []
    # As without drain-guard: the build node was drained while its build pod ran.
    assert [c for c in outcome.during_build() if c.node == build.node]
    records = agents[cluster.node_names.index(cluster.build_node)].records
    assert any(
        _would_hold(r, str(r.get("request"))) and "build-pod" in r["reasons"] for r in records
    )
