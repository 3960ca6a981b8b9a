"""harness/audit.py: a write answered 504 that committed all the same is its writer's (issue 35).

During an etcd freeze kube-apiserver answers a write 504 once its client gives up, yet etcd
commits it when it runs again. Read with the successes alone, the release the agent wrote
then showed up as the next writer's change (the MCC's, the MCD's): the agent's hold seemed
ended by someone else, and later than it was.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from drain_guard_sim.harness.audit import write_log

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
AGENT = "system:serviceaccount:drain-guard:drain-guard"
MCC = "system:serviceaccount:openshift-machine-config-operator:machine-config-controller"
DESIRED = "machineconfiguration.openshift.io/desiredDrain"
LAST = "machineconfiguration.openshift.io/lastAppliedDrain"
HELD = "drain-guard.io/held-drain"
REQUEST = "drain-rendered-worker-b"


def _node(rv: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": "worker-0", "resourceVersion": str(rv), "annotations": annotations},
    }


def _event(
    user: str, request: Any, completed: float, code: int, response: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "stage": "ResponseComplete",
        "verb": "patch",
        "user": {"username": user},
        "objectRef": {"resource": "nodes", "name": "worker-0", "apiVersion": "v1"},
        "requestURI": "/api/v1/nodes/worker-0",
        "responseStatus": {"code": code},
        "requestObject": request,
        "responseObject": response or {"kind": "Status", "code": code},
        "requestReceivedTimestamp": (T0 + timedelta(seconds=completed - 0.5)).isoformat(),
        "stageTimestamp": (T0 + timedelta(seconds=completed)).isoformat(),
    }


HELD_NODE = {DESIRED: "hold-" + REQUEST, HELD: REQUEST, LAST: "uncordon-a"}
RELEASED_NODE = {DESIRED: REQUEST, LAST: "uncordon-a"}
#: The agent's release: its tests, then the request restored and the record removed.
RELEASE = [
    {"op": "test", "path": "/metadata/annotations/" + DESIRED.replace("/", "~1"),
     "value": "hold-" + REQUEST},
    {"op": "replace", "path": "/metadata/annotations/" + DESIRED.replace("/", "~1"),
     "value": REQUEST},
    {"op": "remove", "path": "/metadata/annotations/" + HELD.replace("/", "~1")},
]  # fmt: skip


def _read(tmp_path: Path, events: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    log = tmp_path / "audit.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    return [
        (r.user, dict((r.after or {})["metadata"]["annotations"])) for r in write_log(log, T0, 0.0)
    ]


def test_a_release_answered_504_that_committed_is_the_agents(tmp_path: Path) -> None:
    cordoning = {"metadata": {"annotations": {LAST: REQUEST}}}
    records = _read(
        tmp_path,
        [
            _event(AGENT, {"metadata": {"annotations": HELD_NODE}}, 0.0, 200, _node(10, HELD_NODE)),
            _event(AGENT, RELEASE, 9.0, 504, None),  # committed when etcd ran again
            _event(MCC, cordoning, 12.0, 200, _node(12, {**RELEASED_NODE, LAST: REQUEST})),
        ],
    )
    assert records == [
        (AGENT, HELD_NODE),
        (AGENT, RELEASED_NODE),  # the agent's release, not the MCC's
        (MCC, {**RELEASED_NODE, LAST: REQUEST}),
    ]


def test_a_release_answered_504_that_did_not_commit_is_no_write(tmp_path: Path) -> None:
    records = _read(
        tmp_path,
        [
            _event(AGENT, {"metadata": {"annotations": HELD_NODE}}, 0.0, 200, _node(10, HELD_NODE)),
            _event(AGENT, RELEASE, 9.0, 504, None),  # cancelled before etcd took it
            _event(AGENT, RELEASE, 9.5, 200, _node(11, RELEASED_NODE)),  # its retry
        ],
    )
    assert records == [(AGENT, HELD_NODE), (AGENT, RELEASED_NODE)]


def test_a_504_whose_change_the_next_write_does_not_show_is_no_write(tmp_path: Path) -> None:
    unchanged = {**HELD_NODE, "example.com/other": "1"}
    records = _read(
        tmp_path,
        [
            _event(AGENT, {"metadata": {"annotations": HELD_NODE}}, 0.0, 200, _node(10, HELD_NODE)),
            _event(AGENT, RELEASE, 9.0, 504, None),
            _event(MCC, {"metadata": {"annotations": {"example.com/other": "1"}}}, 12.0, 200,
                   _node(12, unchanged)),
        ],
    )  # fmt: skip
    assert records == [(AGENT, HELD_NODE), (MCC, unchanged)]


def test_a_refused_write_is_never_taken_for_committed(tmp_path: Path) -> None:
    records = _read(
        tmp_path,
        [
            _event(AGENT, {"metadata": {"annotations": HELD_NODE}}, 0.0, 200, _node(10, HELD_NODE)),
            _event(AGENT, RELEASE, 9.0, 409, None),
            _event(MCC, {"metadata": {"annotations": RELEASED_NODE}}, 12.0, 200,
                   _node(12, RELEASED_NODE)),
        ],
    )  # fmt: skip
    assert records == [(AGENT, HELD_NODE), (MCC, RELEASED_NODE)]
