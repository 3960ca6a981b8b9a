"""docs/rights.md's rows about Events, made as the agent: about its own Node and its pool as its
recorder writes them, and the ones it may not write; every write a dry run.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from drain_guard import protocol
from drain_guard.commands.preflight.probe import (
    Answer,
    Probe,
    Request,
    answer_of,
    api_call,
    made,
    unique_name,
)
from drain_guard.confine.permissions import EVENTS_NAMESPACE
from drain_guard.protocol import format_rfc3339

if TYPE_CHECKING:
    pass


def event(
    node: str, namespace: str = EVENTS_NAMESPACE, component: str = "drain-guard"
) -> dict[str, Any]:
    """An Event about ``node`` as the agent's recorder writes one: the end of a hold, its one
    Event on the Node (its start is told on the pool, ``pool_event``)."""
    now = format_rfc3339(datetime.now(UTC))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": unique_name("event"), "namespace": namespace},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": protocol.DRAIN_RELEASED,
        "message": "drain-guard preflight (dry run)",
        "type": "Normal",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": component, "host": node},
        "reportingComponent": component,
        "reportingInstance": f"{component}-{node}",
    }


def pool_event(
    probe: Probe,
    related: str | None,
    reason: str = protocol.POOL_ROLLOUT_HELD,
    kind: str = protocol.POOL_KIND,
) -> dict[str, Any]:
    body = event(probe.who.node)
    body["involvedObject"] = {
        "apiVersion": protocol.POOL_API_VERSION,
        "kind": kind,
        "name": probe.pool,
    }
    body["reason"] = reason
    if related:
        body["related"] = {"apiVersion": "v1", "kind": "Node", "name": related}
    return body


def create_event(build: Callable[[Probe], dict[str, Any] | None]) -> Request:
    async def make(probe: Probe) -> tuple[Answer, str]:
        body = build(probe)
        if body is None:
            return None, "no other Node"
        create = probe.agent.core.create_namespaced_event
        namespace = body["metadata"]["namespace"]
        return made(await answer_of(api_call(create, namespace, body, dry_run="All")))

    return make


def other_node_event(probe: Probe) -> dict[str, Any] | None:
    return None if probe.who.other is None else event(probe.who.other)


def pool_event_for_other(probe: Probe) -> dict[str, Any] | None:
    return None if probe.who.other is None else pool_event(probe, probe.who.other)
