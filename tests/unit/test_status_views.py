"""One hold, one view: the agent's ``/status`` (``AgentStatus``, built from its decision) and
``drain-guard status`` (``NodeState``, built from the Node's annotations alone) show a hold
through the same ``HoldView``: equal models, the same lines of text, the same JSON keys and
values. A change to either side's hold that the other does not make fails here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch

from drain_guard import guards, protocol
from drain_guard.core.nodes import NodeObj
from drain_guard.core.pods import Pod
from drain_guard.decision.decide import decide
from drain_guard.status.agent import AgentStatus
from drain_guard.status.hold import HoldView
from drain_guard.status.node import node_state
from drain_guard.status.snapshot import decided
from tests.helpers import agent_guards

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=12, seconds=5)
MAX_HOLD = timedelta(minutes=45)
NODE = "worker-0"
MCO_NS = "openshift-machine-config-operator"
REQUEST = "drain-rendered-worker-5620"
DIGEST = "sha256:" + "a" * 64
IMAGE = f"image-registry.example/ocb/os@{DIGEST}"
BOOTED = guards.BootedImage(DIGEST, f"ostree-unverified-registry:{IMAGE}", "ostree")
BUILD = Pod(MCO_NS, "build-x", "Running", {"openshift.io/build.name": "build-x"})
BASE = AgentStatus(NODE, "starting", "", "0.1.0", T0 - timedelta(hours=2), T0)
REQUESTED = {
    protocol.DESIRED_DRAIN: REQUEST,
    protocol.LAST_APPLIED_DRAIN: "uncordon-rendered-worker-1111",
    protocol.DESIRED_CONFIG: "rendered-worker-5620b8c1d2e3f4a5b6c7d8e9f0a1b2c3",
    protocol.DESIRED_IMAGE: IMAGE,
    protocol.HOLD_REQUEST: "2099-01-01T00:00:00Z;storage migration",
}


def _applied(annotations: dict[str, str], patch: Any) -> dict[str, str]:
    node = {"metadata": {"annotations": dict(annotations)}}
    result: dict[str, Any] = jsonpatch.apply_patch(node, list(patch))
    return dict(result["metadata"]["annotations"])


def _agent(annotations: dict[str, str], now: datetime) -> AgentStatus:
    """The agent's /status of the Node, as its controller builds it."""
    view = guards.NodeView(NODE, annotations, (BUILD,), BOOTED, now, "8")
    decision = decide(view, agent_guards(), MAX_HOLD)
    hold = protocol.read_hold(annotations)
    return decided(
        BASE,
        decision,
        annotations=annotations,
        hold=hold,
        booted=BOOTED,
        max_hold=MAX_HOLD,
        now=now,
    )


def _held() -> dict[str, str]:
    """The Node after the agent's own hold of REQUEST (a build pod, the same image, a hold
    request: three reasons)."""
    view = guards.NodeView(NODE, REQUESTED, (BUILD,), BOOTED, T0, "7")
    decision = decide(view, agent_guards(), MAX_HOLD)
    assert decision.name == "hold", decision.explain()
    return _applied(REQUESTED, decision.patch)


def test_the_agent_and_the_cli_build_the_same_hold() -> None:
    annotations = _held()
    agent = _agent(annotations, LATER)
    cli = node_state(NodeObj(NODE, "8", annotations, True), LATER)
    assert agent.decision == "holding"
    hold = agent.hold_view()
    assert hold is not None
    assert len(hold.reasons) == 3
    assert hold == cli.hold
    assert (hold.since, hold.expires_at) == (T0, T0 + MAX_HOLD)


def _contains(lines: list[str], block: list[str]) -> bool:
    return any(lines[i : i + len(block)] == block for i in range(len(lines)))


def test_both_text_views_show_the_hold_in_the_same_lines() -> None:
    annotations = _held()
    agent = _agent(annotations, LATER)
    cli = node_state(NodeObj(NODE, "8", annotations, True), LATER)
    assert cli.hold is not None
    block = cli.hold.text_lines(LATER)
    assert block[:3] == [
        f"  held request:  {REQUEST}",
        "  held since:    2026-03-01T12:00:00Z (12m05s ago)",
        "  expires:       2026-03-01T12:45:00Z (in 32m55s; then released with outcome expired)",
    ]
    assert f"  released:      now by drain-guard release --node-name {NODE}" in block
    assert _contains(agent.to_text().splitlines(), block)
    assert _contains(cli.text_lines(), block)


def test_both_json_views_name_the_hold_alike() -> None:
    annotations = _held()
    agent = _agent(annotations, LATER).to_json()
    cli = node_state(NodeObj(NODE, "8", annotations, True), LATER).to_json()
    keys = set(HoldView(NODE, REQUEST).to_json(LATER))
    assert {k: cli[k] for k in keys} == {k: agent[k] for k in keys}
    assert cli["holdRequest"] == agent["holdRequest"]


def test_an_older_agents_record_says_its_end_is_unknown_without_a_max_hold() -> None:
    """The end comes from the Node (hold-expires): without it the CLI says so, and asks no
    one for a --max-hold."""
    annotations = {k: v for k, v in _held().items() if k != protocol.HOLD_EXPIRES}
    cli = node_state(NodeObj(NODE, "8", annotations, False), LATER)
    assert cli.hold is not None
    assert cli.hold.expires_at is None
    assert any(
        "expires:       unknown: an older agent's record" in line for line in cli.text_lines()
    )
