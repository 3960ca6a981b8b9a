"""A real API server's audit log read as the simulator's write log, so that one invariant
checker (``checker.py``) judges runs on either server.

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
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from drain_guard_sim.apiserver.store import WriteRecord

__all__ = ["write_log"]

JsonObj = dict[str, Any]
WRITE_VERBS = ("create", "update", "patch", "delete")


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


def write_log(path: Path, since: datetime, clock_offset: float) -> list[WriteRecord]:
    """The successful Node and Pod writes of the audit log at ``path`` completed from
    ``since`` on; ``clock_offset`` is ``time.monotonic() - time.time()`` of this process, so
    that each record's ``time`` is on the monotonic clock the harness's intervals use."""
    events = [
        e
        for e in _events(path)
        if e.get("stage") == "ResponseComplete"
        and e.get("verb") in WRITE_VERBS
        and 200 <= (e.get("responseStatus") or {}).get("code", 0) <= 299
        and "dryRun=" not in e.get("requestURI", "")  # stored nothing (the simulator's log
    ]  # has no dry runs either)
    events = _in_commit_order(events)
    last: dict[tuple[str, str, str], JsonObj] = {}
    records: list[WriteRecord] = []
    for e in events:
        ref = e["objectRef"]
        wall = datetime.fromisoformat(e["stageTimestamp"])
        resource, subresource = ref["resource"], ref.get("subresource", "")
        key = (resource, ref.get("namespace", ""), ref.get("name", ""))
        response = e.get("responseObject") or {}
        after = response if response.get("kind") not in (None, "Status") else None
        if e["verb"] == "create" and not subresource and after is not None:
            key = (resource, ref.get("namespace", ""), after["metadata"]["name"])
        before = last.get(key)
        if after is not None:
            last[key] = after
        if wall < since:
            continue  # before the run: only the objects' chain needs it
        records.append(
            WriteRecord(
                rv=len(records) + 1,
                time=wall.timestamp() + clock_offset,
                wall=wall,
                user=e["user"]["username"],
                verb=e["verb"],
                group=ref.get("apiGroup", ""),
                resource=resource,
                subresource=subresource,
                namespace=ref.get("namespace", ""),
                name=key[2],
                before=before,
                after=after if e["verb"] != "delete" else None,
            )
        )
    return records
