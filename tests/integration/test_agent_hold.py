"""The agent as a process against the simulator: what it holds, what it lets through."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    CONFIG_A,
    CONFIG_B,
    IMAGE_A,
    IMAGE_B,
    MCO_NS,
    NODE,
    StartAgent,
    add_build_pod,
    agent_writes,
    mcd_request,
    metric,
    node_annotations,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"
CONFIG_C = "rendered-worker-" + "c" * 32
DRAIN_C = f"drain-{CONFIG_C}"


def _finish_pod(api: SimApiServer, name: str = "build-pod") -> None:
    pod = api.get("pods", name, MCO_NS)
    pod["status"]["phase"] = "Succeeded"
    api.update("pods", pod, MCO_NS, subresource="status")


async def test_holds_while_a_build_pod_runs_and_releases_when_it_finishes(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert ann[protocol.HELD_DRAIN] == DRAIN_B
    assert ann[protocol.HOLD_REASONS] == "build-pod"
    assert f"{MCO_NS}/build-pod" in ann[protocol.HOLD_DETAIL]
    protocol.parse_rfc3339(ann[protocol.HELD_SINCE])
    held = await agent.wait_log(lambda r: r.get("outcome") == "hold")
    assert held["node"] == NODE
    assert held["request"] == DRAIN_B
    assert held["reasons"] == ["build-pod"]

    _finish_pod(api)
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert not any(k in ann for k in protocol.OWNED_KEYS)
    await agent.wait_log(lambda r: r.get("outcome") == "release:safe")
    assert await metric(agent, "drain_guard_holds_total", reason="build-pod") == 1
    assert await metric(agent, "drain_guard_releases_total", outcome="safe") == 1
    assert await metric(agent, "drain_guard_drain_requests_total", verb="drain") == 1
    assert await metric(agent, "drain_guard_reaction_seconds_count") == 1
    assert await agent.stop() == 0
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == DRAIN_B


async def test_holds_a_layered_update_to_the_booted_image(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent = await start_agent()
    # The seed: desiredImage is the image the node booted (IMAGE_A), yet a drain is requested.
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_A})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert ann[protocol.HOLD_REASONS] == "noop-image"
    await agent.wait_log(lambda r: r.get("outcome") == "hold")
    status, body = await agent.http("/status")
    assert status == 200
    doc = json.loads(body)
    assert doc["decision"] in ("hold", "holding")
    assert doc["heldRequest"] == DRAIN_B
    assert doc["image"]["bootedDigest"] == "sha256:" + "a" * 64
    assert await metric(agent, "drain_guard_image_match") == 1

    # The real image arrives: desiredImage now differs from the booted one, so the drain goes.
    mcd_request(api, DRAIN_C, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_C)
    await agent.wait_log(lambda r: r.get("outcome") == "pass" and r.get("request") == DRAIN_C)
    assert await metric(agent, "drain_guard_releases_total", outcome="superseded") == 1


async def test_never_holds_an_uncordon(api: SimApiServer, start_agent: StartAgent) -> None:
    add_build_pod(api)
    agent = await start_agent()
    rv = mcd_request(api, f"uncordon-{CONFIG_B}", **{protocol.DESIRED_IMAGE: IMAGE_A})
    record = await agent.wait_log(lambda r: r.get("request") == f"uncordon-{CONFIG_B}")
    assert record["outcome"] == "idle"
    assert agent_writes(api, since=rv, resource="nodes") == []
    assert await metric(agent, "drain_guard_drain_requests_total", verb="uncordon") == 1


async def test_lets_a_real_update_through(api: SimApiServer, start_agent: StartAgent) -> None:
    agent = await start_agent()
    rv = mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    record = await agent.wait_log(lambda r: r.get("request") == DRAIN_B)
    assert record["outcome"] == "pass"
    assert agent_writes(api, since=rv, resource="nodes") == []


async def test_releases_at_max_hold(api: SimApiServer, start_agent: StartAgent) -> None:
    add_build_pod(api)
    agent = await start_agent("--max-hold", "2s")
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    # Nothing changes on the Node or its pods: only the agent's own timer can release it.
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert ann[protocol.RELEASED] == DRAIN_B  # not held again
    await agent.wait_log(lambda r: r.get("outcome") == "release:expired")
    assert await metric(agent, "drain_guard_releases_total", outcome="expired") == 1
    # Events are written after the hold decisions, from a queue: wait for it on the write log.
    events = await api.wait_for(
        lambda: [e for e in api.list("events", "default") if e["reason"] == "DrainHoldExpired"]
    )
    assert len(events) == 1
    assert events[0]["involvedObject"]["name"] == NODE
    # The hold's one Event on the Node says what held it (no DrainHeld before it says so).
    assert "although a guard still blocked; held for build-pod: build pod " in events[0]["message"]


async def test_a_newer_mcd_request_supersedes_the_hold(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    # The MCD writes its newer request over the hold (strategic merge, last writer wins).
    mcd_request(api, DRAIN_C)
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_C)
    assert ann[protocol.HELD_DRAIN] == DRAIN_C
    # The agent has seen its write come back before its metrics are read.
    await agent.wait_log(lambda r: r.get("outcome") == "hold" and r.get("request") == DRAIN_C)
    assert await metric(agent, "drain_guard_releases_total", outcome="superseded") == 1
    assert await metric(agent, "drain_guard_holds_total", reason="build-pod") == 2

    _finish_pod(api)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_C)


async def test_manual_hold_request(api: SimApiServer, start_agent: StartAgent) -> None:
    await start_agent()
    api.patch(
        "nodes",
        NODE,
        {"metadata": {"annotations": {protocol.HOLD_REQUEST: "2999-01-01T00:00:00Z;maintenance"}}},
    )
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert ann[protocol.HOLD_REASONS] == "manual"
    assert "maintenance" in ann[protocol.HOLD_DETAIL]
    api.patch("nodes", NODE, {"metadata": {"annotations": {protocol.HOLD_REQUEST: None}}})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert node_annotations(api)[protocol.LAST_APPLIED_DRAIN] == f"uncordon-{CONFIG_A}"


async def test_malformed_inputs_are_counted_once_and_never_held_on(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    # The booted image cannot be read: the no-op guard abstains (never holds on a guess).
    agent = await start_agent("--cmdline-file", str(tmp_path / "missing"))
    assert await metric(agent, "drain_guard_invalid_input_total", kind="host_file") == 1
    api.patch("nodes", NODE, {"metadata": {"annotations": {protocol.HOLD_REQUEST: "tomorrow"}}})
    rv = mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_A})
    record = await agent.wait_log(lambda r: r.get("request") == DRAIN_B)
    assert record["outcome"] == "pass"
    assert agent_writes(api, since=rv, resource="nodes") == []
    # Another decision with the same malformed hold-request: not counted again.
    mcd_request(api, DRAIN_C, **{protocol.DESIRED_IMAGE: IMAGE_A})
    await agent.wait_log(lambda r: r.get("request") == DRAIN_C)
    assert await metric(agent, "drain_guard_invalid_input_total", kind="hold_request") == 1
    _, body = await agent.http("/status")
    doc = json.loads(body)
    assert doc["image"]["bootedDigest"] is None
    assert doc["image"]["bootedError"]


async def test_a_malformed_hold_record_is_restored_not_kept(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    api.patch(
        "nodes",
        NODE,
        {
            "metadata": {
                "annotations": {
                    protocol.DESIRED_DRAIN: "hold-" + DRAIN_B,
                    protocol.HELD_DRAIN: DRAIN_B,
                    protocol.HOLD_REASONS: "Sunspots!",
                    protocol.HELD_SINCE: "2026-01-01T00:00:00Z",
                }
            }
        },
    )
    agent = await start_agent()
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert not any(k in ann for k in protocol.OWNED_KEYS)
    await agent.wait_log(lambda r: r.get("outcome") == "release:invalid")
    assert await metric(agent, "drain_guard_invalid_input_total", kind="annotation") == 1


async def test_a_hold_after_the_cordon_is_counted_as_a_lost_race(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    # The MCC cordoned first (the request and the cordon land in one watch event here).
    api.patch(
        "nodes",
        NODE,
        {
            "metadata": {
                "annotations": {protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B}
            },
            "spec": {"unschedulable": True},
        },
    )
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    warning = await agent.wait_log(lambda r: "race lost" in str(r.get("message")))
    assert warning["level"] == "WARNING"
    assert await metric(agent, "drain_guard_race_lost_total") == 1
    # The Event follows the hold (and the warning): on the node's pool (its rendered config's).
    held = await api.wait_for(
        lambda: [e for e in api.list("events", "default") if e["reason"] == "PoolRolloutHeld"]
    )
    assert len(held) == 1
    assert held[0]["message"].startswith(f"worker pool waiting: {NODE} held (")


async def test_a_cordon_just_after_the_hold_is_counted_as_a_lost_race(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """The MCC's sync read the request before the hold landed and cordons after it (it acts
    on no hold- value): the race was lost all the same, and counted."""
    add_build_pod(api)
    agent = await start_agent()
    request = {protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B}
    api.patch("nodes", NODE, {"metadata": {"annotations": request}})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert await metric(agent, "drain_guard_race_lost_total") == 0
    api.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    warning = await agent.wait_log(lambda r: "race lost" in str(r.get("message")))
    assert "just after the hold" in str(warning["message"])
    assert await metric(agent, "drain_guard_race_lost_total") == 1


async def test_a_reboot_into_another_image_is_noticed(
    api: SimApiServer, start_agent: StartAgent, host: HostFS
) -> None:
    agent = await start_agent()
    await agent.wait_log(lambda r: str(r.get("message", "")).startswith("booted image sha256:aaaa"))
    host.reboot_into(IMAGE_B)  # a new deployment: the kernel command line changes
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert ann[protocol.HOLD_REASONS] == "noop-image"
    await agent.wait_log(lambda r: str(r.get("message", "")).startswith("booted image sha256:bbbb"))


async def test_the_mcd_writing_the_held_request_again_keeps_the_same_hold(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    first = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    await agent.wait_log(lambda r: r.get("outcome") == "hold")
    mark = len(agent.records)
    # A restarted MCD asks for the same drain again, over the hold.
    rv = mcd_request(api, DRAIN_B)
    again = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert again[protocol.HELD_SINCE] == first[protocol.HELD_SINCE]
    # One Node write re-holds it (Events are written in the background, not counted here).
    assert len(agent_writes(api, since=rv, resource="nodes")) == 1
    await agent.wait_log(lambda r: r.get("outcome") == "hold", start=mark)
    assert await metric(agent, "drain_guard_holds_total", reason="build-pod") == 1
    for outcome in ("safe", "superseded", "manual"):
        assert await metric(agent, "drain_guard_releases_total", outcome=outcome) == 0


async def test_a_hold_request_ends_at_its_expiry_without_any_other_event(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent = await start_agent()
    expiry = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    request = f"{protocol.format_rfc3339(expiry)};short window"
    api.patch("nodes", NODE, {"metadata": {"annotations": {protocol.HOLD_REQUEST: request}}})
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    # Only the agent's timer for the hold-request's expiry can release it now.
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    released = await agent.wait_log(lambda r: r.get("outcome") == "release:safe")
    assert released["reasons"] == ["manual"]
    assert datetime.now(UTC) >= expiry


async def test_a_hold_superseded_while_no_agent_ran_is_counted_and_logged_as_ended(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_A})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    await agent.stop()
    mcd_request(api, DRAIN_C, **{protocol.DESIRED_IMAGE: IMAGE_B})  # over the hold

    agent = await start_agent()
    ended = await agent.wait_log(lambda r: r.get("message") == "hold ended")
    assert (ended["request"], ended["outcome"]) == (DRAIN_B, "superseded")
    assert ended["desiredDrain"] == DRAIN_C
    assert await metric(agent, "drain_guard_releases_total", outcome="superseded") == 1
    assert not any(k in node_annotations(api) for k in protocol.OWNED_KEYS)
    assert not any(r.get("message") == "resuming hold found on the node" for r in agent.records)
