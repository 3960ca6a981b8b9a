"""AgentStatus: stable JSON with RFC 3339 times, a lossless round trip, a readable text view."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drain_guard import guards, protocol
from drain_guard.core.pods import Pod
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.decision import decisions
from drain_guard.decision.decide import decide
from drain_guard.protocol import DESIRED_DRAIN, DESIRED_IMAGE, HoldRecord, Reason
from drain_guard.shield.plan import Conflict, Held, NodeScope, Role, ShieldStatus
from drain_guard.status.agent import DECISIONS, AgentStatus
from drain_guard.status.hold import HoldReasonStatus
from drain_guard.status.holdrequest import (
    HoldRequestStatus,
    printable,
    releases_when,
    split_hold_detail,
)
from drain_guard.status.parts import (
    BootedImageStatus,
    InvalidInputStatus,
    PodStatus,
    ReleaseFailingStatus,
)
from drain_guard.status.snapshot import decided, nothing_decided
from tests.helpers import agent_guards

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
DIGEST = "sha256:" + "a" * 64
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
CURRENT = WatchStatus(listed=True, watching=True)


def held() -> AgentStatus:
    return AgentStatus(
        node="worker-0",
        decision="holding",
        explanation="drain held: a build pod runs on this node",
        version="0.1.0",
        started_at=T0 - timedelta(hours=2),
        generated_at=T0,
        desired_drain="hold-drain-rendered-worker-5620",
        last_applied_drain="uncordon-rendered-worker-1111",
        held_request="drain-rendered-worker-5620",
        hold_reasons=(
            HoldReasonStatus("build-pod", "openshift-machine-config-operator/build-x Running"),
            HoldReasonStatus("noop-image", f"desired = booted = {DIGEST}"),
        ),
        since=T0 - timedelta(minutes=12, seconds=5),
        expires_at=T0 + timedelta(minutes=32, seconds=55),
        build_pods=(PodStatus("openshift-machine-config-operator", "build-x", "Running"),),
        desired_image=f"image-registry.example/ocb/os@{DIGEST}",
        desired_digest=DIGEST,
        booted=BootedImageStatus(
            digest=DIGEST,
            reference=f"ostree-unverified-registry:image-registry.example/ocb/os@{DIGEST}",
            source="/ostree/deploy/rhcos/deploy/abc.0.origin",
        ),
        watches={"pod": CURRENT, "node": CURRENT},
        last_api_contact=T0 - timedelta(seconds=3),
        confinement={"confined": True, "detail": "a dry-run write to Node worker-1 was denied"},
        hold_request=HoldRequestStatus.read("2026-03-01T14:00:00Z;storage migration", T0),
        build_pod_namespaces=("openshift-machine-config-operator",),
        pod_watch_namespace="openshift-machine-config-operator",
        releases_when=releases_when(
            [
                ("build-pod", "build pod openshift-machine-config-operator/build-x"),
                ("noop-image", "desiredImage is the booted image"),
            ],
            None,
        ),
        max_hold=timedelta(minutes=45),
        pool="worker",
    )


def test_json_keys_and_times() -> None:
    doc = held().to_json()
    assert list(doc) == [
        "node",
        "decision",
        "explanation",
        "desiredDrain",
        "lastAppliedDrain",
        "heldRequest",
        "holdReasons",
        "since",
        "expiresAt",
        "timeLeftSeconds",
        "buildPods",
        "image",
        "watches",
        "lastApiContact",
        "shield",
        "scope",
        "observeOnly",
        "confinement",
        "alerts",
        "invalidInputs",
        "holdRequest",
        "releasesWhen",
        "maxHoldSeconds",
        "lastWouldHold",
        "observed",
        "pool",
        "releasedBy",
        "releaseFailing",
        "version",
        "startedAt",
        "generatedAt",
    ]
    assert doc["heldRequest"] == "drain-rendered-worker-5620"
    assert doc["since"] == "2026-03-01T11:47:55Z"
    assert doc["expiresAt"] == "2026-03-01T12:32:55Z"
    assert doc["timeLeftSeconds"] == 32 * 60 + 55
    assert doc["holdReasons"][0] == {
        "reason": "build-pod",
        "detail": "openshift-machine-config-operator/build-x Running",
    }
    assert doc["buildPods"] == [
        {"namespace": "openshift-machine-config-operator", "name": "build-x", "phase": "Running"}
    ]
    assert doc["image"]["bootedSource"] == "/ostree/deploy/rhcos/deploy/abc.0.origin"
    assert list(doc["watches"]) == ["node", "pod"]
    assert doc["watches"]["pod"] == {
        "listed": True,
        "watching": True,
        "failingSince": None,
        "error": None,
        "silent": False,
        "idleConfirmedAt": None,
    }
    for key in ("since", "expiresAt", "lastApiContact", "startedAt", "generatedAt"):
        assert RFC3339.fullmatch(doc[key]), key
    json.dumps(doc)


def test_times_in_other_zones_are_shown_in_utc() -> None:
    cet = timezone(timedelta(hours=1))
    status = AgentStatus(
        node="n",
        decision="idle",
        explanation="no drain requested",
        version="0.1.0",
        started_at=datetime(2026, 3, 1, 13, 0, tzinfo=cet),
        generated_at=datetime(2026, 3, 1, 13, 0, 30, 123456, tzinfo=cet),
    )
    assert status.to_json()["startedAt"] == "2026-03-01T12:00:00Z"
    assert status.to_json()["generatedAt"] == "2026-03-01T12:00:30Z"


def test_expired_hold_shows_no_negative_time_left() -> None:
    status = held()
    late = dataclasses.replace(status, generated_at=T0 + timedelta(hours=1))
    assert late.to_json()["timeLeftSeconds"] == 0


def test_idle_status_has_nulls_not_missing_keys() -> None:
    doc = AgentStatus(
        node="n",
        decision="starting",
        explanation="waiting for watches",
        version="0.1.0",
        started_at=T0,
        generated_at=T0,
    ).to_json()
    assert doc["heldRequest"] is None
    assert doc["buildPods"] is None
    assert doc["timeLeftSeconds"] is None
    assert doc["holdReasons"] == []
    assert doc["image"]["bootedDigest"] is None


def test_round_trip() -> None:
    status = held()
    assert AgentStatus.from_json(json.loads(json.dumps(status.to_json()))) == status


def test_rejects_unknown_decision_and_naive_times() -> None:
    with pytest.raises(ValueError, match="decision"):
        AgentStatus(
            node="n", decision="maybe", explanation="", version="v", started_at=T0, generated_at=T0
        )
    with pytest.raises(ValueError, match="timezone"):
        AgentStatus(
            node="n",
            decision="idle",
            explanation="",
            version="v",
            started_at=T0.replace(tzinfo=None),
            generated_at=T0,
        )


def test_text_answers_why_is_my_drain_held() -> None:
    text = held().to_text()
    assert (
        text.splitlines()[0] == "node worker-0: holding - drain held: a build pod runs on this node"
    )
    assert "held request:  drain-rendered-worker-5620" in text
    assert "(12m05s ago)" in text
    assert "(in 32m55s;" in text
    assert "reason:        build-pod: openshift-machine-config-operator/build-x Running" in text
    assert "reason:        noop-image:" in text
    assert "build pods:    openshift-machine-config-operator/build-x (Running)" in text
    assert f"booted image:  {DIGEST} (from /ostree/deploy/rhcos/deploy/abc.0.origin)" in text
    assert "node synced, pod synced; last API contact 3s ago" in text
    assert "up 2h00m" in text


def test_text_for_unknowns() -> None:
    status = AgentStatus(
        node="n",
        decision="wait",
        explanation="pods not synced yet: not letting the drain through",
        version="0.1.0",
        started_at=T0,
        generated_at=T0,
        desired_drain="drain-rendered-worker-2",
        booted=BootedImageStatus(source="rpm-ostree status --json", error="no booted deployment"),
        watches={"node": CURRENT, "pod": WatchStatus()},
    )
    text = status.to_text()
    assert "desiredDrain:  drain-rendered-worker-2" in text
    assert "build pods:    unknown (pod watch not synced)" in text
    assert "booted image:  unknown: no booted deployment" in text
    assert "pod NOT synced: not listed yet; last API contact never" in text


def test_an_outage_is_not_synced_with_a_stale_contact_time() -> None:
    """Through an API outage the watches are listed (the view is complete, and old) but not
    watching, since when and why; the last contact shows how old the view is."""
    failing = WatchStatus(
        listed=True, failing_since=T0 - timedelta(minutes=2, seconds=5), error="503 unavailable"
    )
    status = replace(
        held(),
        watches={"node": failing, "pod": failing},
        last_api_contact=T0 - timedelta(minutes=3),
    )
    doc = status.to_json()
    assert doc["watches"]["node"] == {
        "listed": True,
        "watching": False,
        "failingSince": "2026-03-01T11:57:55Z",
        "error": "503 unavailable",
        "silent": False,
        "idleConfirmedAt": None,
    }
    assert doc["lastApiContact"] == "2026-03-01T11:57:00Z"
    assert (
        "watches:       node NOT synced: failing since 2026-03-01T11:57:55Z (2m05s: 503"
        " unavailable), pod NOT synced: failing since" in status.to_text()
    )
    assert "; last API contact 3m00s ago" in status.to_text()


texts = st.text(st.characters(codec="utf-8"), max_size=30)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
).map(lambda t: t.replace(microsecond=0))


@given(
    node=texts,
    decision=st.sampled_from(DECISIONS),
    explanation=texts,
    reasons=st.lists(st.builds(HoldReasonStatus, texts, texts), max_size=3),
    pods=st.none() | st.lists(st.builds(PodStatus, texts, texts, texts), max_size=3),
    since=st.none() | times,
    started=times,
    generated=times,
    booted=st.builds(
        BootedImageStatus,
        st.none() | texts,
        st.none() | texts,
        st.none() | texts,
        st.none() | texts,
    ),
    watches=st.dictionaries(
        texts,
        st.builds(WatchStatus, st.booleans(), st.booleans(), st.none() | times, st.none() | texts),
        max_size=3,
    ),
    invalid=st.lists(st.builds(InvalidInputStatus, texts, texts, texts), max_size=2),
)
def test_round_trip_any(
    node: str,
    decision: str,
    explanation: str,
    reasons: list[HoldReasonStatus],
    pods: list[PodStatus] | None,
    since: datetime | None,
    started: datetime,
    generated: datetime,
    booted: BootedImageStatus,
    watches: dict[str, WatchStatus],
    invalid: list[InvalidInputStatus],
) -> None:
    status = AgentStatus(
        node=node,
        decision=decision,
        explanation=explanation,
        version="0.1.0",
        started_at=started,
        generated_at=generated,
        hold_reasons=tuple(reasons),
        build_pods=None if pods is None else tuple(pods),
        since=since,
        expires_at=since,
        booted=booted,
        watches=dict(sorted(watches.items())),
        invalid_inputs=tuple(invalid),
    )
    assert AgentStatus.from_json(json.loads(json.dumps(status.to_json()))) == status
    assert status.to_text().startswith(f"node {node}: {decision} - ")


def test_the_docs_text_view_is_the_real_output() -> None:
    """Issue 25: the example in status.md did not match what the agent prints."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "status.md").read_text()
    example = docs.split("## The text view\n\n```\n", 1)[1].split("```", 1)[0]
    assert example == held().to_text()


def test_docs_explain_every_key_and_decision() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "status.md").read_text()
    doc = held().to_json()
    keys = [k for k in doc if k != "image"] + [f"image.{k}" for k in doc["image"]]
    assert [k for k in keys if f"`{k}`" not in docs] == []
    assert [d for d in DECISIONS if f"`{d}`" not in docs] == []


def test_shield_section_round_trips_and_shows_in_text() -> None:
    """The agent's shield is typed and rendered by the same lines as the central shield's
    (issue 24: it was a dict read back by key, rendered by a second copy)."""
    build_x = Pod("ns", "build-x", phase="Running", node="worker-0")
    build_y = Pod("ns", "build-y", phase="Running", node="worker-0")
    shield = ShieldStatus(
        nodes=NodeScope("worker-0"),
        namespaces=("ns", "openshift-image-registry"),
        synced={"ns": True, "openshift-image-registry": False},
        forbidden={"openshift-image-registry": "poddisruptionbudget_list forbidden"},
        held=(Held(build_x, Role.BUILD_POD, "drain-guard-build-x"),),
        conflicts=(Conflict(build_y, Role.BUILD_POD, ("ns/theirs",), shielded=False),),
        node_cordoned=False,
    )
    status = replace(held(), shield=shield)
    assert AgentStatus.from_json(json.loads(json.dumps(status.to_json()))) == status
    text = status.to_text()
    assert "  shielded:      ns/build-x on worker-0 (Running): budget drain-guard-build-x\n" in text
    assert "  conflict:      ns/build-y on worker-0: also ns/theirs\n" in text
    assert "  forbidden:     openshift-image-registry: poddisruptionbudget_list forbidden\n" in text
    assert "shielded:" not in held().to_text()


@pytest.mark.parametrize(("confined", "shown"), [(True, "yes"), (False, "NO"), (None, "unknown")])
def test_confinement_shows_in_text(confined: bool | None, shown: str) -> None:
    status = replace(held(), confinement={"confined": confined, "detail": "why"})
    assert AgentStatus.from_json(json.loads(json.dumps(status.to_json()))) == status
    assert f"  confined:      {shown}: why" in status.to_text().splitlines()


# --- built from the decision ----------------------------------------------------------------

MCO_NS = "openshift-machine-config-operator"
REQUEST = "drain-rendered-worker-5620"
IMAGE = f"image-registry.example/ocb/os@{DIGEST}"
BOOTED = guards.BootedImage(DIGEST, f"ostree-unverified-registry:{IMAGE}", "ostree")
BUILD = Pod(MCO_NS, "build-x", "Running", {"openshift.io/build.name": "build-x"})
BASE = AgentStatus("worker-0", "starting", "", "0.1.0", T0 - timedelta(hours=2), T0)
MAX_HOLD = timedelta(minutes=45)


def _status(
    annotations: dict[str, str],
    pods: tuple[Pod, ...] | None,
    hold: HoldRecord | None = None,
    base: AgentStatus = BASE,
) -> AgentStatus:
    """The snapshot of what decide() says about a Node with these annotations and pods."""
    view = guards.NodeView("worker-0", annotations, pods, BOOTED, T0, "7")
    decision = decide(view, agent_guards(), MAX_HOLD)
    return decided(
        base, decision, annotations=annotations, hold=hold, booted=BOOTED, max_hold=MAX_HOLD, now=T0
    )


def test_a_hold_decision_shows_its_reasons_pods_and_images_from_the_verdicts() -> None:
    record = HoldRecord(REQUEST, (Reason.BUILD_POD,), T0, "")
    status = _status({DESIRED_DRAIN: REQUEST, DESIRED_IMAGE: IMAGE}, (BUILD,), record)
    assert (status.decision, status.held_request) == ("hold", REQUEST)
    assert [r.reason for r in status.hold_reasons] == ["build-pod", "noop-image"]
    assert status.build_pods == (PodStatus(MCO_NS, "build-x", "Running"),)
    assert (status.desired_digest, status.booted.digest) == (DIGEST, DIGEST)
    assert status.expires_at == T0 + MAX_HOLD
    assert (status.node, status.started_at, status.generated_at) == (
        "worker-0",
        BASE.started_at,
        T0,
    )


def test_with_no_request_the_guards_evidence_still_shows() -> None:
    status = _status({DESIRED_IMAGE: "quay.io/os@sha256:" + "b" * 64}, (BUILD,))
    assert (status.decision, status.held_request, status.hold_reasons) == ("idle", None, ())
    assert status.build_pods == (PodStatus(MCO_NS, "build-x", "Running"),)
    assert status.desired_digest == "sha256:" + "b" * 64


def test_unsynced_pods_show_as_unknown_and_observe_only_says_what_it_would_do() -> None:
    annotations = {DESIRED_DRAIN: REQUEST, DESIRED_IMAGE: IMAGE}
    status = _status(annotations, None, base=replace(BASE, observe_only=True))
    assert status.build_pods is None
    assert status.decision == "hold"  # the no-op guard blocks; the pods are not needed
    assert status.explanation.startswith("observe-only, not written: would hold ")
    assert status.held_request is None


def test_nothing_decided_keeps_only_the_agents_identity() -> None:
    status = nothing_decided(held(), "node worker-0 not found", T0)
    assert (status.decision, status.explanation) == ("idle", "node worker-0 not found")
    assert (status.held_request, status.build_pods, status.desired_drain) == (None, None, None)
    assert (status.node, status.version, status.started_at) == (
        "worker-0",
        "0.1.0",
        held().started_at,
    )


def test_a_malformed_hold_request_shows_as_invalid_input_with_no_request_pending() -> None:
    status = _status({protocol.HOLD_REQUEST: "tomorrow;dentist"}, ())
    assert status.decision == "idle"
    [bad] = status.invalid_inputs
    assert (bad.kind, bad.what) == (
        "hold_request",
        "drain-guard.io/hold-request='tomorrow;dentist'",
    )
    assert "'tomorrow' is not an RFC 3339 time" in bad.why
    assert status.to_json()["invalidInputs"] == [
        {"kind": "hold_request", "what": bad.what, "why": bad.why}
    ]
    assert f"  invalid input: {bad.what} ignored: {bad.why}\n" in status.to_text()
    assert AgentStatus.from_json(json.loads(json.dumps(status.to_json()))) == status
    # A huge value is cut: logs and /status stay small.
    huge = _status({protocol.HOLD_REQUEST: "x" * 100_000}, ())
    assert len(huge.invalid_inputs[0].what.encode()) < 400
    assert len(huge.invalid_inputs[0].why.encode()) <= 256


# --- the hold request, what releases a hold (issue 25) ----------------------------------------


@pytest.mark.parametrize(
    ("value", "state", "shown"),
    [
        ("30m;db failover", "invalid", "INVALID, holds nothing: '30m' is not an RFC 3339 time"),
        ("2026-03-01T11:00:00Z;done", "expired", "EXPIRED at 2026-03-01T11:00:00Z (1h00m ago)"),
        ("2026-03-01T12:30:00Z;db failover", "active", "until 2026-03-01T12:30:00Z (in 30m00s)"),
    ],
)
def test_a_hold_request_is_active_expired_or_invalid(value: str, state: str, shown: str) -> None:
    request = HoldRequestStatus.read(value, T0)
    assert request.state == state
    assert request.to_text(T0, None, MAX_HOLD).startswith(shown)
    assert HoldRequestStatus.from_json(request.to_json()) == request


def test_a_hold_request_beyond_max_hold_says_it_is_capped() -> None:
    """A request "until 2099" ended after --max-hold and nothing said so."""
    request = HoldRequestStatus.read("2099-01-01T00:00:00Z;long", T0)
    ends_by = T0 + timedelta(minutes=20)
    assert request.capped_at(ends_by) == ends_by
    assert request.to_json(ends_by)["cappedAt"] == "2026-03-01T12:20:00Z"
    assert "capped by --max-hold: the hold ends at 2026-03-01T12:20:00Z" in request.to_text(
        T0, ends_by, MAX_HOLD
    )
    # Not held yet: a drain requested later is held at most --max-hold.
    assert "a drain is held at most 45m00s" in request.to_text(T0, None, MAX_HOLD)
    short = HoldRequestStatus.read("2026-03-01T12:10:00Z", T0)
    assert short.capped_at(ends_by) is None
    assert "capped" not in short.to_text(T0, None, MAX_HOLD)


def test_what_releases_each_reason() -> None:
    request = HoldRequestStatus.read("2026-03-01T12:30:00Z;db", T0)
    assert releases_when(
        [
            ("build-pod", f"build pod {MCO_NS}/build-x"),
            ("noop-image", "desiredImage is the booted image sha256:aaaa"),
            ("manual", "hold-request until 2026-03-01T12:30:00Z: db"),
        ],
        request,
    ) == (
        f"build-pod: when build pod {MCO_NS}/build-x ends",
        "noop-image: when desiredImage changes to an image the node does not run"
        " (the build's new image), when MCO's pool and builds say none will come, or the node"
        " is cordoned (no new image comes then)",
        "manual: when the hold request expires at 2026-03-01T12:30:00Z or is removed",
    )
    assert releases_when([("build-pod", "build pods a/x, a/y")], None) == (
        "build-pod: when build pods a/x, a/y end",
    )


def test_the_hold_detail_splits_by_reason() -> None:
    blocks = [
        guards.Block(Reason.BUILD_POD, "build pod ns/p"),
        guards.Block(Reason.MANUAL, "hold-request until 2026-03-01T12:30:00Z: a; b"),
    ]
    assert split_hold_detail(decisions.hold_detail(blocks)) == {
        "build-pod": "build pod ns/p",
        "manual": "hold-request until 2026-03-01T12:30:00Z: a; b",
    }


def test_control_characters_are_escaped_in_text() -> None:
    """Issue 21 item 7: an annotation could move the cursor or forge a line of the view."""
    assert printable("a\nb\x1b[2J\u2028c\td") == "a\\nb\\x1b[2J\\u2028c\\td"
    status = _status({DESIRED_DRAIN: "drain-x\n  held request:  forged\x1b[31m"}, ())
    text = status.to_text()
    assert "forged" in text
    assert "\x1b" not in text
    assert all(not line.startswith("  held request:") for line in text.splitlines())
    request = _status({protocol.HOLD_REQUEST: "2026-03-01T12:30:00Z;a\nb"}, ())
    assert "hold request:  until 2026-03-01T12:30:00Z (in 30m00s): a b" in request.to_text()


def test_the_status_says_what_releases_the_hold_and_reads_the_hold_request() -> None:
    annotations = {
        DESIRED_DRAIN: REQUEST,
        protocol.HOLD_REQUEST: "2099-01-01T00:00:00Z;until the migration",
    }
    record = HoldRecord(REQUEST, (Reason.BUILD_POD, Reason.MANUAL), T0, "")
    status = _status(annotations, (BUILD,), record)
    assert status.releases_when[0] == f"build-pod: when build pod {MCO_NS}/build-x ends"
    assert status.releases_when[-1].startswith("manual: when the hold request expires at 2099")
    doc = status.to_json()
    assert doc["holdRequest"]["state"] == "active"
    assert doc["holdRequest"]["cappedAt"] == "2026-03-01T12:45:00Z"
    assert doc["maxHoldSeconds"] == 45 * 60
    text = status.to_text()
    assert f"  released:      build-pod: when build pod {MCO_NS}/build-x ends" in text
    assert "  released:      now by drain-guard release --node-name worker-0" in text
    assert "capped by --max-hold: the hold ends at 2026-03-01T12:45:00Z" in text
    assert AgentStatus.from_json(json.loads(json.dumps(doc))) == status


@pytest.mark.parametrize(
    ("annotations", "pool"),
    [
        ({protocol.DESIRED_CONFIG: "rendered-worker-" + "a" * 32}, "worker"),
        ({protocol.CURRENT_CONFIG: "rendered-infra-gpu-5620b8c1d2e3"}, "infra-gpu"),
        ({protocol.DESIRED_CONFIG: "my-config"}, None),
        ({}, None),
    ],
)
def test_the_pool_is_read_from_the_rendered_configs_name(
    annotations: dict[str, str], pool: str | None
) -> None:
    assert protocol.pool_of(annotations) == pool
    assert _status(annotations, ()).pool == pool


def test_a_failing_release_is_shown_read_back_and_printed() -> None:
    """Issue 35: a release the agent cannot write is escalated, not only retried."""
    failing = ReleaseFailingStatus(
        "drain-rendered-worker-5620",
        "expired",
        datetime(2026, 3, 1, 12, 30, tzinfo=UTC),
        7,
        "500 failed calling webhook",
    )
    status = replace(held(), release_failing=failing)
    doc = status.to_json()
    assert doc["releaseFailing"] == {
        "request": "drain-rendered-worker-5620",
        "outcome": "expired",
        "since": "2026-03-01T12:30:00Z",
        "attempts": 7,
        "error": "500 failed calling webhook",
    }
    assert AgentStatus.from_json(doc) == status
    assert held().to_json()["releaseFailing"] is None
    assert (
        "  RELEASE FAILING: drain-rendered-worker-5620 (expired) failing since"
        " 2026-03-01T12:30:00Z (" in status.to_text()
    )
