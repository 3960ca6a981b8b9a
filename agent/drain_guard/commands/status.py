"""``drain-guard status``: a node's hold state from its annotations, with its agent's own
``/status`` when it answers; the text and JSON views."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from drain_guard.commands.base import connect
from drain_guard.core.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from drain_guard.settings.commands import StatusCommand
from drain_guard.status.agent import AgentStatus
from drain_guard.status.holdrequest import printable
from drain_guard.status.node import NodeState, node_state

DEFAULT_ENDPOINT = "http://127.0.0.1:9797"
ENDPOINT_TIMEOUT = 2.0


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


async def run_status(args: StatusCommand) -> int:
    from drain_guard.kube.call import KubeError

    node_name = args.node_name
    if args.max_hold_given:
        print(
            "drain-guard status: note: --max-hold is not needed any more and is ignored (a"
            " hold's end is on its Node: drain-guard.io/hold-expires)",
            file=sys.stderr,
        )
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
            nodes = await kube.list_nodes()
    except KubeError as exc:
        print(f"drain-guard status: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await kube.close()
    now = datetime.now(UTC)
    shown = [Shown(node_state(n, now)) for n in nodes]
    if node_name:
        await _add_endpoint(shown[0], args.endpoint)
    else:
        shown = [s for s in shown if s.state.listed]
    if args.output == "json":
        docs = [s.to_json() for s in shown]
        print(json.dumps(docs[0] if node_name else docs, indent=2, sort_keys=True))
    else:
        if not shown:
            print("no node has a hold, a hold request, a foreign hold value or stale keys")
        for one in shown:
            print(one.text())
    return EXIT_OK


@dataclass
class Shown:
    """One Node as ``status`` shows it: its :class:`NodeState`, and its agent's ``/status``
    when asked and answered (or why not)."""

    state: NodeState
    agent: dict[str, Any] | None = None
    agent_error: str | None = None
    agent_warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = self.state.to_json()
        extra = {"agent": self.agent, "agentError": self.agent_error}
        extra["agentWarning"] = self.agent_warning
        doc.update({key: value for key, value in extra.items() if value is not None})
        return doc

    def text(self) -> str:
        lines = self.state.text_lines()
        if self.agent_warning is not None:
            lines.append(f"  WARNING: {printable(self.agent_warning)}")
        if self.agent is not None:
            lines.extend(f"  agent: {line}" for line in _agent_text(self.agent).splitlines())
        if self.agent_error is not None:
            lines.append(f"  agent endpoint unreachable: {printable(self.agent_error)}")
        return "\n".join(lines)


async def _add_endpoint(shown: Shown, endpoint: str | None) -> None:
    """Add the agent's own /status when it answers (always tried with ``--endpoint``)."""
    import aiohttp

    url = endpoint or DEFAULT_ENDPOINT
    try:
        agent_status = await _fetch_endpoint(url)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        if endpoint is not None:
            shown.agent_error = f"{url}: {exc}"
        return
    # The endpoint may belong to another node's agent: the default one is then left out,
    # an explicit one is shown with a warning.
    node = shown.state.node
    other = agent_status.get("node")
    if other != node:
        if endpoint is None:
            return
        shown.agent_warning = f"{url} is the agent of node {other}, not of {node}"
        print(f"drain-guard status: warning: {shown.agent_warning}", file=sys.stderr)
    shown.agent = agent_status


def _agent_text(agent: dict[str, Any]) -> str:
    """The agent's /status as its own text view (``?format=text``), not a line of JSON."""
    try:
        return AgentStatus.from_json(agent).to_text()
    except (KeyError, TypeError, ValueError):  # starting, or another version's document
        return printable(json.dumps(agent, sort_keys=True))
