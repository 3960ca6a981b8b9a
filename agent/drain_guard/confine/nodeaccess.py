"""What the node proxy lets an agent ask of the API server with the node's identity (pure).

The systemd install keeps the kubelet's credential out of the agent: ``drain-guard node-proxy``
(drain_guard.programs.nodeproxy, the I/O part), a small root service, holds it and passes on, over a
local Unix socket, only the requests an agent of that node makes (docs/install.md, section 7). A
node identity reads every pod's secrets bound to the node and mints their service-account tokens;
through the proxy the agent can do no more than:

- read its own Node, and list or watch it and the pods bound to it;
- list one other Node (the confinement self-check picks the Node its dry-run write targets);
- patch its own Node with a JSON Patch of the protocol's shapes (:func:`check_node_patch`):
  ``desiredDrain`` only from ``drain-X`` to ``hold-drain-X`` or back, as a ``test`` of it in
  the same patch proves, and drain-guard's own keys (``released-by`` only removed);
- create Events about its own Node as drain-guard, and about a MachineConfigPool with the
  pool reasons and its own Node as ``related`` (``rules.event_problem``, the rule every checker
  asks, then what the recorder sends exactly); aggregate (patch) the Events it created.

Everything else is answered 403 here, before anything is sent. The decision is made on the
path as the agent sent it, undecoded: a segment is a fixed word or a name (a DNS label or
subdomain), never anything with ``%``, ``#`` or ``?`` in it, so the API server cannot read it
otherwise than here (``NS%252Fsecrets%252Fx%23`` as a namespace once did). The proxy sends the
path and query this module rebuilt from what it checked (:attr:`Verdict.path`,
:attr:`Verdict.query`), never the agent's own bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drain_guard import protocol
from drain_guard.confine import rules
from drain_guard.confine.rules import (
    AGENT_KEYS,
    EVENT_COMPONENT,
    EVENT_NAMESPACE,
)

__all__ = [
    "EVENT_COMPONENT",
    "EVENT_NAMESPACE",
    "JSON_PATCH",
    "MERGE_PATCH",
    "Verdict",
    "check_node_patch",
    "decide",
    "is_node_name",
]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
#: The Event reasons the agent writes about its Node (drain_guard.node.events); about its pool,
#: ``protocol.POOL_EVENT_REASONS``.
EVENT_REASONS = frozenset(protocol.NODE_EVENT_REASONS)
#: What a patch may ``test`` (its compare-and-swap): the keys it writes, lastAppliedDrain, and
#: the object's resourceVersion (a test of absence, docs/protocol.md).
TESTABLE = frozenset(
    protocol.annotation_path(k)
    for k in (*AGENT_KEYS, protocol.DESIRED_DRAIN, protocol.LAST_APPLIED_DRAIN)
) | {"/metadata/resourceVersion"}
MAX_OPS = 32
_DIGITS = re.compile(r"[0-9]{1,20}")
#: As the API server parses it (Go's ParseBool, the spellings a client sends).
_BOOLEAN = re.compile(r"[Tt]rue|[Ff]alse|1|0")
#: The query parameters of the agent's reads (a list, a watch and its renewals) and the values
#: each may take once decoded; ``fieldSelector`` is compared whole with the one a read needs.
READ_PARAMS: Mapping[str, re.Pattern[str]] = {
    "fieldSelector": re.compile(r"[A-Za-z.]+!?=[a-z0-9.-]{1,253}"),
    "resourceVersion": _DIGITS,
    "resourceVersionMatch": re.compile(r"NotOlderThan|Exact"),
    "watch": _BOOLEAN,
    "timeoutSeconds": _DIGITS,
    "allowWatchBookmarks": _BOOLEAN,
    "limit": _DIGITS,
    # The API server's continue token: base64 of its own JSON.
    "continue": re.compile(r"[A-Za-z0-9_=+/-]{1,4096}"),
}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_NAME = 253


@dataclass(frozen=True)
class Verdict:
    """Whether a request may be passed on; ``message`` says why not (for the 403). An allowed
    request is sent as ``path`` and ``query``, rebuilt from the parts that were checked."""

    allowed: bool
    message: str = ""
    path: str = ""
    query: tuple[tuple[str, str], ...] = ()


def is_node_name(text: str) -> bool:
    """A Node's (or an Event's) name: a DNS subdomain."""
    return len(text) <= MAX_NAME and _DNS_SUBDOMAIN.fullmatch(text) is not None


def _is_namespace(text: str) -> bool:
    return _DNS_LABEL.fullmatch(text) is not None


def _deny(message: str) -> Verdict:
    return Verdict(False, f"drain-guard node-proxy: {message}")


def _annotation_key(path: str) -> str | None:
    prefix = "/metadata/annotations/"
    if not path.startswith(prefix):
        return None
    return path[len(prefix) :].replace("~1", "/").replace("~0", "~")


def check_node_patch(ops: Any) -> None:
    """Raise :class:`protocol.ProtocolError` unless ``ops`` is a JSON Patch of the protocol's
    shapes, by the predicates every checker asks (``confine.rules``): tests of what it
    writes, drain-guard's keys set or removed, and ``desiredDrain`` set only one step (hold or
    release) from the value a ``test`` before it pins; a hold of a request that the patch
    tests ``lastAppliedDrain`` to be is refused, and a hold needs its ``held-drain``, set or
    tested in the patch. The API server applies a patch whole or not at all."""
    if not isinstance(ops, list) or not 0 < len(ops) <= MAX_OPS:
        raise protocol.ProtocolError(f"a patch is a list of 1 to {MAX_OPS} operations")
    drain_path = protocol.annotation_path(protocol.DESIRED_DRAIN)
    # The annotations as the patch pins (test) or writes them, in order (None: removed).
    known: dict[str, str | None] = {}
    step: tuple[str, str] | None = None  # desiredDrain: the value first pinned, the last set
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise protocol.ProtocolError("an operation is an object with a path")
        kind, path, value = op.get("op"), op["path"], op.get("value")
        if set(op) != ({"op", "path"} if kind == "remove" else {"op", "path", "value"}):
            raise protocol.ProtocolError(f"{kind} {path}: unexpected members")
        if kind != "remove" and not isinstance(value, str):
            raise protocol.ProtocolError(f"{kind} {path}: the value must be a string")
        key = _annotation_key(path)
        if kind == "test":
            if path not in TESTABLE:
                raise protocol.ProtocolError(f"test {path}: not a value the protocol tests")
            if key is not None:
                known[key] = value
        elif kind in ("add", "replace") and path == drain_path:
            old = known.get(protocol.DESIRED_DRAIN)
            if old is None:
                raise protocol.ProtocolError("desiredDrain is set without a test before it")
            problem = rules.drain_step_problem(old, str(value))
            if problem is not None:
                raise protocol.ProtocolError(f"{problem}, from the value the patch tests")
            step = (old if step is None else step[0], str(value))
            known[protocol.DESIRED_DRAIN] = value
        elif kind in ("add", "replace", "remove") and key is not None:
            written = None if kind == "remove" else str(value)
            problem = rules.key_problem(key, written)
            if problem is not None:
                raise protocol.ProtocolError(problem)
            known[key] = written
        else:
            raise protocol.ProtocolError(f"{kind} {path}: an agent may not write that")
    if step is not None:
        last_applied = known.get(protocol.LAST_APPLIED_DRAIN) or ""
        problem = rules.hold_problem(*step, last_applied, known.get(protocol.HELD_DRAIN))
        if problem is not None:
            raise protocol.ProtocolError(problem)


def _split(path: str) -> list[str] | None:
    """The segments of an undecoded ``/a/b/c``, each a name (a DNS subdomain, which no
    ``%``, ``#``, ``?``, ``.`` or ``..`` is); None for anything else."""
    if not path.startswith("/"):
        return None
    parts = path[1:].split("/")
    return parts if all(is_node_name(p) for p in parts) else None


def _query(pairs: Sequence[tuple[str, str]]) -> dict[str, str] | None:
    """The read's parameters, each once and of its shape; None for anything else."""
    query = dict(pairs)
    if len(query) != len(pairs):
        return None
    for key, value in query.items():
        shape = READ_PARAMS.get(key)
        if shape is None or shape.fullmatch(value) is None:
            return None
    return query


def _allow(parts: Sequence[str], query: Mapping[str, str] | None = None) -> Verdict:
    return Verdict(True, path="/" + "/".join(parts), query=tuple((query or {}).items()))


def _read(parts: list[str], pairs: Sequence[tuple[str, str]], node: str) -> Verdict:
    query = _query(pairs)
    if query is None:
        allowed = ", ".join(READ_PARAMS)
        return _deny(f"an agent's read has at most one each of {allowed}, of their shapes")
    selector = query.get("fieldSelector")
    if parts == ["api", "v1", "nodes", node] and not query:
        return _allow(parts)
    if parts == ["api", "v1", "nodes"]:
        if selector == f"metadata.name={node}":
            return _allow(parts, query)
        # The confinement self-check's pick of another Node (Kube.other_node).
        if selector == f"metadata.name!={node}" and query.get("limit") == "1":
            return _allow(parts, query)
        return _deny(f"an agent lists only its own Node ({node})")
    pods = parts == ["api", "v1", "pods"] or (
        len(parts) == 5
        and parts[:3] == ["api", "v1", "namespaces"]
        and _is_namespace(parts[3])
        and parts[4] == "pods"
    )
    if pods:
        if selector == f"spec.nodeName={node}":
            return _allow(parts, query)
        return _deny(f"an agent lists only the pods bound to its own Node ({node})")
    return _deny(f"an agent may not read /{'/'.join(parts)}")


def _without_uid(ref: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ref.items() if k != "uid"}


def _event(parts: Sequence[str], body: Any, node: str) -> Verdict:
    if not isinstance(body, dict):
        return _deny("an Event is a JSON object")
    problem = rules.event_problem(body, node)  # the rule every checker asks
    if problem is not None:
        return _deny(problem)
    # Stricter here: the proxy reads the agent's own request, before the API server fills it
    # in, so it holds it to what the recorder sends, no more.
    involved = body.get("involvedObject")
    source = body.get("source")
    metadata = body.get("metadata")
    own_node = {"apiVersion": "v1", "kind": "Node", "name": node}
    reasons = EVENT_REASONS
    if isinstance(involved, dict) and involved.get("kind") == protocol.POOL_KIND:
        # Its pool's Events: any pool (the proxy cannot tell the node's), related to its Node.
        related = body.get("related")
        name = involved.get("name")
        if not (
            _without_uid(involved)
            == {"apiVersion": protocol.POOL_API_VERSION, "kind": protocol.POOL_KIND, "name": name}
            and isinstance(name, str)
            and name
            and isinstance(related, dict)
            and _without_uid(related) == own_node
        ):
            return _deny(f"an agent's pool Event is about a pool, related to its Node ({node})")
        reasons = frozenset(protocol.POOL_EVENT_REASONS)
    elif not (isinstance(involved, dict) and _without_uid(involved) == own_node):
        return _deny(f"an agent writes Events about its own Node ({node}) only")
    if not (
        isinstance(metadata, dict)
        and set(metadata) <= {"name", "namespace"}
        and str(metadata.get("name", "")).startswith(f"{node}.")
        and metadata.get("namespace", EVENT_NAMESPACE) == EVENT_NAMESPACE
    ):
        return _deny(f"an agent's Event is named {node}.<hex> in {EVENT_NAMESPACE}, no more")
    if (
        source != {"component": EVENT_COMPONENT, "host": node}
        or body.get("reportingComponent") != EVENT_COMPONENT
        or body.get("reportingInstance") != f"{EVENT_COMPONENT}-{node}"
    ):
        return _deny(f"an agent's Event is reported by {EVENT_COMPONENT} on {node}")
    if body.get("reason") not in reasons:
        return _deny(f"an agent's Event reason is one of {', '.join(sorted(reasons))}")
    return _allow(parts)


def _event_patch(parts: Sequence[str], body: Any) -> Verdict:
    if not isinstance(body, dict) or not set(body) <= {"count", "lastTimestamp", "message"}:
        return _deny("an agent's Event patch changes count, lastTimestamp and message only")
    too_long = rules.event_message_problem(body.get("message"))
    if too_long is not None:
        return _deny(too_long)
    return _allow(parts)


def decide(
    method: str,
    path: str,
    query: Sequence[tuple[str, str]],
    content_type: str,
    body: bytes,
    node: str,
    created_events: Container[str],
) -> Verdict:
    """Whether the proxy passes on a request of the agent of ``node``: ``path`` as it was
    sent (undecoded), ``query`` its parameters decoded once. ``created_events`` are the names
    of the Events it created through the proxy (the ones it may aggregate)."""
    parts = _split(path)
    if parts is None:
        return _deny("a path segment that is not a name (a DNS subdomain: no %, #, ?, . or ..)")
    if method == "GET":
        return _read(parts, query, node)
    try:
        document = json.loads(body) if body else None
    except ValueError:
        return _deny("the request body is not JSON")
    if method == "PATCH" and parts[:3] == ["api", "v1", "nodes"]:
        if parts != ["api", "v1", "nodes", node] or query:
            return _deny(f"an agent may change only the Node it runs on ({node})")
        if content_type != JSON_PATCH:
            return _deny(f"an agent's Node patch is a JSON Patch ({JSON_PATCH})")
        try:
            check_node_patch(document)
        except protocol.ProtocolError as exc:
            return _deny(str(exc))
        return _allow(parts)
    events = ["api", "v1", "namespaces", EVENT_NAMESPACE, "events"]
    if method == "POST" and parts == events and not query:
        return _event(parts, document, node)
    if method == "PATCH" and parts[:-1] == events and not query:
        if parts[5] not in created_events:
            return _deny(f"an agent aggregates only the Events it created ({parts[5]} is not)")
        if content_type != MERGE_PATCH:
            return _deny(f"an Event patch is a merge patch ({MERGE_PATCH})")
        return _event_patch(parts, document)
    return _deny(f"an agent may not {method} /{'/'.join(parts)}")
