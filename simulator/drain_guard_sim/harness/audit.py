"""A real API server's audit: the policy the control plane is started with (``audit_policy``),
and its log read as the simulator's write log, so that one invariant checker
(``checker.py``) judges runs on either server.

``ControlPlane(audit=True)`` logs every Node and Pod write with its request and response
(``AUDIT_WRITES``). Each successful write (not a dry run) becomes a :class:`WriteRecord`:
its user, verb, resource and subresource from the event, ``after`` from the response,
``before`` from the previous write of the same object (every write of those kinds is
logged, so the chain is whole; an eviction's response is a Status, so its ``after`` is None
and its ``before`` the pod as last written). Records are ordered as etcd committed them: by
the resourceVersion of the object each write returned (a global counter of the one etcd),
and a write that returns none (an eviction) right after the committed write logged before it;
then numbered in that order. The time the server completed a write is no such order: two
writers of one Node every 50 ms had their completions logged out of commit order, and the
chain of ``before`` objects then made three correct writes look like scope violations
(issue 35).

A write answered with no success that is no refusal (a 5xx: an etcd freeze's 504 once its
client gave up, or the API server's own timeout) may still have committed: kube-apiserver had
sent it to etcd, and etcd commits it when it runs again. Such a write is the writer's, not
that of whoever wrote the object next: it is taken as committed just before the next
successful write of its object when its request applies to the object as last written (its
JSON Patch ``test`` operations pass), changes it, and that next write's result shows the
change and could have been made on top of it (its own ``test`` operations pass there too).
Its time is the next write's, the latest it can have committed: a hold it ended is counted no
shorter than it was. One that no later write of its object follows is not seen.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from drain_guard_sim.apiserver.errors import ApiError
from drain_guard_sim.apiserver.patching import apply_json_patch, apply_strategic_merge_patch
from drain_guard_sim.apiserver.writelog import WriteRecord

__all__ = ["AUDITED_GROUP", "AUDIT_WRITES", "audit_policy", "write_log"]

JsonObj = dict[str, Any]
WRITE_VERBS = ("create", "update", "patch", "delete")
#: What the server sets on every write, whoever wrote: not a change of the writer's.
SERVER_FIELDS = ("/metadata/resourceVersion", "/metadata/managedFields", "/metadata/generation")
_ABSENT = object()


def _events(path: Path) -> Iterable[JsonObj]:
    with path.open() as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _resource_version(event: JsonObj) -> int | None:
    response = event.get("responseObject") or {}
    if response.get("kind") in (None, "Status"):
        return None
    value = (response.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _in_commit_order(events: list[JsonObj]) -> list[JsonObj]:
    """``events`` by the resourceVersion each write committed; one without (an eviction's
    Status) right after the write completed last before it."""
    by_time = sorted(events, key=lambda e: e["stageTimestamp"])
    keyed: list[tuple[int, int, int, JsonObj]] = []
    last = 0
    for i, event in enumerate(by_time):
        rv = _resource_version(event)
        if rv is None:
            keyed.append((last, 1, i, event))
        else:
            last = max(last, rv)
            keyed.append((rv, 0, i, event))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


def _code(event: JsonObj) -> int:
    code: int = (event.get("responseStatus") or {}).get("code", 0)
    return code


def _fate_unknown(event: JsonObj) -> bool:
    """A patch answered with no success and no refusal: it may have committed."""
    return event.get("verb") == "patch" and (_code(event) == 0 or _code(event) >= 500)


def _applied(obj: JsonObj, patch: Any) -> JsonObj | None:
    """``obj`` with ``patch`` (a JSON Patch, or a merge patch) applied; None if it does not
    apply (a ``test`` operation fails)."""
    try:
        if isinstance(patch, list):
            return apply_json_patch(obj, patch)
        if isinstance(patch, dict):
            return apply_strategic_merge_patch(obj, patch)
    except ApiError:
        return None
    return None


def _leaves(value: Any, pointer: str = "") -> dict[str, Any]:
    """Each leaf of a JSON value by its JSON Pointer (an empty map or list is a leaf)."""
    if isinstance(value, dict) and value:
        items: Iterable[tuple[str, Any]] = value.items()
    elif isinstance(value, list) and value:
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {pointer: value}
    found: dict[str, Any] = {}
    for key, item in items:
        found.update(_leaves(item, f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"))
    return found


def _changes(before: JsonObj, after: JsonObj) -> dict[str, Any]:
    """The leaves ``after`` changed, added or removed (``_ABSENT``) from ``before``, but for
    the fields the server sets."""
    old, new = _leaves(before), _leaves(after)
    return {
        pointer: new.get(pointer, _ABSENT)
        for pointer in old.keys() | new.keys()
        if old.get(pointer, _ABSENT) != new.get(pointer, _ABSENT)
        and not pointer.startswith(SERVER_FIELDS)
    }


def _shows(obj: JsonObj, changes: dict[str, Any]) -> bool:
    """Whether ``obj`` has what ``changes`` set (and lacks what they removed)."""
    leaves = _leaves(obj)
    return all(leaves.get(pointer, _ABSENT) == value for pointer, value in changes.items())


def _committed_before(unknown: JsonObj, last: JsonObj | None, nxt: JsonObj) -> JsonObj | None:
    """The object as ``unknown`` (a write whose fate is unknown) left it, if it committed
    between ``last`` and the successful write ``nxt``; None if it did not (or cannot be told)."""
    request = unknown.get("requestObject")
    after = nxt.get("responseObject")
    if last is None or request is None or not isinstance(after, dict):
        return None
    candidate = _applied(last, request)
    if candidate is None:
        return None
    changes = _changes(last, candidate)
    if not changes or not _shows(after, changes):
        return None
    following = nxt.get("requestObject")
    if nxt.get("verb") == "patch" and _applied(candidate, following) is None:
        return None  # the next write could not have been made on top of it
    return candidate


def write_log(path: Path, since: datetime, clock_offset: float) -> list[WriteRecord]:
    """The Node and Pod writes of the audit log at ``path`` completed from ``since`` on: each
    successful one, and each answered with a 5xx that committed all the same (above);
    ``clock_offset`` is ``time.monotonic() - time.time()`` of this process, so that each
    record's ``time`` is on the monotonic clock the harness's intervals use."""
    written = [
        e
        for e in _events(path)
        if e.get("stage") == "ResponseComplete"
        and e.get("verb") in WRITE_VERBS
        and "dryRun=" not in e.get("requestURI", "")  # stored nothing (the simulator's log
    ]  # has no dry runs either)
    events = _in_commit_order([e for e in written if 200 <= _code(e) <= 299])
    unknown = sorted(
        (e for e in written if _fate_unknown(e)),
        key=lambda e: e.get("requestReceivedTimestamp") or e["stageTimestamp"],
    )
    last: dict[tuple[str, str, str], JsonObj] = {}
    pending: dict[tuple[str, str, str], list[JsonObj]] = {}
    records: list[WriteRecord] = []

    def record(
        e: JsonObj, key: tuple[str, str, str], wall: datetime, after: JsonObj | None
    ) -> None:
        ref = e["objectRef"]
        before = last.get(key)
        if after is not None:
            last[key] = after
        if wall < since:
            return  # before the run: only the objects' chain needs it
        records.append(
            WriteRecord(
                rv=len(records) + 1,
                time=wall.timestamp() + clock_offset,
                wall=wall,
                user=e["user"]["username"],
                verb=e["verb"],
                group=ref.get("apiGroup", ""),
                resource=ref["resource"],
                subresource=ref.get("subresource", ""),
                namespace=ref.get("namespace", ""),
                name=key[2],
                before=before,
                after=after if e["verb"] != "delete" else None,
            )
        )

    for e in events:
        ref = e["objectRef"]
        wall = datetime.fromisoformat(e["stageTimestamp"])
        resource, subresource = ref["resource"], ref.get("subresource", "")
        key = (resource, ref.get("namespace", ""), ref.get("name", ""))
        response = e.get("responseObject") or {}
        after = response if response.get("kind") not in (None, "Status") else None
        if e["verb"] == "create" and not subresource and after is not None:
            key = (resource, ref.get("namespace", ""), after["metadata"]["name"])
        while unknown and _received(unknown[0]) <= wall:
            u = unknown.pop(0)
            u_ref = u["objectRef"]
            u_key = (u_ref["resource"], u_ref.get("namespace", ""), u_ref.get("name", ""))
            pending.setdefault(u_key, []).append(u)
        for u in list(pending.get(key, ())):
            committed = _committed_before(u, last.get(key), e)
            if committed is not None:
                pending[key].remove(u)
                record(u, key, wall, committed)
        record(e, key, wall, after)
    return records


def _received(event: JsonObj) -> datetime:
    return datetime.fromisoformat(event.get("requestReceivedTimestamp") or event["stageTimestamp"])


#: Users in this group have every request logged (its metadata: verb, URI with the query,
#: response code) in ``audit_log``, with or without ``audit``: a test gives it to the one
#: identity whose requests it counts (an agent's LISTs and watches), and no other request is
#: logged for it.
AUDITED_GROUP = "drain-guard.io:audited"
#: What ``audit`` adds: every write to a Node or a Pod (and its status and evictions), with
#: the request and the response, as a chaos run's checker needs them.
AUDIT_WRITES: dict[str, Any] = {
    "level": "RequestResponse",
    "verbs": ["create", "update", "patch", "delete"],
    "resources": [{"group": "", "resources": ["nodes", "pods", "pods/status", "pods/eviction"]}],
}


def audit_policy(writes: bool) -> dict[str, Any]:
    """kube-apiserver's audit policy: the audited group's requests, and with ``writes``
    every Node and Pod write; nothing else."""
    rules: list[dict[str, Any]] = [{"level": "Metadata", "userGroups": [AUDITED_GROUP]}]
    if writes:
        rules.append(AUDIT_WRITES)
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [*rules, {"level": "None"}],
    }
