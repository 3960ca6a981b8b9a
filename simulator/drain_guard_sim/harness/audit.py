"""A real API server's audit log read as the simulator's write log, so that one invariant
checker (``checker.py``) judges runs on either server.

``ControlPlane(audit=True)`` logs every Node and Pod write with its request and response
(``AUDIT_WRITES``). Each successful write (not a dry run) becomes a :class:`WriteRecord`:
its user, verb, resource and subresource from the event, ``after`` from the response,
``before`` from the previous write of the same object (every write of those kinds is
logged, so the chain is whole; an eviction's response is a Status, so its ``after`` is None
and its ``before`` the pod as last written). Records are ordered by the time the server
completed them, and numbered in that order (an eviction has no resourceVersion of its own).
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
    events.sort(key=lambda e: e["stageTimestamp"])
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
