"""``drain-guard hold``: write a node's ``drain-guard.io/hold-request``."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from drain_guard import guards, protocol
from drain_guard.commands.base import connect
from drain_guard.core.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from drain_guard.settings.commands import HoldCommand
from drain_guard.settings.hold import MCD_DRAIN_TIMEOUT
from drain_guard.status.holdrequest import printable


async def run_hold(args: HoldCommand) -> int:
    """Write a valid ``drain-guard.io/hold-request`` (replacing any): the agent holds the
    node's drain requests until it expires, each at most its ``--max-hold`` (a hold in force
    says when it ends: ``hold-expires``)."""
    from drain_guard.kube.call import KubeError
    from drain_guard.kube.client import Applied

    until = datetime.now(UTC).replace(microsecond=0) + args.duration
    try:
        value = guards.format_hold_request(until, args.reason)
    except ValueError as exc:
        print(f"drain-guard hold: error: --reason: {exc}", file=sys.stderr)
        return EXIT_USAGE
    kube = await connect(args.kubeconfig, "hold")
    if kube is None:
        return EXIT_USAGE
    name = args.node_name
    try:
        node = await kube.get_node(name)
        if node is None:
            print(f"drain-guard hold: error: node {name} not found", file=sys.stderr)
            return EXIT_FAILURE
        path = protocol.annotation_path(protocol.HOLD_REQUEST)
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version},
            {"op": "add", "path": path, "value": value},
        ]
        if not node.annotations:  # JSON Patch cannot add a key to a missing object
            ops[1] = {"op": "add", "path": "/metadata/annotations", "value": {}}
            ops.append({"op": "add", "path": path, "value": value})
        if not isinstance(await kube.patch_node_json(name, ops), Applied):
            print(f"drain-guard hold: error: node {name} changed; try again", file=sys.stderr)
            return EXIT_FAILURE
    except KubeError as exc:
        print(f"drain-guard hold: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await kube.close()
    previous = node.annotations.get(protocol.HOLD_REQUEST)
    print(
        f"node {name}: drains held until {protocol.format_rfc3339(until)}: {value.split(';', 1)[1]}"
    )
    if previous is not None:
        print(f"node {name}: replaced the hold request {printable(repr(previous))}")
    bounded = _bounded(name, node.annotations, until)
    if bounded is not None:
        print(bounded)
    print(f"withdraw it with: drain-guard release --node-name {name}")
    return EXIT_OK


def _bounded(name: str, annotations: Mapping[str, str], until: datetime) -> str | None:
    """What cuts the request short, if it outlasts it: the hold in force ends by its
    ``hold-expires``; every hold by the agent's ``--max-hold``, which is below the MCD's 1 h
    drain timeout (so a request of an hour or more is always cut short)."""
    try:
        record = protocol.read_hold(annotations)
    except protocol.MalformedHold:
        record = None
    if record is not None and record.expires is not None and record.expires < until:
        ends = protocol.format_rfc3339(record.expires)
        return f"node {name}: note: the hold in force ends by {ends} even so (its hold-expires)"
    if until - datetime.now(UTC) < MCD_DRAIN_TIMEOUT:
        return None
    return (
        f"node {name}: note: each drain is held at most the agent's --max-hold (below 1h, the"
        " MCD's drain timeout), however long the request"
    )
