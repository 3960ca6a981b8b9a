"""``drain-guard status``: a node's hold state from its annotations, with its agent's own
``/status`` when it answers; the text and JSON views."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from drain_guard import protocol
from drain_guard.commands.base import connect
from drain_guard.core.durations import format_duration
from drain_guard.core.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from drain_guard.decision.decide import NothingHeldError, force_release, stale_keys
from drain_guard.settings.agent import default_max_hold
from drain_guard.status.agent import AgentStatus
from drain_guard.status.holdrequest import (
    HoldRequestStatus,
    printable,
    releases_when,
    split_hold_detail,
    stalled,
)

if TYPE_CHECKING:
    from drain_guard.core.nodes import NodeObj

DEFAULT_ENDPOINT = "http://127.0.0.1:9797"
ENDPOINT_TIMEOUT = 2.0


def node_state(
    node: NodeObj, now: datetime | None = None, max_hold: timedelta | None = None
) -> dict[str, Any]:
    """What ``status`` shows of one Node, from its annotations alone, at ``now``; a hold ends
    by its ``hold-expires``, or, in an older agent's record without one, by its ``held-since``
    plus ``max_hold`` (the agents' ``--max-hold``).

    "Held" means exactly what ``release`` can release (:func:`force_release`), so the
    two commands never disagree; a ``hold-`` value drain-guard did not write is "foreign".
    """
    now = now or datetime.now(UTC)
    max_hold = max_hold or default_max_hold()
    ann = node.annotations
    text = ann.get(protocol.HOLD_REQUEST)
    request = None if text is None else HoldRequestStatus.read(text, now)
    state: dict[str, Any] = {
        "node": node.name,
        "desiredDrain": ann.get(protocol.DESIRED_DRAIN),
        "lastAppliedDrain": ann.get(protocol.LAST_APPLIED_DRAIN),
        "unschedulable": node.unschedulable,
        "held": False,
        "holdRequest": None if request is None else request.to_json(),
        "staleKeys": list(stale_keys(ann)),
        "pool": protocol.pool_of(ann),
        "released": None,
        "releasedBy": None,
        "now": protocol.format_rfc3339(now),
        "maxHoldSeconds": max_hold.total_seconds(),
    }
    desired = ann.get(protocol.DESIRED_DRAIN)
    if desired is not None and ann.get(protocol.RELEASED) == desired:
        state["released"] = desired
        try:
            state["releasedBy"] = protocol.read_released_by(ann)
        except protocol.MalformedHold as exc:
            state["releasedByInvalid"] = str(exc)
    try:
        release = force_release(ann, node.resource_version, protocol.Outcome.MANUAL)
    except NothingHeldError as exc:
        if protocol.parse_drain_request(state["desiredDrain"]).verb is protocol.Verb.HOLD:
            state["foreign"] = str(exc)
        return state
    state.update(held=True, heldDrain=release.original)
    try:
        record = protocol.read_hold(ann)
    except protocol.MalformedHold as exc:
        state["error"] = f"malformed hold annotations: {exc}"
        return state
    if record is not None:
        ends_by = record.expires or record.since + max_hold
        details = split_hold_detail(record.detail)
        reasons = [(r, details.get(r, "")) for r in record.reason_names]
        state.update(
            reasons=list(record.reason_names),
            heldSince=protocol.format_rfc3339(record.since),
            endsBy=protocol.format_rfc3339(ends_by),
            endsByFrom="hold-expires" if record.expires is not None else "--max-hold",
            detail=record.detail,
            releasesWhen=list(releases_when(reasons, request)),
        )
        if request is not None:
            state["holdRequest"] = request.to_json(ends_by)
    return state


async def _fetch_endpoint(url: str) -> dict[str, Any]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=ENDPOINT_TIMEOUT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url.rstrip("/") + "/status") as resp,
    ):
        resp.raise_for_status()
        body: dict[str, Any] = await resp.json()
        return body


async def run_status(args: argparse.Namespace) -> int:
    from drain_guard.kube.call import KubeError

    node_name = args.node_name or os.environ.get("NODE_NAME")
    kube = await connect(args.kubeconfig, "status")
    if kube is None:
        return EXIT_USAGE
    try:
        if node_name:
            node = await kube.get_node(node_name)
            if node is None:
                print(f"drain-guard status: error: node {node_name} not found", file=sys.stderr)
                return EXIT_FAILURE
            nodes = [node]
        else:
            nodes = [n for n in await kube.list_nodes() if listed(n)]
    except KubeError as exc:
        print(f"drain-guard status: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await kube.close()
    now = datetime.now(UTC)
    states = [node_state(n, now, args.max_hold) for n in nodes]
    if node_name:
        await _add_endpoint(states[0], args.endpoint)
    if args.output == "json":
        print(json.dumps(states[0] if node_name else states, indent=2, sort_keys=True))
    else:
        if not states:
            print("no node has a hold, a hold request, a foreign hold value or stale keys")
        for state in states:
            print(render_text(state))
    return EXIT_OK


async def _add_endpoint(state: dict[str, Any], endpoint: str | None) -> None:
    """Add the agent's own /status when it answers (always tried with ``--endpoint``)."""
    import aiohttp

    url = endpoint or DEFAULT_ENDPOINT
    try:
        agent_status = await _fetch_endpoint(url)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        if endpoint is not None:
            state["agentError"] = f"{url}: {exc}"
        return
    # The endpoint may belong to another node's agent: the default one is then left out,
    # an explicit one is shown with a warning.
    other = agent_status.get("node")
    if other != state["node"]:
        if endpoint is None:
            return
        state["agentWarning"] = f"{url} is the agent of node {other}, not of {state['node']}"
        print(f"drain-guard status: warning: {state['agentWarning']}", file=sys.stderr)
    state["agent"] = agent_status


def render_text(state: Mapping[str, Any]) -> str:
    """The text view of :func:`node_state`; every annotation's text with control characters
    escaped (an annotation is anyone's input)."""
    now = datetime.fromisoformat(state["now"])
    max_hold = timedelta(seconds=state["maxHoldSeconds"])
    lines = [f"node {state['node']}:"]
    if state.get("error"):
        lines.append(f"  {printable(state['error'])}")
    ends_by = None
    if state["held"]:
        held = printable(state["heldDrain"])
        if "reasons" in state:
            since = datetime.fromisoformat(state["heldSince"])
            ends_by = datetime.fromisoformat(state["endsBy"])
            lines.append(
                f"  HELD since {state['heldSince']} ({format_duration(now - since)} ago)"
                f" for {', '.join(state['reasons'])}: {held}"
            )
            left = format_duration(ends_by - now)
            source = (
                "its hold-expires"
                if state.get("endsByFrom") == "hold-expires"
                else f"--max-hold {format_duration(max_hold)}: an older agent's record"
            )
            lines.append(
                f"  ends by {state['endsBy']} (in {left}; {source}) unless released earlier"
            )
        else:
            lines.append(f"  HELD: {held}")
        if state.get("detail"):
            lines.append(f"  detail: {printable(state['detail'])}")
        for condition in state.get("releasesWhen", ()):
            lines.append(f"  released {condition}")
        lines.append(f"  released now by: drain-guard release --node-name {state['node']}")
        if state.get("pool"):
            lines.append(f"  {stalled(printable(state['pool']), state['node'])}")
    elif state.get("foreign"):
        lines.append(f"  no drain-guard hold: {printable(state['foreign'])}")
    elif state.get("released"):
        by = state.get("releasedBy")
        who = f"by {printable(by)}" if by else "(by drain-guard, or by hand without a name)"
        lines.append(
            f"  no hold: {printable(state['released'])} was released {who} and is not held again"
        )
    else:
        lines.append("  no hold")
    if state.get("releasedByInvalid"):
        lines.append(f"  released-by INVALID, not shown: {printable(state['releasedByInvalid'])}")
    if state["staleKeys"]:
        lines.append(
            f"  stale keys: {', '.join(state['staleKeys'])}"
            " (left by a hold that ended; drain-guard release removes them)"
        )
    lines.append(f"  desiredDrain: {printable(state['desiredDrain'] or '-')}")
    lines.append(f"  lastAppliedDrain: {printable(state['lastAppliedDrain'] or '-')}")
    if state["unschedulable"]:
        lines.append("  node is cordoned (SchedulingDisabled)")
    if state.get("holdRequest"):
        request = HoldRequestStatus.from_json(state["holdRequest"])
        lines.append(f"  hold request: {request.to_text(now, ends_by, max_hold)}")
    if "agentWarning" in state:
        lines.append(f"  WARNING: {printable(state['agentWarning'])}")
    if "agent" in state:
        lines.extend(f"  agent: {line}" for line in _agent_text(state["agent"]).splitlines())
    if "agentError" in state:
        lines.append(f"  agent endpoint unreachable: {printable(state['agentError'])}")
    return "\n".join(lines)


def _agent_text(agent: dict[str, Any]) -> str:
    """The agent's /status as its own text view (``?format=text``), not a line of JSON."""
    try:
        return AgentStatus.from_json(agent).to_text()
    except (KeyError, TypeError, ValueError):  # starting, or another version's document
        return printable(json.dumps(agent, sort_keys=True))


def listed(node: NodeObj) -> bool:
    """Whether ``status`` without ``--node-name`` lists the node: something to look at."""
    state = node_state(node)
    return bool(
        state["held"]
        or state["staleKeys"]
        or "foreign" in state
        or state["holdRequest"]
        or state["released"]
    )
