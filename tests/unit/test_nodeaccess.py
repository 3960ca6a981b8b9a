"""What the node proxy passes on (drain_guard.confine.nodeaccess): every patch the protocol builds,
the agent's reads and Events; nothing else."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drain_guard import protocol
from drain_guard.confine import nodeaccess
from drain_guard.protocol import (
    DESIRED_DRAIN,
    HELD_DRAIN,
    LAST_APPLIED_DRAIN,
    OWNED_KEYS,
    RELEASED,
    RELEASED_BY,
    RELEASED_KEYS,
    ProtocolError,
    Reason,
    annotation_path,
)
from tests.deploy.test_admission_policy import forged_pool_events, recorded_event

NODE = "worker-0"
SINCE = datetime(2026, 1, 1, tzinfo=UTC)
DRAIN = annotation_path(DESIRED_DRAIN)


def _patch(ops: Any, node: str = NODE) -> nodeaccess.Verdict:
    body = json.dumps(ops).encode()
    return nodeaccess.decide(
        "PATCH", f"/api/v1/nodes/{node}", [], nodeaccess.JSON_PATCH, body, NODE, ()
    )


@given(
    target=st.text(min_size=1, max_size=40),
    detail=st.text(max_size=2000),
    last=st.one_of(st.none(), st.text(max_size=40)),
)
def test_every_patch_the_protocol_builds_passes(target: str, detail: str, last: str | None) -> None:
    desired = "drain-" + target
    if desired == last:
        return
    held = protocol.hold_patch(
        desired, last, "7", [Reason.BUILD_POD], SINCE, detail, expires=SINCE + timedelta(minutes=45)
    )
    record = protocol.HoldRecord(desired, (Reason.BUILD_POD,), SINCE, detail[:10])
    patches = [
        held,
        protocol.hold_patch(
            desired,
            last,
            "7",
            [Reason.MANUAL],
            SINCE,
            detail,
            remove=[RELEASED],
            expires=SINCE + timedelta(minutes=45),
        ),
        protocol.update_hold_patch(
            record,
            [Reason.NOOP_IMAGE],
            detail,
            record.since + timedelta(minutes=45),
            seen={protocol.HOLD_REASONS: "build-pod", protocol.HOLD_DETAIL: detail[:10]},
            resource_version="7",
        ),
        protocol.release_patch(desired, last, "7", OWNED_KEYS),
        protocol.release_patch(desired, last, "7", (*OWNED_KEYS, RELEASED), mark_released=True),
        protocol.cleanup_patch(
            "hold-" + desired, {k: "x" for k in OWNED_KEYS}, OWNED_KEYS, mark_released=desired
        ),
        protocol.cleanup_patch(None, {RELEASED: desired}, [RELEASED]),
        protocol.cleanup_patch(None, {RELEASED: desired, RELEASED_BY: "a"}, RELEASED_KEYS),
        protocol.hold_patch(
            desired,
            last,
            "7",
            [Reason.MANUAL],
            SINCE,
            "",
            remove=RELEASED_KEYS,
            expires=SINCE + timedelta(minutes=45),
        ),
    ]
    for ops in patches:
        nodeaccess.check_node_patch(ops)
        assert _patch(ops).allowed


FORGED: list[tuple[str, Any]] = [
    ("a new drain request", [{"op": "add", "path": DRAIN, "value": "drain-x"}]),
    ("no test first", [{"op": "replace", "path": DRAIN, "value": "hold-drain-x"}]),
    (
        "a hold of a non-drain",
        [
            {"op": "test", "path": DRAIN, "value": "uncordon-x"},
            {"op": "add", "path": DRAIN, "value": "hold-uncordon-x"},
        ],
    ),
    (
        "a release to something else",
        [
            {"op": "test", "path": DRAIN, "value": "hold-drain-x"},
            {"op": "add", "path": DRAIN, "value": "drain-y"},
        ],
    ),
    (
        "a second step after the first",
        [
            {"op": "test", "path": DRAIN, "value": "drain-x"},
            {"op": "add", "path": DRAIN, "value": "hold-drain-x"},
            {"op": "add", "path": DRAIN, "value": "hold-hold-drain-x"},
        ],
    ),
    ("removing desiredDrain", [{"op": "remove", "path": DRAIN}]),
    (
        "lastAppliedDrain",
        [{"op": "add", "path": annotation_path(LAST_APPLIED_DRAIN), "value": "drain-x"}],
    ),
    ("another annotation", [{"op": "add", "path": annotation_path("a/b"), "value": "c"}]),
    ("a label", [{"op": "add", "path": "/metadata/labels/a", "value": "b"}]),
    ("the spec", [{"op": "add", "path": "/spec/unschedulable", "value": "true"}]),
    ("all annotations", [{"op": "add", "path": "/metadata/annotations", "value": "{}"}]),
    ("a move", [{"op": "move", "from": DRAIN, "path": annotation_path(HELD_DRAIN)}]),
    ("a copy", [{"op": "copy", "from": DRAIN, "path": annotation_path(HELD_DRAIN)}]),
    ("a test elsewhere", [{"op": "test", "path": "/spec", "value": "x"}]),
    ("a value not a string", [{"op": "add", "path": annotation_path(HELD_DRAIN), "value": {}}]),
    ("a long value", [{"op": "add", "path": annotation_path(HELD_DRAIN), "value": "x" * 1025}]),
    ("an extra member", [{"op": "remove", "path": annotation_path(RELEASED), "value": "x"}]),
    ("who released", [{"op": "add", "path": annotation_path(RELEASED_BY), "value": "kube:admin"}]),
    (
        "who released, replaced",
        [{"op": "replace", "path": annotation_path(RELEASED_BY), "value": "kube:admin"}],
    ),
    ("nothing", []),
    ("not a list", {"metadata": {}}),
    ("too many", [{"op": "test", "path": DRAIN, "value": "x"}] * 33),
]


@pytest.mark.parametrize(("why", "ops"), FORGED, ids=[f[0] for f in FORGED])
def test_a_forged_patch_is_refused(why: str, ops: Any) -> None:
    with pytest.raises(ProtocolError):
        nodeaccess.check_node_patch(ops)
    verdict = _patch(ops)
    assert not verdict.allowed
    assert verdict.message.startswith("drain-guard node-proxy: ")


def test_a_protocol_patch_to_another_node_or_as_a_merge_patch_is_refused() -> None:
    ops = protocol.release_patch("drain-x", None, "7", OWNED_KEYS)
    assert _patch(ops).allowed
    assert not _patch(ops, "worker-1").allowed
    body = json.dumps(ops).encode()
    for content_type in (nodeaccess.MERGE_PATCH, "application/strategic-merge-patch+json"):
        verdict = nodeaccess.decide(
            "PATCH", f"/api/v1/nodes/{NODE}", [], content_type, body, NODE, ()
        )
        assert not verdict.allowed
    dry_run = nodeaccess.decide(
        "PATCH", f"/api/v1/nodes/{NODE}", [("dryRun", "All")], nodeaccess.JSON_PATCH, body, NODE, ()
    )
    assert not dry_run.allowed


READS_ALLOWED = [
    (f"/api/v1/nodes/{NODE}", []),
    ("/api/v1/nodes", [("fieldSelector", f"metadata.name={NODE}")]),
    (
        "/api/v1/nodes",
        [
            ("fieldSelector", f"metadata.name={NODE}"),
            ("watch", "true"),
            ("allowWatchBookmarks", "True"),
            ("resourceVersion", "12"),
            ("timeoutSeconds", "600"),
        ],
    ),
    ("/api/v1/nodes", [("fieldSelector", f"metadata.name!={NODE}"), ("limit", "1")]),
    ("/api/v1/pods", [("fieldSelector", f"spec.nodeName={NODE}")]),
    ("/api/v1/namespaces/ns/pods", [("fieldSelector", f"spec.nodeName={NODE}"), ("watch", "1")]),
]
READS_DENIED = [
    ("/api/v1/nodes/worker-1", []),
    (f"/api/v1/nodes/{NODE}/proxy/configz", []),
    ("/api/v1/nodes", []),
    ("/api/v1/nodes", [("fieldSelector", f"metadata.name!={NODE}")]),
    (
        "/api/v1/nodes",
        [("fieldSelector", f"metadata.name={NODE}"), ("fieldSelector", "metadata.name=worker-1")],
    ),
    ("/api/v1/pods", []),
    ("/api/v1/pods", [("fieldSelector", "spec.nodeName=worker-1")]),
    ("/api/v1/pods", [("fieldSelector", f"spec.nodeName={NODE}"), ("labelSelector", "a")]),
    ("/api/v1/namespaces/ns/secrets", []),
    ("/api/v1/namespaces/ns/configmaps", []),
    ("/api/v1/namespaces/ns/pods/p", []),
    ("/api/v1/namespaces/ns/pods/p/log", []),
    (f"/api/v1/nodes/{NODE}/../worker-1", []),
    ("/apis/certificates.k8s.io/v1/certificatesigningrequests", []),
    # A namespace the API server would decode into a Secret's path, the query cut off by `#`
    # (issue 34): as sent, and as aiohttp's single decoding made it.
    (
        "/api/v1/namespaces/ns%252Fsecrets%252Fdb-password%23/pods",
        [("fieldSelector", f"spec.nodeName={NODE}")],
    ),
    (
        "/api/v1/namespaces/ns%2Fsecrets%2Fdb-password#/pods",
        [("fieldSelector", f"spec.nodeName={NODE}")],
    ),
    ("/api/v1/namespaces/ns?/pods", [("fieldSelector", f"spec.nodeName={NODE}")]),
    (f"/api/v1/nodes/{NODE}%2F..%2Fworker-1", []),
    (f"/api/v1/nodes/{NODE}/", []),
    (f"/api//v1/nodes/{NODE}", []),
    (f"api/v1/nodes/{NODE}", []),
    (f"http://x/api/v1/nodes/{NODE}", []),
    ("/api/v1/namespaces/a.b/pods", [("fieldSelector", f"spec.nodeName={NODE}")]),
    ("/api/v1/pods", [("fieldSelector", f"spec.nodeName={NODE}"), ("watch", "true#")]),
    ("/api/v1/pods", [("fieldSelector", f"spec.nodeName={NODE}"), ("continue", "a%2Fb")]),
    ("/api/v1/pods", [("fieldSelector", f"spec.nodeName={NODE}"), ("resourceVersion", "1&x=y")]),
]


@pytest.mark.parametrize(("path", "query"), READS_ALLOWED)
def test_the_agents_reads_pass(path: str, query: list[tuple[str, str]]) -> None:
    verdict = nodeaccess.decide("GET", path, query, "", b"", NODE, ())
    assert verdict.allowed
    assert (verdict.path, verdict.query) == (path, tuple(query))


@pytest.mark.parametrize(("path", "query"), READS_DENIED)
def test_other_reads_are_refused(path: str, query: list[tuple[str, str]]) -> None:
    assert not nodeaccess.decide("GET", path, query, "", b"", NODE, ()).allowed


#: The characters of a hostile path: the separators and escapes a server decodes, and others.
HOSTILE = st.sampled_from([*"%#?/.;\\ :@&=+", "%2F", "%252F", "%23", "%3F", "%2e", "\x00", "A"])
SEGMENT = st.text(alphabet=st.sampled_from([*"abz09-.", "x"]), min_size=1, max_size=8)


@given(
    method=st.sampled_from(["GET", "PATCH", "POST"]),
    parts=st.lists(st.one_of(SEGMENT, HOSTILE, st.text(max_size=6)), min_size=1, max_size=7),
    at=st.integers(min_value=0, max_value=6),
    hostile=HOSTILE,
)
def test_no_hostile_path_is_passed_on(method: str, parts: list[str], at: int, hostile: str) -> None:
    """Whatever the path, an allowed request is sent as a path of names only, equal to what
    was sent: none with a character the API server would read otherwise than the proxy."""
    parts = [*parts]
    parts.insert(at % (len(parts) + 1), hostile)
    path = "/" + "/".join(parts)
    body = b"{}" if method != "GET" else b""
    query = [("fieldSelector", f"spec.nodeName={NODE}")] if method == "GET" else []
    for candidate in (path, "/api/v1/namespaces/" + "/".join(parts) + "/pods"):
        verdict = nodeaccess.decide(method, candidate, query, "", body, NODE, ())
        assert not verdict.allowed or verdict.path == candidate, (candidate, verdict)
        segments = verdict.path.split("/")[1:]
        assert all(nodeaccess.is_node_name(s) for s in segments if verdict.allowed), verdict
        assert not (verdict.allowed and any(c in candidate for c in "%#?\\ ")), candidate


def _event(**changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{NODE}.18a", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "u"},
        "reason": "DrainHeld",
        "message": "held",
        "type": "Normal",
        "count": 1,
        "source": {"component": "drain-guard", "host": NODE},
        "reportingComponent": "drain-guard",
        "reportingInstance": f"drain-guard-{NODE}",
    }
    event.update(changes)
    return event


def _post(event: Any, namespace: str = "default") -> nodeaccess.Verdict:
    path = f"/api/v1/namespaces/{namespace}/events"
    body = json.dumps(event).encode()
    return nodeaccess.decide("POST", path, [], "application/json", body, NODE, ())


def test_the_agents_events_pass_and_no_other() -> None:
    assert _post(_event()).allowed
    other = {"apiVersion": "v1", "kind": "Node", "name": "worker-1"}
    forgeries: tuple[Any, ...] = (
        _event(involvedObject=other),
        _event(involvedObject={"apiVersion": "v1", "kind": "Pod", "name": NODE}),
        _event(source={"component": "kubelet", "host": NODE}),
        _event(reportingComponent="machine-config-daemon"),
        _event(reason="NodeNotReady"),
        _event(metadata={"name": "worker-1.1", "namespace": "default"}),
        _event(message="x" * 1025),
        [],
    )
    for forged in forgeries:
        assert not _post(forged).allowed, forged
    assert not _post(_event(), namespace="openshift-machine-config-operator").allowed


def test_an_invalid_hold_request_event_passes() -> None:
    assert _post(_event(reason="HoldRequestInvalid", type="Warning")).allowed


def test_the_agents_pool_events_pass_and_no_forged_one() -> None:
    """Its pool's Events as the recorder writes them; what a compromised agent could try
    with them is refused (the same forgeries as the admission policy's and the webhook's)."""
    assert _post(recorded_event(pool="worker")).allowed
    released = recorded_event(pool="worker") | {"reason": "PoolRolloutReleased"}
    assert _post(released).allowed
    passed = [name for name, body in forged_pool_events().items() if _post(body).allowed]
    assert passed == []
    # The pool's Event named as another node's (the proxy pins the name's prefix too).
    renamed = recorded_event(pool="worker") | {"metadata": {"name": "worker-1.1"}}
    assert not _post(renamed).allowed


def test_only_events_it_created_are_aggregated() -> None:
    path = f"/api/v1/namespaces/default/events/{NODE}.18a"
    body = json.dumps({"count": 2, "lastTimestamp": "x", "message": "m"}).encode()

    def patch(created: tuple[str, ...], content: bytes = body) -> bool:
        verdict = nodeaccess.decide(
            "PATCH", path, [], nodeaccess.MERGE_PATCH, content, NODE, created
        )
        return verdict.allowed

    assert patch((f"{NODE}.18a",))
    assert not patch(())  # the kubelet's Event about this Node, say
    assert not patch((f"{NODE}.18a",), json.dumps({"involvedObject": {}}).encode())


def test_nothing_else_passes() -> None:
    for method, path in (
        ("POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token"),
        ("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests"),
        ("POST", "/api/v1/namespaces/ns/pods/p/eviction"),
        ("DELETE", f"/api/v1/nodes/{NODE}"),
        ("PUT", f"/api/v1/nodes/{NODE}"),
        ("PATCH", f"/api/v1/nodes/{NODE}/status"),
        ("POST", "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"),
        ("DELETE", "/api/v1/namespaces/default/events/x"),
    ):
        verdict = nodeaccess.decide(method, path, [], "application/json", b"{}", NODE, ())
        assert not verdict.allowed, (method, path)
    bad_json = nodeaccess.decide(
        "POST", "/api/v1/namespaces/default/events", [], "", b"{", NODE, ()
    )
    assert bad_json.message == "drain-guard node-proxy: the request body is not JSON"
