"""Bad annotation values on the Node, fed to a running agent process.

For each: the agent writes nothing it should not (no hold on a value it cannot read, no
release of a hold it cannot account for without saying so), logs the decision in one line
that names the problem, counts malformed input in ``drain_guard_invalid_input_total{kind}``,
and keeps running. A build pod runs on the node throughout, so a guess would show as a hold.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess
from tests.helpers import (
    CONFIG_B,
    IMAGE_B,
    StartAgent,
    add_build_pod,
    agent_writes,
    mcd_request,
    metric,
    node_annotations,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"
DRAIN_C = "drain-rendered-worker-" + "c" * 32
ADMIN = "system:admin"


def _admin(api: SimApiServer, values: dict[str, str | None]) -> int:
    node = api.patch(
        "nodes",
        "worker-0",
        {"metadata": {"annotations": values}},
        patch_type="merge",
        user=ADMIN,
    )
    return int(node["metadata"]["resourceVersion"])


async def _decision(agent: AgentProcess, start: int, request: str) -> dict[str, Any]:
    record = await agent.wait_log(
        lambda r: r.get("message") == "decision" and r.get("request") == request, start
    )
    assert "\n" not in str(record.get("why")), record
    return record


def _drain_writes(api: SimApiServer, since: int) -> list[tuple[str | None, str | None]]:
    out = []
    for w in agent_writes(api, since):
        before = ((w.before or {}).get("metadata") or {}).get("annotations") or {}
        after = ((w.after or {}).get("metadata") or {}).get("annotations") or {}
        if before.get(protocol.DESIRED_DRAIN) != after.get(protocol.DESIRED_DRAIN):
            out.append((before.get(protocol.DESIRED_DRAIN), after.get(protocol.DESIRED_DRAIN)))
    return out


@pytest.fixture
async def agent(api: SimApiServer, start_agent: StartAgent) -> AgentProcess:
    add_build_pod(api)
    return await start_agent("--max-hold", "30m")


@pytest.mark.parametrize(
    "value",
    [
        "frobnicate-rendered-worker-x",  # unknown verb: the MCC refuses it too
        "Drain-rendered-worker-x",  # verbs are case-sensitive in the MCC
        "-drain-rendered-worker-x",
        " drain-rendered-worker-x",
        "none-rendered-worker-x",
    ],
)
async def test_malformed_or_unknown_desired_drain_is_never_held(
    api: SimApiServer, agent: AgentProcess, value: str
) -> None:
    start = len(agent.records)
    since = mcd_request(api, value)
    record = await _decision(agent, start, value)
    assert record["outcome"] in ("idle", "pass"), record
    assert _drain_writes(api, since) == []
    assert agent.proc.returncode is None


async def test_empty_desired_drain_is_no_request(api: SimApiServer, agent: AgentProcess) -> None:
    start = len(agent.records)
    since = mcd_request(api, "")
    await agent.wait_log(lambda r: r.get("message") == "decision", start)
    assert _drain_writes(api, since) == []
    # The agent still holds the next real request: it kept running and reading.
    mcd_request(api, DRAIN_B)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)


async def test_oversized_request_is_held_and_restored_exactly(
    api: SimApiServer, agent: AgentProcess
) -> None:
    """A 64 KiB drain request is odd but well formed: held, and restored byte for byte."""
    value = "drain-rendered-worker-" + "x" * 65536
    mcd_request(api, value, **{protocol.DESIRED_IMAGE: IMAGE_B})  # a real update
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + value)
    assert ann[protocol.HELD_DRAIN] == value
    assert len(ann[protocol.HOLD_DETAIL].encode()) <= protocol.MAX_DETAIL_BYTES
    _finish_build_pod(api)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == value)


async def test_a_hold_drain_guard_did_not_write_is_left_alone(
    api: SimApiServer, agent: AgentProcess
) -> None:
    foreign = f"hold-{DRAIN_B}"
    start = len(agent.records)
    since = mcd_request(api, foreign)
    record = await _decision(agent, start, foreign)
    assert "not touching" in record["why"]
    # With a held-drain that does not match either: still not ours.
    start = len(agent.records)
    _admin(api, {protocol.HELD_DRAIN: "drain-rendered-worker-other"})
    await agent.wait_log(lambda r: "not touching" in str(r.get("why")), start)
    assert _drain_writes(api, since) == []
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == foreign


@pytest.mark.parametrize(
    "since_text",
    [
        "yesterday",
        "2024-13-45T99:00:00Z",
        "",
        "9999-12-31T00:01:00-23:59",  # year 10000 in UTC: was a crash
        "2026-01-01T00:00:00+24:00",
        pytest.param(
            protocol.format_rfc3339(datetime.now(UTC) + timedelta(days=3)),
            id="three-days-ahead",  # one id in every worker: pytest-xdist compares them
        ),
    ],
)
async def test_held_since_unreadable_or_in_the_future_keeps_the_hold_and_says_so(
    api: SimApiServer, agent: AgentProcess, since_text: str
) -> None:
    """Issue 27: such a held-since released the hold (invalid or expired) while the build pod
    ran. Now the hold stays, held-since is rewritten to when the agent knows the hold began
    (so its age, and --max-hold, go on) and the value is reported: log, /status,
    invalid_input_total."""
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})  # a real update
    held = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    before = await metric(agent, "drain_guard_invalid_input_total", kind="annotation")
    start = len(agent.records)
    since = _admin(api, {protocol.HELD_SINCE: since_text})
    warned = await agent.wait_log(
        lambda r: r.get("what", "").startswith(protocol.HELD_SINCE), start
    )
    assert "the hold is kept" in warned["message"], warned
    ann = await wait_annotation(api, protocol.HELD_SINCE, lambda v: v != since_text)
    assert ann[protocol.HELD_SINCE] == held[protocol.HELD_SINCE]
    # The hold was never let go, nothing was marked released, and the value was counted.
    assert ann[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert protocol.RELEASED not in ann
    assert _drain_writes(api, since) == []
    after = await metric(agent, "drain_guard_invalid_input_total", kind="annotation")
    assert after == before + 1
    assert agent.proc.returncode is None
    # The build pod's end still releases it.
    _finish_build_pod(api)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)


def _finish_build_pod(api: SimApiServer) -> None:
    pod = api.get("pods", "build-pod", "openshift-machine-config-operator")
    pod["status"]["phase"] = "Succeeded"
    api.update("pods", pod, "openshift-machine-config-operator", subresource="status")


@pytest.mark.parametrize(
    "request_text",
    [
        "9999-12-31T23:59:59-05:00;hold until further notice",  # year 10000 in UTC
        "0001-01-01T00:00:00+01:00",  # year 0 in UTC
        "2026-01-01T00:00:00+25:00;x",
        "2026-06-30T23:59:61Z",
    ],
)
async def test_a_hold_request_beyond_the_calendar_is_invalid_input_and_the_hold_stays(
    api: SimApiServer, agent: AgentProcess, request_text: str
) -> None:
    """Issue 27: these raised OverflowError (or were taken silently) and the agent exited on
    every start while the annotation stayed. Now: reported once, the build pod's hold kept."""
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})  # a real update
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    start = len(agent.records)
    since = _admin(api, {protocol.HOLD_REQUEST: request_text})
    warned = await agent.wait_log(lambda r: r.get("kind") == "hold_request", start)
    assert "\n" not in warned["message"]
    assert await metric(agent, "drain_guard_invalid_input_total", kind="hold_request") == 1
    assert agent.proc.returncode is None
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    # The invalid request blocks nothing: the build pod's end releases the hold.
    _finish_build_pod(api)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert _drain_writes(api, since) == [("hold-" + DRAIN_B, DRAIN_B)]


async def test_a_hold_request_until_the_year_9999_is_held_for_max_hold_and_says_so(
    api: SimApiServer, agent: AgentProcess
) -> None:
    _admin(api, {protocol.HOLD_REQUEST: "9999-12-31T23:59:59Z;change freeze"})
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert "manual: hold-request until 9999-12-31T23:59:59Z" in ann[protocol.HOLD_DETAIL]
    assert "beyond max-hold: held until " in ann[protocol.HOLD_DETAIL]
    _finish_build_pod(api)  # the operator's request still holds it, alone
    ann = await wait_annotation(api, protocol.HOLD_REASONS, lambda v: v == "manual")
    assert ann[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    _, body = await agent.http("/status")
    [manual] = json.loads(body)["holdReasons"]
    assert "beyond max-hold" in manual["detail"], manual
    assert agent.proc.returncode is None


@pytest.mark.parametrize("reasons", ["", "build-pod,,manual", "Gremlins", "build-pod;manual"])
async def test_hold_reasons_unreadable_release_as_invalid(
    api: SimApiServer, agent: AgentProcess, reasons: str
) -> None:
    mcd_request(api, DRAIN_B)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    start = len(agent.records)
    _admin(api, {protocol.HOLD_REASONS: reasons})
    await agent.wait_log(lambda r: r.get("outcome") == "release:invalid", start)
    assert await metric(agent, "drain_guard_invalid_input_total", kind="annotation") == 1


@pytest.mark.parametrize("reasons", ["disk-pressure", "build-pod,disk-pressure"])
async def test_a_hold_reason_the_agent_does_not_know_is_a_hold_it_keeps_for_its_own(
    api: SimApiServer, agent: AgentProcess, reasons: str
) -> None:
    """A newer agent's reason (docs/protocol.md, "Reasons an agent does not know"): the
    build pod still runs, so the agent keeps the hold and writes its own reasons back (the
    detail too); the record is not malformed (no invalid release, nothing counted). A real
    update (another image), so that the hold is the build pod's alone: a same-image drain's
    noop-image detail follows what the agent reads of its pool, and is rewritten when the pool
    is listed after the hold began (the agent's first moments, or the node's move to another
    pool), which is not this test's subject."""
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    held = node_annotations(api)
    _admin(api, {protocol.HOLD_REASONS: reasons, protocol.HOLD_DETAIL: "disk-pressure: full"})
    own = held[protocol.HOLD_REASONS]
    assert own.startswith("build-pod")
    await wait_annotation(api, protocol.HOLD_REASONS, lambda v: v == own)
    after = node_annotations(api)
    assert after[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert after[protocol.HELD_SINCE] == held[protocol.HELD_SINCE]
    assert after[protocol.HOLD_DETAIL] == held[protocol.HOLD_DETAIL]
    assert protocol.RELEASED not in after
    assert await metric(agent, "drain_guard_invalid_input_total", kind="annotation") == 0


@pytest.mark.parametrize(
    ("image", "kind"),
    [
        ("image-registry.example:5000/os/ocb-image:latest", None),  # no digest: abstain
        ("weird-transport:quay.io/os@sha256:" + "a" * 64, "image_ref"),
        ("quay.io/os@sha256:abc", "image_ref"),
        ("", None),
    ],
)
async def test_desired_image_without_digest_or_unreadable_never_holds_noop(
    api: SimApiServer, start_agent: StartAgent, image: str, kind: str | None
) -> None:
    """No build pod here: only the no-op guard could hold, and it must abstain."""
    agent = await start_agent()
    start = len(agent.records)
    since = mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: image})
    record = await _decision(agent, start, DRAIN_B)
    assert record["outcome"] == "pass", record
    assert _drain_writes(api, since) == []
    for k in ("image_ref", "annotation", "hold_request"):
        expected = 1 if k == kind else 0
        assert await metric(agent, "drain_guard_invalid_input_total", kind=k) == expected, k


async def test_a_malformed_hold_request_is_reported_once_per_value_with_no_request_pending(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent = await start_agent()
    _admin(api, {protocol.HOLD_REQUEST: "tomorrow;dentist"})
    warned = await agent.wait_log(lambda r: r.get("kind") == "hold_request")
    assert warned["level"] == "WARNING"
    assert warned["what"] == "drain-guard.io/hold-request='tomorrow;dentist'"
    assert "'tomorrow' is not an RFC 3339 time" in warned["message"]
    assert await metric(agent, "drain_guard_invalid_input_total", kind="hold_request") == 1
    _, body = await agent.http("/status")
    [bad] = json.loads(body)["invalidInputs"]
    assert (bad["kind"], bad["what"]) == ("hold_request", warned["what"])
    _, text = await agent.http("/status?format=text")
    assert f"invalid input: {warned['what']} ignored: " in text

    # More passes over the same value (a request comes and goes through): not again.
    mark = len(agent.records)
    rv = mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    assert (await _decision(agent, mark, DRAIN_B))["outcome"] == "pass"
    assert _drain_writes(api, rv) == []
    # Another bad value: reported once more; a fixed one leaves the list.
    _admin(api, {protocol.HOLD_REQUEST: "next week"})
    again = await agent.wait_log(lambda r: r.get("kind") == "hold_request", mark)
    assert again["what"] == "drain-guard.io/hold-request='next week'"
    assert [r for r in agent.records[mark:] if r.get("kind") == "hold_request"] == [again]
    assert await metric(agent, "drain_guard_invalid_input_total", kind="hold_request") == 2
    _admin(api, {protocol.HOLD_REQUEST: None})
    mark = len(agent.records)
    mcd_request(api, DRAIN_C, **{protocol.DESIRED_IMAGE: IMAGE_B})  # a pass after the fix
    await _decision(agent, mark, DRAIN_C)
    _, body = await agent.http("/status")
    assert json.loads(body)["invalidInputs"] == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        pytest.param("x" * 600, "longer than 512 bytes", id="overlong"),
        pytest.param("alice\nDrainReleased by root", "control character", id="newline"),
    ],
)
async def test_a_malformed_released_by_is_invalid_input_and_the_release_stands(
    api: SimApiServer, agent: AgentProcess, value: str, why: str
) -> None:
    """A release by hand (as on 4.15, where no policy checks the name) with a released-by
    that cannot be a user name: the release is told without a name, the value reported as
    invalid input (log, /status, the metric), the request not held again, the agent on."""
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    start = len(agent.records)
    rv = _admin(
        api,
        {
            **dict.fromkeys(protocol.OWNED_KEYS),
            protocol.DESIRED_DRAIN: DRAIN_B,
            protocol.RELEASED: DRAIN_B,
            protocol.RELEASED_BY: value,
        },
    )
    ended = await agent.wait_log(lambda r: r.get("message") == "hold ended", start)
    assert ended["outcome"] == "manual"
    assert "releasedBy" not in ended
    warned = await agent.wait_log(
        lambda r: str(r.get("what", "")).startswith(protocol.RELEASED_BY), start
    )
    assert warned["level"] == "WARNING"
    assert why in warned["message"]
    assert await metric(agent, "drain_guard_invalid_input_total", kind="annotation") == 1
    _, body = await agent.http("/status")
    doc = json.loads(body)
    assert doc["releasedBy"] is None
    [bad] = doc["invalidInputs"]
    assert bad["what"] == warned["what"]
    assert "released earlier" in doc["explanation"]
    # The build pod still runs: the released request is not held again; nothing written.
    await agent.wait_log(
        lambda r: (
            r.get("message") == "decision"
            and r.get("request") == DRAIN_B
            and r.get("outcome") == "pass"
        ),
        start,
    )
    assert _drain_writes(api, rv) == []
    assert agent.proc.returncode is None
