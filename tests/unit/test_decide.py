"""decide(): the decision table of the hold protocol, and its invariants on random nodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from drain_guard.core.pods import Pod
from drain_guard.decision.decide import (
    NothingHeldError,
    decide,
    force_release,
    stale_keys,
)
from drain_guard.decision.decisions import (
    CleanUp,
    Decision,
    Foreign,
    Hold,
    Idle,
    Keep,
    Release,
    UpdateHold,
    Wait,
    invalid_inputs,
)
from drain_guard.guards import (
    BootedImage,
    Guard,
    NodeView,
)
from drain_guard.protocol import (
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    DG_PREFIX,
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_DETAIL,
    HOLD_EXPIRES,
    HOLD_REASONS,
    HOLD_REQUEST,
    LAST_APPLIED_DRAIN,
    OWNED_KEYS,
    RELEASED,
    RELEASED_BY,
    RELEASED_KEYS,
    HoldRecord,
    Outcome,
    Reason,
    UnreadableSince,
    Verb,
    annotation_path,
    format_rfc3339,
    parse_drain_request,
    read_hold,
)
from drain_guard.status.agent import DECISIONS
from tests.helpers import agent_guards

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MAX_HOLD = timedelta(minutes=45)
MCO_NS = "openshift-machine-config-operator"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
IMAGE = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/ocb"
A = "drain-rendered-worker-aaa"
B = "drain-rendered-worker-bbb"
PREV = "uncordon-rendered-worker-000"
BUILD = Pod(MCO_NS, "build-x-build", "Running", {"openshift.io/build.name": "build-x"})
BOOTED = BootedImage(D1, f"ostree-unverified-registry:{IMAGE}@{D1}", "ostree")
GUARDS: tuple[Guard, ...] = agent_guards()


def view(
    annotations: Mapping[str, str],
    pods: tuple[Pod, ...] | None = (),
    booted: BootedImage = BOOTED,
    now: datetime = NOW,
    known_hold: HoldRecord | None = None,
    unschedulable: bool = False,
) -> NodeView:
    return NodeView(
        "worker-0",
        dict(annotations),
        pods,
        booted,
        now,
        "100",
        known_hold=known_hold,
        unschedulable=unschedulable,
    )


def run(annotations: Mapping[str, str], **kw: Any) -> Decision:
    return decide(view(annotations, **kw), GUARDS, MAX_HOLD)


def apply(annotations: Mapping[str, str], decision: Decision) -> dict[str, str]:
    obj = {"metadata": {"resourceVersion": "100", "annotations": dict(annotations)}}
    result: dict[str, Any] = jsonpatch.apply_patch(obj, list(decision.patch))
    out: dict[str, str] = result["metadata"]["annotations"]
    return out


def held(
    original: str = A,
    since: datetime = NOW - timedelta(minutes=5),
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    return {
        DESIRED_DRAIN: "hold-" + original,
        LAST_APPLIED_DRAIN: PREV,
        HELD_DRAIN: original,
        HOLD_REASONS: "build-pod",
        HELD_SINCE: format_rfc3339(since),
        HOLD_DETAIL: f"build-pod: build pod {MCO_NS}/build-x-build",
        HOLD_EXPIRES: format_rfc3339(since + MAX_HOLD),
        **(extra or {}),
    }


# --- not held yet -------------------------------------------------------------------------


def test_hold_while_a_build_pod_runs() -> None:
    before = {DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: PREV}
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Hold)
    assert decision.original == A
    assert decision.recheck_at == NOW + MAX_HOLD
    after = apply(before, decision)
    assert after[DESIRED_DRAIN] == "hold-" + A
    assert after[HELD_DRAIN] == A
    assert after[HOLD_REASONS] == "build-pod"
    assert after[HELD_SINCE] == format_rfc3339(NOW)
    assert "\n" not in decision.explain()
    assert decision.explain().startswith(f"hold {A}: build-pod: build pod")


def test_hold_for_the_seed_same_image_update() -> None:
    before = {DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: PREV, DESIRED_IMAGE: f"{IMAGE}@{D1}"}
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Hold)
    assert [b.reason for b in decision.blocks] == [Reason.BUILD_POD, Reason.NOOP_IMAGE]
    assert apply(before, decision)[HOLD_REASONS] == "build-pod,noop-image"


def test_a_same_image_update_of_a_cordoned_node_is_not_held() -> None:
    """The MCC cordoned first (race lost): MCO's node controller never retargets a cordoned
    node, so nothing but max-hold would end a noop-image hold; the drain goes now."""
    before = {DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: PREV, DESIRED_IMAGE: f"{IMAGE}@{D1}"}
    decision = run(before, unschedulable=True)
    assert isinstance(decision, Idle)
    assert decision.passes
    assert decision.patch == ()
    [noop] = [v for v in decision.verdicts if v.reason is Reason.NOOP_IMAGE]
    assert "the node is cordoned" in noop.detail
    # The decision says why it let the drain go (its log line; a held one's release Event).
    assert "not held: the node is cordoned" in decision.explain()


def test_a_cordoned_node_running_a_build_pod_is_held_for_the_build_pod_only() -> None:
    before = {DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: PREV, DESIRED_IMAGE: f"{IMAGE}@{D1}"}
    decision = run(before, pods=(BUILD,), unschedulable=True)
    assert isinstance(decision, Hold)
    assert [b.reason for b in decision.blocks] == [Reason.BUILD_POD]


@pytest.mark.parametrize(
    ("annotations", "fragment"),
    [
        ({}, "no drain request"),
        ({DESIRED_DRAIN: ""}, "no drain request"),
        ({DESIRED_DRAIN: "uncordon-rendered-worker-aaa"}, "uncordon: never held"),
        ({DESIRED_DRAIN: "pause-x"}, "is not a drain request"),
        ({DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: A}, "already applied"),
        ({DESIRED_DRAIN: A, RELEASED: A}, "released earlier"),
    ],
)
def test_never_held(annotations: dict[str, str], fragment: str) -> None:
    decision = run({**annotations, HOLD_REQUEST: "2026-03-01T13:00:00Z"}, pods=(BUILD,))
    assert isinstance(decision, Idle)
    assert fragment in decision.explain()
    assert decision.patch == ()
    # The guards spoke all the same: /status shows the build pod, the hold-request's verdict.
    assert [v.reason for v in decision.verdicts] == [g.reason for g in GUARDS]


def test_no_guard_blocks_idle() -> None:
    decision = run({DESIRED_DRAIN: A, DESIRED_IMAGE: f"{IMAGE}@{D2}"})
    assert decision == Idle("no guard blocks", decision.verdicts, request=A, passes=True)
    assert len(decision.verdicts) == len(GUARDS)


def test_wait_while_pods_unsynced_and_nothing_else_blocks() -> None:
    decision = run({DESIRED_DRAIN: A}, pods=None)
    assert isinstance(decision, Wait)
    assert decision.record is None
    assert decision.patch == ()
    assert "waiting before deciding on" in decision.explain()


def test_a_block_wins_over_an_unknown() -> None:
    decision = run({DESIRED_DRAIN: A, DESIRED_IMAGE: f"{IMAGE}@{D1}"}, pods=None)
    assert isinstance(decision, Hold)
    assert [b.reason for b in decision.blocks] == [Reason.NOOP_IMAGE]


def test_unknown_booted_image_never_holds() -> None:
    booted = BootedImage(None, None, "rpm-ostree", "rpm-ostree timed out after 30 s")
    decision = run({DESIRED_DRAIN: A, DESIRED_IMAGE: f"{IMAGE}@{D1}"}, booted=booted)
    assert isinstance(decision, Idle)
    noop = decision.verdicts[1]
    assert noop.reason is Reason.NOOP_IMAGE
    assert "rpm-ostree timed out" in noop.detail


def test_manual_hold_rechecks_at_its_expiry() -> None:
    decision = run({DESIRED_DRAIN: A, HOLD_REQUEST: "2026-03-01T12:10:00Z;maintenance"})
    assert isinstance(decision, Hold)
    assert decision.recheck_at == NOW + timedelta(minutes=10)


def test_release_marker_of_another_request_is_removed_when_holding() -> None:
    before = {DESIRED_DRAIN: B, RELEASED: A, RELEASED_BY: "kube:admin"}
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Hold)
    after = apply(before, decision)
    assert RELEASED not in after
    assert RELEASED_BY not in after


@pytest.mark.parametrize(
    ("before", "stale"),
    [
        ({DESIRED_DRAIN: A, RELEASED: A, RELEASED_BY: "kube:admin"}, ()),
        ({DESIRED_DRAIN: B, RELEASED: A, RELEASED_BY: "kube:admin"}, (RELEASED, RELEASED_BY)),
        ({DESIRED_DRAIN: A, RELEASED_BY: "kube:admin"}, (RELEASED_BY,)),
        ({DESIRED_DRAIN: "uncordon-x", RELEASED: A, RELEASED_BY: "x"}, (RELEASED, RELEASED_BY)),
    ],
)
def test_who_released_goes_with_the_released_marker(
    before: dict[str, str], stale: tuple[str, ...]
) -> None:
    """Kept while the released request is current; removed with the marker, or alone."""
    decision = run(before)
    assert stale_keys(before) == stale
    if not stale:
        assert isinstance(decision, Idle)
        return
    assert isinstance(decision, CleanUp)
    assert decision.keys == stale
    assert not set(stale) & set(apply(before, decision))


def test_an_expiry_mark_drops_an_older_releaser() -> None:
    """The agent's own mark (a stale record ran out) is no one's release."""
    before = {
        **held(since=NOW - MAX_HOLD),
        DESIRED_DRAIN: A,
        RELEASED: B,
        RELEASED_BY: "kube:admin",
    }
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, CleanUp)
    after = apply(before, decision)
    assert after[RELEASED] == A
    assert RELEASED_BY not in after


# --- held ---------------------------------------------------------------------------------


def test_keep_while_still_blocked() -> None:
    decision = run(held(), pods=(BUILD,))
    assert isinstance(decision, Keep)
    assert decision.patch == ()
    assert decision.recheck_at == NOW - timedelta(minutes=5) + MAX_HOLD


def test_update_when_reasons_change() -> None:
    before = held(extra={DESIRED_IMAGE: f"{IMAGE}@{D1}"})
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, UpdateHold)
    after = apply(before, decision)
    assert after[HOLD_REASONS] == "build-pod,noop-image"
    assert after[HELD_SINCE] == before[HELD_SINCE]
    assert after[DESIRED_DRAIN] == "hold-" + A


def test_release_safe_when_the_build_is_done() -> None:
    before = held()
    decision = run(before, pods=(Pod(MCO_NS, "build-x-build", "Succeeded", BUILD.labels),))
    assert isinstance(decision, Release)
    assert decision.outcome is Outcome.SAFE
    assert apply(before, decision) == {DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: PREV}


def test_a_noop_image_hold_is_released_once_the_node_is_cordoned() -> None:
    """The MCC's sync read the request before the hold and cordoned after it (race lost), or
    someone cordoned the held node: no new image can reach it, so the hold is given up now
    rather than at max-hold; a build pod's hold stays, for the build pod alone."""
    noop = {HOLD_REASONS: "noop-image", HOLD_DETAIL: "noop-image: desiredImage is the booted"}
    before = held(extra={DESIRED_IMAGE: f"{IMAGE}@{D1}", **noop})
    decision = run(before, unschedulable=True)
    assert isinstance(decision, Release)
    assert decision.outcome is Outcome.SAFE
    assert apply(before, decision)[DESIRED_DRAIN] == A
    kept = run(before, pods=(BUILD,), unschedulable=True)
    assert isinstance(kept, UpdateHold)
    assert apply(before, kept)[HOLD_REASONS] == "build-pod"
    # Schedulable: the node controller can still send it the build's image.
    still = run(before)
    assert isinstance(still, UpdateHold | Keep)
    assert still.reasons == (Reason.NOOP_IMAGE,)


def test_wait_keeps_a_hold_when_pods_are_unknown() -> None:
    decision = run(held(), pods=None)
    assert isinstance(decision, Wait)
    assert decision.record is not None
    assert decision.patch == ()
    assert decision.explain().startswith(f"holding {A} until guards can decide")


def test_expired_at_max_hold_even_while_blocked() -> None:
    before = held(since=NOW - MAX_HOLD)
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Release)
    assert decision.outcome is Outcome.EXPIRED
    after = apply(before, decision)
    assert after[DESIRED_DRAIN] == A
    assert after[RELEASED] == A
    # ... and the same request is not held again.
    again = run(after, pods=(BUILD,))
    assert isinstance(again, Idle)
    assert "released earlier" in again.why


def test_just_below_max_hold_is_kept() -> None:
    decision = run(held(since=NOW - MAX_HOLD + timedelta(seconds=1)), pods=(BUILD,))
    assert isinstance(decision, Keep)


@pytest.mark.parametrize(
    "since_text",
    [format_rfc3339(NOW + timedelta(hours=3)), "whenever", "9999-12-31T00:01:00-23:59"],
)
def test_a_held_since_unreadable_or_in_the_future_keeps_the_hold_and_restarts_its_clock(
    since_text: str,
) -> None:
    """Issue 27: such a held-since released the hold (expired or invalid) while the build pod
    ran. Now the hold stays, its held-since is rewritten to now (so max-hold still ends it),
    and the value is reported as invalid input."""
    before = held(extra={HELD_SINCE: since_text})
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, UpdateHold), decision
    after = apply(before, decision)
    assert after == {
        **before,
        HELD_SINCE: format_rfc3339(NOW),
        HOLD_EXPIRES: format_rfc3339(NOW + MAX_HOLD),
    }
    [bad] = invalid_inputs(decision)
    assert (bad.kind, bad.what) == ("annotation", f"{HELD_SINCE}={since_text!r}")
    assert "the hold is kept" in bad.why
    # Repaired, the next pass keeps it with nothing to write, and max-hold counts from now.
    again = run(after, pods=(BUILD,))
    assert isinstance(again, Keep)
    assert again.recheck_at == NOW + MAX_HOLD
    assert invalid_inputs(again) == ()


def test_a_held_since_turned_unreadable_gets_back_the_age_the_agent_knows() -> None:
    """The agent held (or found) the hold earlier: its held-since is restored, not restarted,
    so the hold still ends at max-hold after it began (the MCD's hour goes on too)."""
    began = NOW - timedelta(minutes=30)
    known = HoldRecord(A, (Reason.BUILD_POD,), began, "")
    for since_text in ("whenever", format_rfc3339(NOW + timedelta(days=3))):
        before = held(extra={HELD_SINCE: since_text})
        decision = decide(view(before, pods=(BUILD,), known_hold=known), GUARDS, MAX_HOLD)
        assert isinstance(decision, UpdateHold), decision
        assert apply(before, decision)[HELD_SINCE] == format_rfc3339(began)
        assert decision.recheck_at == began + MAX_HOLD
        [bad] = invalid_inputs(decision)
        assert f"counted from {format_rfc3339(began)}" in bad.why
    # A known hold of another request, or one itself in the future, is no guide: now.
    for other in (replace(known, held_drain=B), replace(known, since=NOW + timedelta(days=1))):
        before = held(extra={HELD_SINCE: "whenever"})
        decision = decide(view(before, pods=(BUILD,), known_hold=other), GUARDS, MAX_HOLD)
        assert apply(before, decision)[HELD_SINCE] == format_rfc3339(NOW)


def test_a_held_since_repaired_while_guards_cannot_decide_keeps_the_hold() -> None:
    before = held(extra={HELD_SINCE: "whenever"})
    decision = run(before, pods=None)  # the pod list is not synced yet
    assert isinstance(decision, Wait), decision
    assert apply(before, decision) == {
        **before,
        HELD_SINCE: format_rfc3339(NOW),
        HOLD_EXPIRES: format_rfc3339(NOW + MAX_HOLD),
    }
    assert [bad.kind for bad in invalid_inputs(decision)] == ["annotation"]


@pytest.mark.parametrize("since_text", [format_rfc3339(NOW + timedelta(hours=3)), "whenever"])
def test_an_unheld_wait_does_not_move_its_recheck_on_with_every_pass(since_text: str) -> None:
    """The MCD wrote the held request again over a hold whose held-since is in the future (or
    unreadable), and a guard cannot decide yet: nothing is held or written, so no start is
    known. "Now" stood in for it, and each pass moved the recheck (and the end /status shows)
    on by the time passed, for as long as the guard could not decide."""
    before = {**held(extra={HELD_SINCE: since_text}), DESIRED_DRAIN: A}
    first = run(before, pods=None)
    second = run(before, pods=None, now=NOW + timedelta(minutes=10))
    assert isinstance(first, Wait)
    assert isinstance(second, Wait)
    assert first.patch == second.patch == ()
    assert first.held_since is second.held_since is None
    assert first.recheck_at is second.recheck_at is None
    # Once the guards can decide, the hold is taken again from now, and reported (issue 27).
    hold = run(before, pods=(BUILD,), now=NOW + timedelta(minutes=10))
    assert isinstance(hold, Hold)
    assert hold.since == NOW + timedelta(minutes=10)
    assert [bad.kind for bad in invalid_inputs(hold)] == ["annotation"]


def test_an_unheld_wait_on_a_readable_record_rechecks_when_it_runs_out() -> None:
    since = NOW - timedelta(minutes=40)
    before = {**held(since=since), DESIRED_DRAIN: A}
    assert run(before, pods=None).recheck_at == since + MAX_HOLD
    later_pass = run(before, pods=None, now=NOW + timedelta(minutes=3))
    assert later_pass.recheck_at == since + MAX_HOLD


def test_a_held_since_unreadable_with_nothing_blocking_is_released_as_safe() -> None:
    decision = run(held(extra={HELD_SINCE: "whenever"}), pods=())
    assert isinstance(decision, Release)
    assert decision.outcome is Outcome.SAFE


def test_an_older_agents_record_without_an_expiry_is_given_this_agents() -> None:
    """A record an agent before hold-expires wrote still reads as the hold it is; the next
    pass writes its expiry (held-since plus this agent's max-hold), and nothing else."""
    since = NOW - timedelta(minutes=10)
    before = held(since=since)
    del before[HOLD_EXPIRES]
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, UpdateHold)
    after = apply(before, decision)
    assert after == {**before, HOLD_EXPIRES: format_rfc3339(since + MAX_HOLD)}
    assert isinstance(run(after, pods=(BUILD,)), Keep)


def test_a_known_hold_started_within_a_second_keeps_the_written_expiry() -> None:
    """The agent's known start may carry a fraction of a second (its clock), the record only
    whole seconds: the same expiry, nothing to write (no write on every pass)."""
    since = NOW - timedelta(minutes=10)
    known = HoldRecord(A, (Reason.BUILD_POD,), since + timedelta(microseconds=250_000), "")
    decision = decide(view(held(since=since), pods=(BUILD,), known_hold=known), GUARDS, MAX_HOLD)
    assert isinstance(decision, Keep), decision


def test_a_record_of_another_max_hold_is_given_this_agents_expiry() -> None:
    since = NOW - timedelta(minutes=10)
    before = held(since=since, extra={HOLD_EXPIRES: format_rfc3339(since + timedelta(hours=2))})
    after = apply(before, run(before, pods=(BUILD,)))
    assert after[HOLD_EXPIRES] == format_rfc3339(since + MAX_HOLD)


def test_small_clock_skew_is_tolerated() -> None:
    decision = run(held(since=NOW + timedelta(seconds=30)), pods=(BUILD,))
    assert isinstance(decision, Keep)


def test_race_lost_restores_the_completed_request() -> None:
    """The MCC finished the drain it started before the hold: let the MCD go on."""
    before = held(extra={LAST_APPLIED_DRAIN: A})
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Release)
    assert decision.outcome is Outcome.RACE_LOST
    assert apply(before, decision) == {DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: A}


@pytest.mark.parametrize(
    ("key", "value"),
    [(HOLD_REASONS, "build-pod,Gremlins!"), (HOLD_REASONS, "")],
)
def test_malformed_record_is_released_as_invalid(key: str, value: str) -> None:
    before = held(extra={key: value})
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Release)
    assert decision.outcome is Outcome.INVALID
    after = apply(before, decision)
    assert after[DESIRED_DRAIN] == A
    assert after[RELEASED] == A


#: A reason a newer agent holds for and this one does not know (docs/protocol.md, "Reasons an
#: agent does not know").
NEWER = "disruption-budget"
NEWER_DETAIL = f"{NEWER}: budget db/quorum allows no disruption"


def test_a_hold_for_a_reason_this_agent_does_not_know_is_a_hold_not_malformed() -> None:
    """Its own guards clear: the hold ends as safe (never invalid, no released marker)."""
    before = held(extra={HOLD_REASONS: NEWER, HOLD_DETAIL: NEWER_DETAIL})
    decision = run(before, pods=())
    assert isinstance(decision, Release)
    assert decision.outcome is Outcome.SAFE
    after = apply(before, decision)
    assert after[DESIRED_DRAIN] == A
    assert RELEASED not in after


def test_a_hold_for_an_unknown_and_a_known_reason_is_rewritten_to_this_agents_own() -> None:
    """One of its own guards blocks: the hold is kept, with this agent's reasons only."""
    extra = {HOLD_REASONS: f"build-pod,{NEWER}", HOLD_DETAIL: NEWER_DETAIL}
    before = held(extra=extra)
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, UpdateHold)
    after = apply(before, decision)
    assert after[DESIRED_DRAIN] == "hold-" + A
    assert after[HOLD_REASONS] == "build-pod"
    assert after[HELD_SINCE] == before[HELD_SINCE]


def test_held_uncordon_is_restored_not_kept() -> None:
    before = held("uncordon-rendered-worker-aaa")
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Release)
    assert decision.outcome is Outcome.INVALID
    assert apply(before, decision)[DESIRED_DRAIN] == "uncordon-rendered-worker-aaa"


@pytest.mark.parametrize(
    ("annotations", "fragment"),
    [
        ({DESIRED_DRAIN: "hold-" + A}, "did not write this hold"),
        ({DESIRED_DRAIN: "hold-" + A, HELD_DRAIN: B}, f"is {B!r}, not {A!r}"),
    ],
)
def test_foreign_holds_are_not_touched(annotations: dict[str, str], fragment: str) -> None:
    decision = run(annotations, pods=())
    assert isinstance(decision, Foreign)
    assert decision.patch == ()
    assert fragment in decision.explain()


# --- superseded and re-written requests ------------------------------------------------------


def test_newer_request_supersedes_the_hold_and_is_held() -> None:
    before = {**held(), DESIRED_DRAIN: B}
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Hold)
    assert decision.supersedes is not None
    assert decision.supersedes.held_drain == A
    after = apply(before, decision)
    assert after[HELD_DRAIN] == B
    assert after[DESIRED_DRAIN] == "hold-" + B
    assert after[HELD_SINCE] == format_rfc3339(NOW)


def test_newer_request_supersedes_and_cleans_up() -> None:
    before = {**held(), DESIRED_DRAIN: B}
    decision = run(before, pods=())
    assert isinstance(decision, CleanUp)
    assert decision.outcome is Outcome.SUPERSEDED
    assert apply(before, decision) == {DESIRED_DRAIN: B, LAST_APPLIED_DRAIN: PREV}


def test_uncordon_over_stale_keys_cleans_up() -> None:
    before = {**held(), DESIRED_DRAIN: "uncordon-rendered-worker-bbb"}
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, CleanUp)
    assert set(decision.keys) == set(OWNED_KEYS)


def test_mcd_rewrites_the_same_request_while_held_hold_again_same_age() -> None:
    since = NOW - timedelta(minutes=20)
    before = {**held(since=since), DESIRED_DRAIN: A}
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, Hold)
    assert decision.resumed
    assert decision.supersedes is None
    assert decision.since == since
    assert apply(before, decision)[HELD_SINCE] == format_rfc3339(since)
    assert decision.explain().startswith("hold again")


def test_rewritten_request_whose_hold_ran_out_is_not_held_again() -> None:
    before = {**held(since=NOW - MAX_HOLD), DESIRED_DRAIN: A}
    decision = run(before, pods=(BUILD,))
    assert isinstance(decision, CleanUp)
    assert decision.outcome is Outcome.EXPIRED
    assert "has run out" in decision.why
    after = apply(before, decision)
    assert after == {DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: PREV, RELEASED: A}
    assert isinstance(run(after, pods=(BUILD,)), Idle)


def test_stale_released_marker_is_cleaned_up() -> None:
    before = {DESIRED_DRAIN: "uncordon-x", RELEASED: A}
    decision = run(before)
    assert isinstance(decision, CleanUp)
    assert decision.keys == (RELEASED,)
    assert decision.outcome is None
    assert apply(before, decision) == {DESIRED_DRAIN: "uncordon-x"}


def test_malformed_stale_keys_are_cleaned_up() -> None:
    before = {DESIRED_DRAIN: B, HOLD_DETAIL: "orphan"}
    decision = run(before)
    assert isinstance(decision, CleanUp)
    assert "unreadable hold record" in decision.why
    assert apply(before, decision) == {DESIRED_DRAIN: B}


# --- forced releases (operator, uninstall) ----------------------------------------------------


def test_force_release_manual_marks_released() -> None:
    before = held()
    release = force_release(before, "100", Outcome.MANUAL)
    after = apply(before, release)
    assert after[DESIRED_DRAIN] == A
    assert after[RELEASED] == A
    assert isinstance(run(after, pods=(BUILD,)), Idle)


def test_force_release_uninstall_leaves_no_marker() -> None:
    before = held()
    after = apply(before, force_release(before, "100", Outcome.UNINSTALL))
    assert after == {DESIRED_DRAIN: A, LAST_APPLIED_DRAIN: PREV}


@pytest.mark.parametrize(
    ("annotations", "fragment"),
    [
        ({DESIRED_DRAIN: A}, "nothing is held"),
        ({}, "nothing is held: desiredDrain is 'not set'"),
        ({DESIRED_DRAIN: "hold-" + A}, "not written by drain-guard"),
    ],
)
def test_force_release_refuses(annotations: dict[str, str], fragment: str) -> None:
    with pytest.raises(NothingHeldError) as info:
        force_release(annotations, "1", Outcome.MANUAL)
    assert fragment in str(info.value)


# --- invariants on random nodes ---------------------------------------------------------------

_values = st.sampled_from
_optional = st.none

annotation_maps = st.fixed_dictionaries(
    {},
    optional={
        DESIRED_DRAIN: _values(
            ["", A, B, "uncordon-x", "hold-" + A, "hold-" + B, "hold-x\ny", "w-1", "drain-a\nb"]
        ),
        LAST_APPLIED_DRAIN: _values([A, B, PREV, "uncordon-x"]),
        HELD_DRAIN: _values([A, B, "uncordon-x", "x\ny", ""]),
        HOLD_REASONS: _values(["build-pod", "manual,noop-image", "bogus", ""]),
        HELD_SINCE: _values(
            [
                format_rfc3339(NOW - timedelta(minutes=1)),
                format_rfc3339(NOW - timedelta(minutes=44)),
                format_rfc3339(NOW - timedelta(hours=2)),
                format_rfc3339(NOW + timedelta(hours=1)),
                "garbage",
            ]
        ),
        HOLD_DETAIL: _values(["x", ""]),
        RELEASED: _values([A, B]),
        RELEASED_BY: _values(["kube:admin", "bad\nname"]),
        HOLD_REQUEST: _values(
            ["2026-03-01T13:00:00Z;two\nlines", "2026-03-01T11:00:00Z", "bad\nvalue"]
        ),
        DESIRED_IMAGE: _values([f"{IMAGE}@{D1}", f"{IMAGE}@{D2}", f"{IMAGE}:latest", "oci:/x"]),
    },
)
pod_sets = st.one_of(
    st.none(),
    st.lists(
        st.builds(
            Pod,
            st.just(MCO_NS),
            st.sampled_from(["build-a", "other"]),
            st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
            st.sampled_from([dict(BUILD.labels), {"app": "x"}]),
            st.just(()),
            st.booleans(),
        ),
        max_size=2,
    ).map(tuple),
)
booted_images = st.sampled_from([BOOTED, BootedImage(None, None, "ostree", "no ostree= argument")])

_MCO_OWNED = (LAST_APPLIED_DRAIN, DESIRED_IMAGE)
_WRITABLE = {annotation_path(k) for k in (DESIRED_DRAIN, *OWNED_KEYS, *RELEASED_KEYS)}


@settings(max_examples=400)
@given(annotation_maps, pod_sets, booted_images)
def test_invariants_on_random_nodes(
    before: dict[str, str], pods: tuple[Pod, ...] | None, booted: BootedImage
) -> None:
    decision = decide(view(before, pods, booted), GUARDS, MAX_HOLD)
    assert decision.explain()
    assert "\n" not in decision.explain()
    # The patch applies to the state it was decided on (its tests hold) ...
    after = apply(before, decision)
    # ... and writes only desiredDrain and the agent's own keys (invariant 3).
    for op in decision.patch:
        if op["op"] != "test":
            assert op["path"] in _WRITABLE
        if op["path"] == annotation_path(RELEASED_BY):
            assert op["op"] in ("test", "remove")  # the releaser's record: never the agent's
    for key in (*_MCO_OWNED, HOLD_REQUEST):
        assert after.get(key) == before.get(key)
    old = before.get(DESIRED_DRAIN)
    new = after.get(DESIRED_DRAIN)
    last = before.get(LAST_APPLIED_DRAIN)
    if new != old:
        assert new is not None
        # Invariant 1: never desiredDrain == lastAppliedDrain, except restoring a request the
        # MCC already completed (a lost race), where no drain is skipped.
        if new == last:
            assert isinstance(decision, Release)
            assert decision.outcome is Outcome.RACE_LOST
        # Invariant 3: only drain requests are held.
        if isinstance(decision, Hold):
            assert parse_drain_request(old).verb is Verb.DRAIN
            assert new == "hold-" + str(old)
            # Invariant 2: the request is kept in held-drain.
            assert after[HELD_DRAIN] == old
        else:
            # Invariant 2: a release restores exactly the request that was held.
            assert isinstance(decision, Release)
            assert old == "hold-" + new
            assert before[HELD_DRAIN] == new
            assert not any(k in after for k in OWNED_KEYS)
    if isinstance(decision, Foreign):
        assert decision.patch == ()
    # Decided again on the state it produced, the agent has nothing more to write.
    again = decide(view(after, pods, booted), GUARDS, MAX_HOLD)
    assert again.patch == (), (decision.explain(), again.explain())


@settings(max_examples=300)
@given(annotation_maps, pod_sets, booted_images)
def test_the_decisions_facts_agree_with_the_node(
    before: dict[str, str], pods: tuple[Pod, ...] | None, booted: BootedImage
) -> None:
    """What a decision says of itself (for /status, the log, the recheck) is what the Node
    shows: the request it is about, its status name, the hold it keeps."""
    decision = decide(view(before, pods, booted), GUARDS, MAX_HOLD)
    desired = before.get(DESIRED_DRAIN)
    assert decision.name in DECISIONS
    if decision.request is None:
        assert desired is None
    else:
        assert desired in (decision.request, "hold-" + decision.request)
    if decision.name in ("idle", "pass"):
        pending = desired != before.get(LAST_APPLIED_DRAIN)
        passes = parse_drain_request(desired).verb is Verb.DRAIN and pending
        assert decision.name == ("pass" if passes else "idle")
    if decision.blocks:
        assert decision.reasons == tuple(b.reason for b in decision.blocks)
    after = apply(before, decision)
    if decision.held_since is not None:
        try:
            record = read_hold(after)
        except UnreadableSince:
            record = None
        # The record it keeps; a held-since unreadable or in the future counts from now.
        assert decision.held_since in ((record.since if record else None), NOW)
    # What the write does to the hold (holds.applied tells it from these two facts alone).
    written, ended = decision.hold_written, decision.hold_ended
    if not decision.patch:
        assert (written, ended) == (None, None)
    starts = after.get(DESIRED_DRAIN) != desired and str(after.get(DESIRED_DRAIN)).startswith(
        "hold-"
    )
    assert starts == (written is not None and written.starts)
    if written is not None:
        assert after.get(DESIRED_DRAIN) == "hold-" + written.request
    if ended is not None and ended.record is not None:
        assert read_hold(after) != ended.record


@settings(max_examples=200)
@given(annotation_maps, pod_sets, booted_images)
@example(  # a hold beside another writer's released-by with no released marker
    before={
        HELD_DRAIN: "drain-rendered-worker-aaa",
        HOLD_REASONS: "build-pod",
        HELD_SINCE: "2026-03-01T11:59:00Z",
        DESIRED_DRAIN: "hold-drain-rendered-worker-aaa",
        DESIRED_IMAGE: f"{IMAGE}@{D1}",
        RELEASED_BY: "kube:admin",
    },
    pods=None,
    booted=BOOTED,
)
def test_no_agent_key_without_a_reason(
    before: dict[str, str], pods: tuple[Pod, ...] | None, booted: BootedImage
) -> None:
    """After the agent's writes settle, hold keys exist only beside a hold-… desiredDrain."""
    state = dict(before)
    for _ in range(3):
        decision = decide(view(state, pods, booted), GUARDS, MAX_HOLD)
        state = apply(state, decision)
    request = parse_drain_request(state.get(DESIRED_DRAIN))
    has_keys = any(k in state for k in OWNED_KEYS)
    if isinstance(decision, Wait):
        return  # waiting for data: a record is kept for the request it may hold again
    if request.verb is Verb.HOLD and state.get(HELD_DRAIN) != request.target:
        return  # a foreign hold: left alone
    assert has_keys == (request.verb is Verb.HOLD), state
    assert all(
        not k.startswith(DG_PREFIX) or k in (*OWNED_KEYS, *RELEASED_KEYS, HOLD_REQUEST)
        for k in state
    )
    # Who released never outlives the released marker it names.
    if RELEASED_BY in state:
        assert RELEASED in state, state
