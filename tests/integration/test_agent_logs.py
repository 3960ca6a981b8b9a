"""What the agent logs: one structured line per decision, in text or JSON."""

from __future__ import annotations

import json

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    AGENT_USER,
    CONFIG_B,
    IMAGE_B,
    MCO_NS,
    NODE,
    StartAgent,
    add_build_pod,
    mcd_request,
    metric,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"


async def test_text_log_has_one_line_per_decision(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent("--log-format", "text", ready=False)
    await agent.wait_line("listening on http://127.0.0.1:")
    await agent.wait_line(f"decision node={NODE} ")
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    line = await agent.wait_line("outcome=hold ")
    assert f"node={NODE} request={DRAIN_B} reasons=build-pod outcome=hold" in line
    # Further pod events do not repeat the decision.
    api.create(
        "pods",
        {
            "metadata": {"name": "other", "namespace": MCO_NS},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
        },
        MCO_NS,
    )
    api.delete("pods", "build-pod", MCO_NS)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    await agent.wait_line("outcome=release:safe ")
    assert sum("outcome=hold " in line for line in agent.lines) == 1
    assert not any(line.lstrip().startswith("{") for line in agent.lines)


async def test_json_log_lines_are_objects(api: SimApiServer, start_agent: StartAgent) -> None:
    agent = await start_agent()
    await agent.stop()
    assert agent.lines
    for line in agent.lines:
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= record.keys()
    decisions = [r for r in agent.records if r["message"] == "decision"]
    assert decisions
    assert {"node", "request", "reasons", "outcome"} <= decisions[0].keys()


async def test_a_pod_bigger_than_a_stream_buffer_line(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent = await start_agent()
    big = {"metadata": {"annotations": {"blob": "x" * 200_000}}}
    add_build_pod(api)
    api.patch("pods", "build-pod", big, MCO_NS)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert not any("watch of" in str(r.get("message")) for r in agent.records)


async def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    fault = api.faults.error(503, user=AGENT_USER, verb="list", resource="pods")
    agent = await start_agent("--log-level", "DEBUG", ready=False)
    down = await agent.wait_log(lambda r: "watch of pods on node" in str(r.get("message")))
    assert down["level"] == "WARNING"
    assert down["message"].startswith(
        f"watch of pods on node {NODE} in {MCO_NS}: API unreachable since "
    )
    assert "503" in down["message"]
    # Each retry is a DEBUG line (and a count in the metrics), not another WARNING.
    for _ in range(3):
        start = len(agent.records)
        await agent.wait_log(lambda r: "failed again" in str(r.get("message")), start=start)
    api.faults.remove(fault)
    up = await agent.wait_log(lambda r: "API reachable again after" in str(r.get("message")))
    assert up["message"].startswith(f"watch of pods on node {NODE} in {MCO_NS}: API reachable")
    assert (
        await metric(agent, "drain_guard_watch_restarts_total", resource="pod", reason="error") >= 3
    )
    warnings = [r for r in agent.records if r["level"] == "WARNING" and "watch of" in r["message"]]
    assert warnings == [down, up]
    assert not any("in 0.0s" in r["message"] for r in agent.records)


async def test_start_up_line_has_the_effective_settings_and_debug_shows_watch_events(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent = await start_agent("--log-level", "debug", "--max-hold", "2700s")
    settings = await agent.wait_log(lambda r: r.get("message") == "settings")
    assert settings["apiServer"] == api.url
    assert settings["hold"] == {"maxHold": "45m", "observeOnly": False}
    assert settings["nodeName"] == NODE
    assert settings["install"] == {"kind": "standalone", "daemonset": None, "podName": None}
    assert settings["scope"]["buildPodScope"] == [MCO_NS]
    assert settings["shieldNamespaces"] == [MCO_NS]
    assert "openshift.io/build.name" in settings["scope"]["buildPodSelectors"]
    assert settings["reporting"]["logLevel"] == "DEBUG"
    started = next(r for r in agent.records if str(r["message"]).startswith("drain-guard "))
    assert f"guarding node {NODE} (max-hold 45m)" in started["message"]  # as the settings say it
    mcd_request(api, f"uncordon-{CONFIG_B}")
    await agent.wait_log(
        lambda r: (
            r["level"] == "DEBUG"
            and str(r["message"]).startswith(f"watch of node {NODE}: MODIFIED at resourceVersion")
        )
    )
