"""harness/audit.py: an audit log read in commit order (issue 35).

Two writers of one Node every 50 ms had their completions logged out of commit order; read by
``stageTimestamp``, the agent's write got the MCD's later state as its ``before`` and the
checker saw the agent change the MCD's keys: three false ``scope`` violations. Ordered by the
resourceVersion each write committed, none.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from drain_guard_sim.harness.audit import write_log

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
AGENT = "system:serviceaccount:drain-guard:drain-guard"
MCD = "system:serviceaccount:openshift-machine-config-operator:machine-config-daemon"


def _node(rv: int, **annotations: str) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": "worker-0", "resourceVersion": str(rv), "annotations": annotations},
    }


def _event(
    user: str, verb: str, completed: float, response: dict[str, Any], resource: str = "nodes"
) -> dict[str, Any]:
    return {
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": user},
        "objectRef": {"resource": resource, "name": "worker-0", "apiVersion": "v1"},
        "requestURI": f"/api/v1/{resource}/worker-0",
        "responseStatus": {"code": 200 if response.get("kind") != "Status" else 201},
        "responseObject": response,
        "stageTimestamp": (T0 + timedelta(seconds=completed)).isoformat(),
    }


def test_writes_are_ordered_as_committed_not_as_their_completions_were_logged(
    tmp_path: Path,
) -> None:
    created = _node(10, desired="a")
    by_mcd = _node(11, desired="b")  # committed first, its completion logged last
    by_agent = _node(12, desired="b", mine="x")
    events = [
        _event("admin", "create", 0.0, created),
        _event(AGENT, "patch", 0.10, by_agent),
        _event("admin", "create", 0.12, {"kind": "Status", "status": "Success"}, "pods"),
        _event(MCD, "patch", 0.11, by_mcd),
    ]
    log = tmp_path / "audit.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    records = write_log(log, T0, 0.0)
    assert [(r.user, r.resource) for r in records] == [
        ("admin", "nodes"),
        (MCD, "nodes"),
        (AGENT, "nodes"),
        ("admin", "pods"),  # no resourceVersion: after the last commit logged before it
    ]
    assert records[1].before == created
    assert records[2].before == by_mcd  # the agent added its key to the MCD's state, only
    assert [r.rv for r in records] == [1, 2, 3, 4]
