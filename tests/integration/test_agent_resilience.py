"""The agent under API trouble: expired watches, lost compare-and-swaps, errors."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from drain_guard import protocol
from drain_guard.kube.client import NODE_WRITE_TIMEOUT
from drain_guard.runtime.metrics import SYNCED_RESOURCES
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.faults import Fault, FaultKind
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_agent
from tests.helpers import (
    AGENT_USER,
    CONFIG_B,
    IMAGE_B,
    MCO_NS,
    NODE,
    WAIT,
    StartAgent,
    add_build_pod,
    agent_writes,
    mcd_request,
    metric,
    reap,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"
DRAIN_C = "drain-rendered-worker-" + "c" * 32


def _expired_window(api: SimApiServer) -> None:
    """Move the resourceVersion on and forget the event window, then cut every watch: each
    agent watch resumes from a resourceVersion the server no longer has (410)."""
    api.create("namespaces", {"metadata": {"name": "bump"}})
    api.compact()
    api.cut_watches()


async def test_relists_after_410_and_keeps_working(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent = await start_agent()
    mark = len(agent.records)
    _expired_window(api)
    for watch in ("node worker-0", "pods on node worker-0 in openshift-machine-config-operator"):
        expected = f"watch of {watch} expired (410), listing again"

        def is_relist(record: dict[str, Any], expected: str = expected) -> bool:
            return record.get("message") == expected

        await agent.wait_log(is_relist, start=mark)
    assert (
        await metric(agent, "drain_guard_watch_restarts_total", resource="node", reason="expired")
        >= 1
    )
    # Changes after the re-list reach the agent: the watches are alive again.
    add_build_pod(api)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)


async def test_relists_after_a_410_error_event(api: SimApiServer, start_agent: StartAgent) -> None:
    agent = await start_agent()
    mark = len(agent.records)
    api.faults.expire_watches(times=1, user=AGENT_USER, resource="nodes")
    api.cut_watches(resource="nodes")
    await agent.wait_log(
        lambda r: r.get("message") == "watch of node worker-0 expired (410), listing again",
        start=mark,
    )
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    add_build_pod(api)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)


async def test_a_lost_compare_and_swap_is_decided_again_on_fresh_state(
    api: SimApiServer, start_agent: StartAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    real_fire = api.faults.fire
    raced: list[int] = []

    def fire(kind: FaultKind, user: str, verb: str, resource: str) -> list[Fault]:
        # The agent's first hold patch has been sent; before the server applies it, the MCD
        # writes a newer request (a real concurrent writer, deterministic here).
        ours = (kind, user, verb, resource) == (FaultKind.LATENCY, AGENT_USER, "patch", "nodes")
        if ours and not raced:
            raced.append(mcd_request(api, DRAIN_C))
        return real_fire(kind, user, verb, resource)

    monkeypatch.setattr(api.faults, "fire", fire)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_C)
    assert ann[protocol.HELD_DRAIN] == DRAIN_C
    await agent.wait_log(lambda r: str(r.get("message", "")).startswith("compare-and-swap lost"))
    # The stale hold of DRAIN_B never reached the Node: the test operation refused it.
    held_values = [
        (w.after or {}).get("metadata", {}).get("annotations", {}).get(protocol.DESIRED_DRAIN)
        for w in agent_writes(api)
        if w.resource == "nodes"  # not the shield's budget on the build pod
    ]
    assert "hold-" + DRAIN_B not in held_values
    assert held_values == ["hold-" + DRAIN_C]


async def test_backs_off_and_retries_when_the_patch_fails(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    api.faults.error(429, retry_after=1, user=AGENT_USER, verb="patch", resource="nodes", times=1)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert await metric(agent, "drain_guard_api_errors_total", operation="node_patch") == 1
    retry: dict[str, Any] = await agent.wait_log(
        lambda r: str(r.get("message", "")).startswith(f"decisions on node {NODE}: ")
    )
    assert "(API call failed: 429 " in retry["message"]
    assert "retrying in 1.0s," in retry["message"]


async def test_failed_retries_of_a_pass_are_one_warning_and_one_recovery_line(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    api.faults.error(503, user=AGENT_USER, verb="patch", resource="nodes", times=3)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    up = await agent.wait_log(
        lambda r: str(r.get("message")).startswith(f"decisions on node {NODE}: API reachable")
    )
    ours = [r for r in agent.records if r["message"].startswith(f"decisions on node {NODE}: ")]
    assert [r["level"] for r in ours] == ["WARNING", "WARNING"]
    assert "API unreachable since" in ours[0]["message"]
    assert ours[1] == up
    assert up["message"].endswith("3 retries)")
    assert await metric(agent, "drain_guard_retries_total", part="controller") == 3


async def test_ten_refused_writes_in_a_row_with_nothing_else_happening_delay_the_hold_only(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Issue 27: after five refusals (422, as a webhook or the annotation size limit answers,
    with no competing write to wake the agent) the agent waited for the next Node or pod
    event, and the request stayed un-held. Now the pass is retried on the backoff's timer."""
    add_build_pod(api)
    agent = await start_agent()
    refusals = api.faults.error(
        422, message="denied by a webhook", user=AGENT_USER, verb="patch", resource="nodes"
    )
    refusals.times = 10
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert refusals.fired == 10
    await agent.wait_log(_starts(f"decisions on node {NODE}: API accepting it again"))
    ours = [r for r in agent.records if r["message"].startswith(f"decisions on node {NODE}: ")]
    assert [r["level"] for r in ours] == ["WARNING", "WARNING"], ours
    assert "API refusing it since" in ours[0]["message"]
    assert "(node write failed: 422 5 times in a row: denied by a webhook)" in ours[0]["message"]
    assert "API accepting it again" in ours[1]["message"]
    assert ours[1]["message"].endswith("2 retries)")
    assert await metric(agent, "drain_guard_retries_total", part="controller") == 2


async def test_a_hung_node_write_is_given_up_after_the_admission_bound_and_retried(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Issue 27: a hung API stalled a write for the full 10 s request timeout. Issue 35: a
    Node write given up before an admission webhook's own timeout (5 s) is cancelled by the
    API server before the webhook's failurePolicy applies. Now a Node write has
    NODE_WRITE_TIMEOUT (the webhook's bound and 3 s), then the pass is retried after the
    backoff's first step (0.25-0.5 s) on a fresh connection (the log says both figures; the
    test does not time the machine)."""
    add_build_pod(api)
    agent = await start_agent()
    hang = api.faults.latency(60.0, user=AGENT_USER, verb="patch", resource="nodes", times=1)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert hang.fired == 1
    failed = await agent.wait_log(_starts(f"decisions on node {NODE}: API unreachable since"))
    assert f"no answer within {NODE_WRITE_TIMEOUT:g}s" in failed["message"], failed
    delay = float(failed["message"].split("retrying in ")[1].split("s,")[0])
    assert delay <= 0.5, failed["message"]


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files limit in /proc/PID/limits")


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
async def test_more_idle_connections_than_descriptors_leave_the_agent_running_and_holding(
    api: SimApiServer, host: HostFS, tmp_path: Path
) -> None:
    """Issue 21 item 5: ~1,000 idle connections to the status port took every descriptor, the
    next decision failed with EMFILE and the agent died (with --release-on-exit, releasing
    the hold). Now: an agent with 1,024 descriptors under 1,100 idle connections keeps
    running, keeps its hold, and still holds the MCD's next request."""
    add_build_pod(api)
    kubeconfig = api.kubeconfig(AGENT_USER, tmp_path / "agent-kubeconfig")
    program = ("prlimit", "--nofile=1024:1024", sys.executable, "-m", "drain_guard")
    started = [await spawn_agent(NODE, kubeconfig, host, "--release-on-exit", program=program)]
    flood: list[asyncio.StreamWriter] = []
    try:
        agent = started[0]
        await agent.wait_synced(WAIT)
        assert _soft_nofile(agent.proc.pid) == 1024
        mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
        assert agent.port is not None
        for _ in range(1100):
            _, writer = await asyncio.open_connection("127.0.0.1", agent.port)
            flood.append(writer)
        # Mid-flood: the MCD asks again, and the agent must decide (read the host, write).
        mcd_request(api, DRAIN_C)
        ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_C)
        assert ann[protocol.HELD_DRAIN] == DRAIN_C
        assert (await agent.http("/healthz"))[0] == 200  # a probe still gets through
        assert agent.proc.returncode is None
        assert len(os.listdir(f"/proc/{agent.proc.pid}/fd")) < 1024 // 4
        assert not [r for r in agent.records if r.get("level") == "ERROR"]
    finally:
        for writer in flood:
            writer.close()
        await reap(started)


async def _status(agent: AgentProcess) -> dict[str, Any]:
    code, body = await agent.http("/status")
    assert code == 200
    doc: dict[str, Any] = json.loads(body)
    return doc


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _starts(text: str) -> Callable[[dict[str, Any]], bool]:
    return lambda record: str(record["message"]).startswith(text)


async def test_an_outage_shows_the_watches_not_watching_and_the_contact_stale_then_recovery(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Issue 14: /status and drain_guard_synced said "synced" through an API outage. Now the
    watches stay listed (the view is complete, and old), are not watching since the outage
    began, the last contact stays where it was, and /readyz fails once the outage is longer
    than --api-stale-after; then all of it recovers without a restart."""
    api.bookmark_interval = 0.3  # a healthy idle watch shows contact well within the window
    agent = await start_agent("--api-stale-after", "3s", "--log-level", "DEBUG")
    # 3s only makes sense because this API server bookmarks every 0.3s: the agent says so.
    await agent.wait_log(lambda r: str(r["message"]).startswith("--api-stale-after 3s is below 2m"))
    watches = (await _status(agent))["watches"]
    assert {r: (w["listed"], w["watching"]) for r, w in watches.items()} == {
        "node": (True, True),
        "pod": (True, True),
    }
    for resource in SYNCED_RESOURCES:
        assert await metric(agent, "drain_guard_synced", resource=resource) == 1

    fault = api.faults.error(503, user=AGENT_USER)
    api.cut_watches(user=AGENT_USER)
    # The shield's watch of budgets too (its gauge is the third resource).
    names = [
        f"node {NODE}",
        f"pods on node {NODE} in {MCO_NS}",
        f"poddisruptionbudgets in {MCO_NS}",
    ]
    for name in names:
        await agent.wait_log(_starts(f"watch of {name}: API unreachable since"))
    during = await _status(agent)
    contact = _time(during["lastApiContact"])
    for watch in during["watches"].values():
        assert (watch["listed"], watch["watching"]) == (True, False)
        assert _time(watch["failingSince"]) >= contact
        assert watch["error"].startswith("503 ")
    for resource in SYNCED_RESOURCES:
        assert await metric(agent, "drain_guard_synced", resource=resource) == 0
    assert int(await metric(agent, "drain_guard_last_api_contact_timestamp_seconds")) == int(
        contact.timestamp()
    )
    # Retries fail on, past --api-stale-after (the log's own clock says when).
    failing_since = max(_time(w["failingSince"]) for w in during["watches"].values())
    await agent.wait_log(
        lambda r: (
            "failed again" in str(r["message"])
            and _time(r["time"]) > failing_since + timedelta(seconds=5)
        ),
        timeout=30,
    )
    later = await _status(agent)
    assert later["lastApiContact"] == during["lastApiContact"]  # stale: no contact since
    assert all(not w["watching"] for w in later["watches"].values())
    assert "NOT synced: failing since" in (await agent.http("/status?format=text"))[1]
    code, body = await agent.http("/readyz")
    assert code == 503
    assert body.startswith(f"node watch failing since {during['watches']['node']['failingSince']}")

    mark = len(agent.records)
    api.faults.remove(fault)
    for name in names:
        await agent.wait_log(_starts(f"watch of {name}: API reachable again after"), start=mark)
    after = await _status(agent)
    assert _time(after["lastApiContact"]) > contact
    assert {
        r: (w["listed"], w["watching"], w["failingSince"]) for r, w in after["watches"].items()
    } == {
        "node": (True, True, None),
        "pod": (True, True, None),
    }
    for resource in SYNCED_RESOURCES:
        assert await metric(agent, "drain_guard_synced", resource=resource) == 1
    assert await agent.http("/readyz") == (200, "ok\n")
