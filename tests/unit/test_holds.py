"""holds.py: every transition of a hold's life, from the memory and the Node, in-process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from drain_guard import guards, protocol
from drain_guard.decision import decisions, holds
from drain_guard.decision.decide import decide as decide_now
from drain_guard.decision.decide import force_release
from drain_guard.decision.holds import (
    RACE_REACH,
    Began,
    Ended,
    Found,
    Memory,
    RaceEvidence,
    RaceLost,
    Requested,
    Resumed,
    Updated,
    applied,
    observe,
)
from drain_guard.protocol import (
    DESIRED_DRAIN,
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_DETAIL,
    HOLD_REASONS,
    HOLD_REQUEST,
    LAST_APPLIED_DRAIN,
    HoldRecord,
    Outcome,
    Reason,
    Verb,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MAX_HOLD = timedelta(minutes=45)
B, C = "drain-rendered-worker-b", "drain-rendered-worker-c"
UNCORDON_A = "uncordon-rendered-worker-a"
MANUAL = f"{protocol.format_rfc3339(NOW + timedelta(hours=1))};maintenance"


def held(request: str, since: datetime = NOW, detail: str = "manual: x") -> dict[str, str]:
    """The hold record keys of a hold of ``request``."""
    return {
        HELD_DRAIN: request,
        HOLD_REASONS: "manual",
        HELD_SINCE: protocol.format_rfc3339(since),
        HOLD_DETAIL: detail,
    }


def record(request: str, since: datetime = NOW, detail: str = "manual: x") -> HoldRecord:
    return HoldRecord(request, (Reason.MANUAL,), since, detail)


def holding(request: str, **extra: str) -> dict[str, str]:
    """A Node with ``request`` held by drain-guard."""
    return {
        DESIRED_DRAIN: "hold-" + request,
        LAST_APPLIED_DRAIN: UNCORDON_A,
        **held(request),
        **extra,
    }


def decide(annotations: dict[str, str], now: datetime = NOW) -> decisions.Decision:
    view = guards.NodeView(
        "worker-0", annotations, (), guards.BootedImage(None, None, "test"), now, "7"
    )
    return decide_now(view, (guards.ManualGuard(),), MAX_HOLD)


def after(decision: decisions.Decision, annotations: dict[str, str]) -> dict[str, str]:
    """The annotations once ``decision``'s patch is applied (adds and removes only)."""
    out = dict(annotations)
    prefix = "/metadata/annotations/"
    for op in decision.patch:
        if not op["path"].startswith(prefix):
            continue
        key = op["path"][len(prefix) :].replace("~1", "/").replace("~0", "~")
        if op["op"] == "add":
            out[key] = op["value"]
        elif op["op"] == "remove":
            del out[key]
    return out


def apply(memory: Memory, annotations: dict[str, str], *, cordoned: bool = False) -> holds.Change:
    decision = decide(annotations)
    assert decision.patch, decision
    return applied(
        memory,
        decision,
        cordoned=cordoned,
        after=after(decision, annotations),
        now=NOW + timedelta(minutes=5),
        monotonic=102.5,
    )


# --- observe: new requests --------------------------------------------------------------


def test_a_request_pending_at_start_is_counted_and_an_applied_one_is_not() -> None:
    pending = observe(
        Memory(),
        {DESIRED_DRAIN: B, LAST_APPLIED_DRAIN: UNCORDON_A},
        now=NOW,
        monotonic=1,
        seen_at=1,
    )
    assert pending.transitions == (Requested(Verb.DRAIN),)
    assert (pending.memory.request, pending.memory.request_seen_at) == (B, 1)
    done = observe(
        Memory(), {DESIRED_DRAIN: B, LAST_APPLIED_DRAIN: B}, now=NOW, monotonic=1, seen_at=1
    )
    assert done.transitions == ()
    assert done.memory.observed


def test_a_hold_value_is_counted_only_when_someone_else_writes_it_while_the_agent_runs() -> None:
    foreign = {DESIRED_DRAIN: "hold-" + B, LAST_APPLIED_DRAIN: UNCORDON_A}  # no record
    assert observe(Memory(), foreign, now=NOW, monotonic=1, seen_at=1).transitions == ()
    start = observe(
        Memory(), {LAST_APPLIED_DRAIN: UNCORDON_A}, now=NOW, monotonic=1, seen_at=1
    ).memory
    assert observe(start, foreign, now=NOW, monotonic=2, seen_at=2).transitions == (
        Requested(Verb.HOLD),
    )


def test_a_new_value_is_counted_once_whatever_its_verb() -> None:
    start = observe(Memory(), {}, now=NOW, monotonic=1, seen_at=1).memory
    assert start.observed
    later = observe(
        start,
        {DESIRED_DRAIN: UNCORDON_A, LAST_APPLIED_DRAIN: UNCORDON_A},
        now=NOW,
        monotonic=2,
        seen_at=2,
    )
    assert later.transitions == (Requested(Verb.UNCORDON),)
    again = observe(later.memory, {DESIRED_DRAIN: UNCORDON_A}, now=NOW, monotonic=3, seen_at=3)
    assert again.transitions == ()
    assert again.memory.request_seen_at == 2  # when the request came, not the last event


# --- observe: someone else's writes end, resume or reveal a hold ------------------------


def _knowing(request: str) -> Memory:
    return Memory(hold=record(request), request="hold-" + request, observed=True)


def test_the_mcds_newer_request_over_the_hold_supersedes_it() -> None:
    for newer in (C, UNCORDON_A):
        change = observe(
            _knowing(B),
            {DESIRED_DRAIN: newer, **held(B)},
            now=NOW + timedelta(minutes=3),
            monotonic=5,
            seen_at=5,
        )
        assert change.transitions == (
            Requested(protocol.parse_drain_request(newer).verb),
            Ended(record(B), Outcome.SUPERSEDED, newer, timedelta(minutes=3)),
        )
        assert change.memory.hold is None
        assert change.memory.last_ended == record(B)


def test_the_held_request_restored_by_someone_else_is_a_manual_end() -> None:
    # drain-guard release: the request restored, the record removed, released marked.
    change = observe(
        _knowing(B), {DESIRED_DRAIN: B, protocol.RELEASED: B}, now=NOW, monotonic=5, seen_at=5
    )
    assert change.transitions[-1] == Ended(record(B), Outcome.MANUAL, B, timedelta(0))


def test_the_mcd_writing_the_held_request_again_is_not_an_end() -> None:
    change = observe(_knowing(B), {DESIRED_DRAIN: B, **held(B)}, now=NOW, monotonic=5, seen_at=5)
    assert not [t for t in change.transitions if isinstance(t, Ended)]
    assert change.memory.hold == record(B)  # decide() holds it again: Resumed, below


def test_a_hold_on_the_node_unknown_to_the_agent_is_found_not_requested() -> None:
    """At start, a hold- value is drain-guard's own earlier write: its request was counted
    when it came, so the hold is found, not counted as a new request (docs/metrics.md)."""
    change = observe(Memory(), holding(B), now=NOW, monotonic=1, seen_at=1)
    assert change.transitions == (Found(record(B)),)
    assert change.memory.hold == record(B)
    assert observe(change.memory, holding(B), now=NOW, monotonic=2, seen_at=2).transitions == ()


def test_a_hold_the_agent_knows_and_sees_changes_nothing() -> None:
    assert observe(_knowing(B), holding(B), now=NOW, monotonic=2, seen_at=2).transitions == ()


def test_a_record_that_is_not_in_force_is_not_found() -> None:
    # The keys are there but desiredDrain is not hold-<held-drain>: not a hold in force.
    assert holds.hold_on({DESIRED_DRAIN: C, **held(B)}) is None
    assert holds.hold_on({DESIRED_DRAIN: "hold-" + B, HELD_DRAIN: B}) is None  # malformed
    assert (
        observe(
            Memory(), {DESIRED_DRAIN: C, **held(B)}, now=NOW, monotonic=1, seen_at=1
        ).memory.hold
        is None
    )


# --- applied: the agent's own writes ----------------------------------------------------


def _pending(**extra: str) -> dict[str, str]:
    return {DESIRED_DRAIN: B, LAST_APPLIED_DRAIN: UNCORDON_A, HOLD_REQUEST: MANUAL, **extra}


def test_a_new_hold_begins_timed_from_the_requests_arrival() -> None:
    seen = observe(Memory(), _pending(), now=NOW, monotonic=100.0, seen_at=100.0).memory
    change = apply(seen, _pending())
    [began] = change.transitions
    assert isinstance(began, Began)
    assert (began.request, began.reasons, began.since) == (B, ("manual",), NOW)
    assert began.reaction_seconds == 2.5
    assert change.memory.hold is not None
    assert change.memory.hold.held_drain == B
    # Our own write is not a new request when the watch shows it.
    assert (
        observe(
            change.memory,
            after(decide(_pending()), _pending()),
            now=NOW,
            monotonic=103,
            seen_at=103,
        ).transitions
        == ()
    )


def test_a_hold_written_after_the_cordon_is_a_lost_race() -> None:
    seen = observe(Memory(), _pending(), now=NOW, monotonic=100.0, seen_at=100.0).memory
    change = apply(seen, _pending(), cordoned=True)
    assert [type(t) for t in change.transitions] == [Began, RaceLost]
    assert change.transitions[1] == RaceLost(B)


def test_the_held_request_written_again_is_held_again_as_the_same_hold() -> None:
    since = NOW - timedelta(minutes=10)
    node = {**_pending(), **held(B, since)}  # the MCD wrote B over hold-B; the record stayed
    memory = observe(Memory(hold=record(B, since)), node, now=NOW, monotonic=1, seen_at=1).memory
    change = apply(memory, node)
    [resumed] = change.transitions
    assert isinstance(resumed, Resumed)
    assert (resumed.request, resumed.since) == (B, since)


def test_a_hold_superseded_while_no_agent_ran_ends_before_the_new_one_begins() -> None:
    node = {**_pending(**{DESIRED_DRAIN: C}), **held(B)}
    memory = observe(Memory(), node, now=NOW, monotonic=1, seen_at=1).memory
    change = apply(memory, node)
    assert [type(t) for t in change.transitions] == [Ended, Began]
    assert change.transitions[0] == Ended(record(B), Outcome.SUPERSEDED, C, timedelta(minutes=5))
    assert change.memory.last_ended == record(B)


def test_a_superseded_hold_seen_live_is_not_ended_twice() -> None:
    node = {**_pending(**{DESIRED_DRAIN: C}), **held(B)}
    seen = observe(_knowing(B), node, now=NOW, monotonic=1, seen_at=1)
    assert isinstance(seen.transitions[-1], Ended)
    assert [type(t) for t in apply(seen.memory, node).transitions] == [Began]


def test_changed_reasons_update_the_hold() -> None:
    node = holding(B, **{HOLD_REQUEST: MANUAL})  # the detail on the Node is stale
    change = apply(_knowing(B), node)
    [updated] = change.transitions
    assert isinstance(updated, Updated)
    assert (updated.request, updated.since) == (B, NOW)
    assert "maintenance" in updated.detail


def test_a_release_ends_the_hold_with_its_outcome() -> None:
    cases = {
        Outcome.SAFE: holding(B),  # no guard blocks any more
        Outcome.EXPIRED: {**holding(B), **held(B, NOW - MAX_HOLD - timedelta(minutes=1))},
        Outcome.RACE_LOST: holding(B, **{LAST_APPLIED_DRAIN: B}),
    }
    for outcome, node in cases.items():
        memory = observe(_knowing(B), node, now=NOW, monotonic=1, seen_at=1).memory
        change = apply(memory, node)
        ended, *lost = change.transitions
        # The MCC completed the held request's drain: it began before the hold took effect.
        drained = [RaceLost(B, RaceEvidence.DRAINED)] if outcome is Outcome.RACE_LOST else []
        assert lost == drained
        assert isinstance(ended, Ended)
        assert (ended.outcome, ended.desired) == (outcome, B)
        assert change.memory.hold is None


def test_an_uninstall_release_ends_the_hold_as_uninstall() -> None:
    node = holding(B)
    release = force_release(node, "7", Outcome.UNINSTALL)
    change = applied(
        _knowing(B), release, cordoned=False, after=after(release, node), now=NOW, monotonic=0
    )
    assert change.transitions == (Ended(record(B), Outcome.UNINSTALL, B, timedelta(0)),)


def test_an_unreadable_record_released_as_invalid_ends_the_hold_the_agent_knew() -> None:
    node = {**holding(B), HOLD_REASONS: "sun_spots"}
    change = apply(_knowing(B), node)
    assert change.transitions == (Ended(record(B), Outcome.INVALID, B, timedelta(minutes=5)),)
    # Without a record anywhere there is no hold to end.
    assert apply(Memory(observed=True), node).transitions == ()


def test_a_clean_up_of_a_hold_that_ended_while_no_agent_ran_ends_it_once() -> None:
    node = {DESIRED_DRAIN: C, LAST_APPLIED_DRAIN: UNCORDON_A, **held(B)}  # C: no guard blocks
    change = apply(observe(Memory(), node, now=NOW, monotonic=1, seen_at=1).memory, node)
    assert change.transitions == (Ended(record(B), Outcome.SUPERSEDED, C, timedelta(minutes=5)),)
    # Seen live first (observe ended it), the clean-up counts nothing more.
    seen = observe(_knowing(B), node, now=NOW, monotonic=1, seen_at=1)
    assert apply(seen.memory, node).transitions == ()


def test_a_clean_up_of_a_stale_released_marker_ends_nothing() -> None:
    node = {DESIRED_DRAIN: C, LAST_APPLIED_DRAIN: UNCORDON_A, protocol.RELEASED: B}
    assert (
        apply(observe(Memory(), node, now=NOW, monotonic=1, seen_at=1).memory, node).transitions
        == ()
    )


def test_a_hold_whose_held_since_turns_unreadable_is_not_ended_but_repaired() -> None:
    """Issue 27: a bad held-since under a hold the agent knows is still that hold; observe()
    ends nothing, decide() rewrites held-since (to its now) and the hold is updated."""
    node = holding(B, **{HOLD_REQUEST: MANUAL, HELD_SINCE: "whenever"})
    seen = observe(_knowing(B), node, now=NOW, monotonic=1, seen_at=1)
    assert seen.transitions == ()
    assert seen.memory.hold == record(B)
    change = apply(seen.memory, node)
    [updated] = change.transitions
    assert isinstance(updated, Updated)
    assert updated.since == NOW  # decide()'s now in these tests
    assert change.memory.hold is not None
    assert change.memory.hold.since == NOW


def test_an_unanswered_release_committed_later_ends_the_hold_as_its_own_outcome() -> None:
    """Issue 35 F3: an expiry release answered 504 (an etcd freeze) committed later; the
    agent then saw the request restored and counted an operator's release (manual), and
    DrainGuardHoldExpired never fired. The Node shows what the agent's release writes:
    the end is that release's. Anything else the Node shows is still someone else's."""
    expired = {**holding(B), **held(B, NOW - MAX_HOLD - timedelta(minutes=1))}
    release = decide(expired)
    assert isinstance(release, decisions.Release)
    assert release.outcome is Outcome.EXPIRED
    memory = holds.attempted(
        observe(_knowing(B), expired, now=NOW, monotonic=1, seen_at=1).memory, release
    )
    landed = after(release, expired)
    change = observe(memory, landed, now=NOW, monotonic=2, seen_at=2)
    [ended] = [t for t in change.transitions if isinstance(t, Ended)]
    assert (ended.outcome, ended.released_by) == (Outcome.EXPIRED, None)
    assert change.memory.releasing is None
    # An operator's release names who released: theirs, even with ours unanswered.
    by_hand = {**landed, protocol.RELEASED_BY: "alice"}
    [ended] = [
        t
        for t in observe(memory, by_hand, now=NOW, monotonic=2, seen_at=2).transitions
        if isinstance(t, Ended)
    ]
    assert (ended.outcome, ended.released_by) == (Outcome.MANUAL, "alice")
    # A safe release writes no released marker: a marked restore is not it.
    safe = decide(holding(B))
    assert isinstance(safe, decisions.Release)
    assert safe.outcome is Outcome.SAFE
    memory = holds.attempted(memory, safe)
    marked = observe(
        memory, {DESIRED_DRAIN: B, protocol.RELEASED: B}, now=NOW, monotonic=2, seen_at=2
    )
    assert [t.outcome for t in marked.transitions if isinstance(t, Ended)] == [Outcome.MANUAL]
    unmarked = observe(memory, after(safe, holding(B)), now=NOW, monotonic=2, seen_at=2)
    assert [t.outcome for t in unmarked.transitions if isinstance(t, Ended)] == [Outcome.SAFE]
    # A write of ours that landed settles it.
    assert apply(memory, holding(B)).memory.releasing is None


def test_the_known_hold_is_aged_by_the_monotonic_clock_whatever_the_wall_clock_does() -> None:
    """Issue 35 F2: the hold's start moves with a step of the wall clock (whole seconds: the
    two clocks, read a moment apart, differ by microseconds and that moves nothing)."""
    found = observe(Memory(), holding(B), now=NOW, monotonic=100.0, seen_at=99.0).memory
    later = NOW + timedelta(minutes=10)
    assert holds.known_hold(found, later, 100.0 + 600.000001) == record(B)
    assert holds.known_hold(found, later - timedelta(minutes=4), 700.0) == record(
        B, NOW - timedelta(minutes=4)
    )
    # A record from the future is known from when the agent saw it, no later.
    ahead = {**holding(B), **held(B, NOW + timedelta(minutes=5))}
    seen = observe(Memory(), ahead, now=NOW, monotonic=100.0, seen_at=99.0).memory
    assert holds.known_hold(seen, later, 700.0) == record(B, NOW)


def test_an_ended_hold_pends_with_its_request_until_desired_drain_moves_on() -> None:
    """What noop-image's expected wait counts from (Memory.pending_end): a hold released while
    its request stays in desiredDrain is still that request's wait, at the earliest start of
    its holds; once desiredDrain moves on, the same request written again is a new wait."""
    early = NOW - timedelta(minutes=9)
    first = {**holding(B), **held(B, early)}
    released = apply(observe(_knowing(B), first, now=NOW, monotonic=1, seen_at=1).memory, first)
    assert released.memory.pending_end == record(B, early)
    pending = {DESIRED_DRAIN: B, LAST_APPLIED_DRAIN: UNCORDON_A}
    again = observe(released.memory, pending, now=NOW, monotonic=2, seen_at=2).memory
    assert again.pending_end == record(B, early)
    # Held again (another reason, say) and released again: the first start still counts.
    rehold = observe(again, holding(B), now=NOW, monotonic=3, seen_at=3).memory
    twice = apply(rehold, holding(B)).memory
    assert twice.pending_end == record(B, early)
    drained = {DESIRED_DRAIN: B, LAST_APPLIED_DRAIN: B}
    assert observe(twice, drained, now=NOW, monotonic=4, seen_at=4).memory.pending_end
    moved = {DESIRED_DRAIN: "uncordon-rendered-worker-b", LAST_APPLIED_DRAIN: B}
    assert observe(twice, moved, now=NOW, monotonic=5, seen_at=5).memory.pending_end is None
    newer = {DESIRED_DRAIN: C, **held(B)}
    assert observe(_knowing(B), newer, now=NOW, monotonic=6, seen_at=6).memory.pending_end is None


def test_a_cordon_just_after_the_hold_is_a_lost_race_counted_once() -> None:
    """The drain controller acts on no hold- value: a cordon that comes just after the
    agent's hold on a schedulable Node is its sync that read the request before the hold.
    Counted once, however the race shows again (the drain completed: released race-lost); a
    cordon later than RACE_REACH (an operator's) is not counted."""
    seen = observe(Memory(), _pending(), now=NOW, monotonic=100.0, seen_at=100.0).memory
    began = apply(seen, _pending())
    assert [type(t) for t in began.transitions] == [Began]
    on_node = after(decide(_pending()), _pending())
    cordon = observe(began.memory, on_node, now=NOW, monotonic=103.0, seen_at=103.0, cordoned=True)
    assert cordon.transitions == (RaceLost(B, RaceEvidence.CORDONED_AFTER),)
    again = observe(cordon.memory, on_node, now=NOW, monotonic=104, seen_at=104, cordoned=True)
    assert again.transitions == ()
    drained = {**on_node, LAST_APPLIED_DRAIN: B}
    memory = observe(again.memory, drained, now=NOW, monotonic=105, seen_at=105).memory
    assert [type(t) for t in apply(memory, drained).transitions] == [Ended]
    late = observe(
        began.memory,
        on_node,
        now=NOW,
        monotonic=102.5 + RACE_REACH + 1,
        seen_at=102.5 + RACE_REACH + 1,
        cordoned=True,
    )
    assert late.transitions == ()
