"""The decision: given what the agent sees, what to write (pure: no I/O).

``decide()`` is the whole hold protocol of docs/protocol.md in one function: the
controller feeds it a ``NodeView`` and applies the patch of the ``Decision`` it returns
(if any), re-reading and deciding again when the patch's ``test`` operations fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

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
    hold_detail,
    let_go,
)
from drain_guard.guards import (
    Block,
    Guard,
    InvalidInput,
    NodeView,
    Unknown,
    Verdict,
    parse_hold_request,
)
from drain_guard.protocol import (
    DESIRED_DRAIN,
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_REQUEST,
    LAST_APPLIED_DRAIN,
    OWNED_KEYS,
    RELEASED,
    RELEASED_BY,
    RELEASED_KEYS,
    HoldRecord,
    MalformedHold,
    Outcome,
    Reason,
    UnreadableSince,
    Verb,
    cleanup_patch,
    format_rfc3339,
    hold_patch,
    later,
    parse_drain_request,
    read_hold,
    read_released_by,
    release_patch,
    repair_since_patch,
    update_hold_patch,
)

__all__ = ["CLOCK_SKEW", "NothingHeldError", "decide", "force_release", "stale_keys"]

#: How far in the future ``held-since`` may be before its age counts as unknown.
CLOCK_SKEW = timedelta(minutes=2)


def _present(annotations: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(k for k in (*OWNED_KEYS, *RELEASED_KEYS) if k in annotations)


def _stale_marker(
    annotations: Mapping[str, str], desired: str | None, *, rewritten: bool = False
) -> tuple[str, ...]:
    """The keys of the released marker that no longer apply: ``released`` of a request that
    is not ``desired`` any more (unless the agent is rewriting it, ``rewritten``), and
    ``released-by`` unless it goes with a current ``released`` that is kept."""
    released = annotations.get(RELEASED)
    current = released is not None and released == desired
    keys: tuple[str, ...] = ()
    if released is not None and not current and not rewritten:
        keys += (RELEASED,)
    if RELEASED_BY in annotations and (not current or rewritten):
        keys += (RELEASED_BY,)
    return keys


def _no_guard_blocks(verdicts: Sequence[Verdict]) -> str:
    """Why a drain goes: no guard blocks, and for a same-image drain let go because nothing
    will replace its target, why (the decision's log line says it, docs/protocol.md)."""
    return "; ".join(["no guard blocks", *let_go(verdicts)])


def _reasons(blocks: Sequence[Block]) -> str:
    return ",".join(b.reason.value for b in blocks)


def decide(view: NodeView, guards: Sequence[Guard], max_hold: timedelta) -> Decision:
    """Decide what to do about this node's drain request now (docs/protocol.md, the decision table).

    The decision's ``recheck_at`` is the next instant it could change with no new watch
    event (a hold's max-hold, a hold-request's expiry), so the controller need not poll.
    """
    decision = _decide(view, guards, max_hold)
    return replace(decision, recheck_at=_recheck_at(view, decision, max_hold))


def _recheck_at(view: NodeView, decision: Decision, max_hold: timedelta) -> datetime | None:
    times: list[datetime] = []
    if decision.held_since is not None:
        times.append(later(decision.held_since, max_hold))
    # A guard that blocks only until a moment (a build expected within seconds) is asked again
    # then.
    times.extend(v.until for v in decision.verdicts if isinstance(v, Block) and v.until)
    request = view.annotations.get(HOLD_REQUEST)
    if request is not None:
        try:
            expiry, _ = parse_hold_request(request)
        except ValueError:
            pass
        else:
            if expiry > view.now:
                times.append(expiry)
    future = [t for t in times if t > view.now]
    return min(future) if future else None


class NothingHeldError(ValueError):
    """A release was asked for, but desiredDrain does not carry a drain-guard hold."""


def force_release(
    annotations: Mapping[str, str],
    resource_version: str,
    outcome: Outcome,
    released_by: str | None = None,
) -> Release:
    """Release the hold now, whatever the guards say (operator release, uninstall).

    A manual release marks the request released so the agent does not hold it again, and
    records ``released_by`` (the releaser's name, when known) beside it.
    """
    desired = annotations.get(DESIRED_DRAIN)
    request = parse_drain_request(desired)
    held = annotations.get(HELD_DRAIN)
    if request.verb is not Verb.HOLD:
        raise NothingHeldError(f"nothing is held: desiredDrain is {desired or 'not set'!r}")
    if held != request.target:
        raise NothingHeldError(
            f"desiredDrain {desired!r} was not written by drain-guard "
            f"({HELD_DRAIN} is {held!r}); not touching it"
        )
    last_applied = annotations.get(LAST_APPLIED_DRAIN)
    try:
        record: HoldRecord | None = read_hold(annotations)
    except MalformedHold:
        record = None
    patch = release_patch(
        held,
        last_applied,
        resource_version,
        _present(annotations),
        mark_released=outcome.marks_released,
        released_by=released_by,
        allow_completed=held == last_applied,
    )
    return Release(held, outcome, f"{outcome} release", tuple(patch), record)


def stale_keys(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """drain-guard's keys on a Node without a hold that nothing needs any more.

    Left by a hold that was superseded or released by hand while no agent ran, or a
    ``released`` (and its ``released-by``) of a request that moved on. A record of the
    request that is in ``desiredDrain`` again is not stale: the agent resumes that hold with
    its age.
    """
    desired = annotations.get(DESIRED_DRAIN)
    if parse_drain_request(desired).verb is Verb.HOLD:
        return ()
    keys = tuple(k for k in OWNED_KEYS if k in annotations)
    if keys and annotations.get(HELD_DRAIN) == desired:
        try:
            if read_hold(annotations) is not None:
                keys = ()
        except MalformedHold:
            pass
    return keys + _stale_marker(annotations, desired)


def _decide(view: NodeView, guards: Sequence[Guard], max_hold: timedelta) -> Decision:
    annotations = view.annotations
    desired = annotations.get(DESIRED_DRAIN)
    request = parse_drain_request(desired)
    record, malformed, repaired = _read_record(annotations, view.now, view.known_hold)
    # Every guard speaks on every pass, whether or not a request waits: the decision carries
    # what each saw (build pods, image digests, malformed input) for /status and the metrics.
    verdicts = tuple(guard.check(view) for guard in guards)
    if request.verb is Verb.HOLD:
        return _decide_held(view, verdicts, max_hold, request.target, record, malformed, repaired)
    return _decide_unheld(view, verdicts, max_hold, record, malformed, repaired)


def _read_record(
    annotations: Mapping[str, str], now: datetime, known: HoldRecord | None
) -> tuple[HoldRecord | None, str | None, InvalidInput | None]:
    """The hold record, why it is unreadable, and its ``held-since`` if that was repaired.

    The hold the agent knows (``known``: it held or found it earlier) is aged by the agent's
    monotonic clock, its ``held-since`` put on today's wall clock: for it, that start counts,
    not the Node's, so a step of the wall clock neither shortens nor lengthens the hold
    (issue 35 F2). A ``held-since`` that cannot be read or lies beyond the clock skew in the
    future is not a reason to give the hold up (issue 27): it is rewritten to the known start,
    else to ``now`` (a hold this agent did not see begin: only its record could say when),
    which keeps ``--max-hold`` bounding it; the value is reported.
    """
    try:
        record = read_hold(annotations)
    except UnreadableSince as err:
        record, why, value = err.record(now), str(err), err.value
    except MalformedHold as err:
        return None, str(err), None
    else:
        if record is None:
            return None, None, None
        if record.age(now) >= -CLOCK_SKEW:
            since = _known_since(known, record.held_drain, now)
            return (record if since is None else replace(record, since=since)), None, None
        why = f"{HELD_SINCE} is in the future (more than {_minutes(CLOCK_SKEW)} ahead)"
        value = annotations[HELD_SINCE]
    since = _known_since(known, record.held_drain, now) or now
    why = f"{why}; the hold is kept, its age counted from {format_rfc3339(since)}"
    return replace(record, since=since), None, InvalidInput.of("annotation", HELD_SINCE, value, why)


def _same_second(written: datetime | None, expires: datetime) -> bool:
    """Whether ``hold-expires`` says ``expires`` as the record can (whole seconds): a known
    start with a fraction of a second is no reason to write it again."""
    return written is not None and format_rfc3339(written) == format_rfc3339(expires)


def _known_since(known: HoldRecord | None, held_drain: str, now: datetime) -> datetime | None:
    """When the hold of ``held_drain`` began, as the agent knows it (never in the future)."""
    if known is None or known.held_drain != held_drain or known.since > now:
        return None
    return known.since


def _split(verdicts: tuple[Verdict, ...]) -> tuple[tuple[Block, ...], tuple[Unknown, ...]]:
    blocks = tuple(v for v in verdicts if isinstance(v, Block))
    unknowns = tuple(v for v in verdicts if isinstance(v, Unknown))
    return blocks, unknowns


def _decide_held(
    view: NodeView,
    verdicts: tuple[Verdict, ...],
    max_hold: timedelta,
    original: str,
    record: HoldRecord | None,
    malformed: str | None,
    repaired: InvalidInput | None,
) -> Decision:
    annotations = view.annotations
    value = annotations[DESIRED_DRAIN]
    held = annotations.get(HELD_DRAIN)
    if held is None:
        return Foreign(value, f"no {HELD_DRAIN}: drain-guard did not write this hold", verdicts)
    if held != original:
        return Foreign(value, f"{HELD_DRAIN} is {held!r}, not {original!r}", verdicts)
    last_applied = annotations.get(LAST_APPLIED_DRAIN)

    def release(outcome: Outcome, why: str) -> Release:
        patch = release_patch(
            original,
            last_applied,
            view.resource_version,
            _present(annotations),
            mark_released=outcome.marks_released,
            allow_completed=outcome is Outcome.RACE_LOST,
        )
        return Release(original, outcome, why, tuple(patch), record, verdicts)

    if last_applied == original:
        # The MCC finished a drain it had started before the hold; the MCD is only waiting
        # for desiredDrain to say so. Holding on would leave it stuck behind a done drain.
        return release(Outcome.RACE_LOST, "the MCC completed this drain before the hold")
    if malformed is not None or record is None:
        return release(Outcome.INVALID, f"hold record unreadable: {malformed}")
    if parse_drain_request(original).verb is not Verb.DRAIN:
        return release(Outcome.INVALID, f"{original!r} is not a drain request")
    age = record.age(view.now)
    if age >= max_hold:
        return release(Outcome.EXPIRED, f"held for {_minutes(age)}, max-hold {_minutes(max_hold)}")
    blocks, unknowns = _split(verdicts)
    repair = repaired is not None
    # The record says when the hold ends: an older agent's record, or one of another
    # --max-hold, is given this agent's (which is the one that ends it).
    expires = later(record.since, max_hold)
    if blocks:
        blocks = _capped(blocks, annotations, record.since, max_hold)
        same = (
            _reasons(blocks) == ",".join(record.reasons)
            and not record.unknown_reasons
            and hold_detail(blocks) == record.detail
            and _same_second(record.expires, expires)
        )
        # A released-by with no released marker names no release: another writer's leftover.
        stray = (RELEASED_BY,) if RELEASED_BY in annotations and RELEASED not in annotations else ()
        if same and not repair and not stray:
            return Keep(record, blocks, verdicts)
        reasons, detail = (b.reason for b in blocks), hold_detail(blocks)
        patch = update_hold_patch(
            record,
            reasons,
            detail,
            expires,
            seen=annotations,
            resource_version=view.resource_version,
            repair_since=repair,
            remove=stray,
        )
        return UpdateHold(record, blocks, tuple(patch), verdicts, since_repaired=repaired)
    if unknowns:
        patch = repair_since_patch(
            record, expires, seen=annotations, resource_version=view.resource_version
        )
        return Wait(unknowns, record, original, verdicts, tuple(patch if repair else ()), repaired)
    return release(Outcome.SAFE, _no_guard_blocks(verdicts))


def _decide_unheld(
    view: NodeView,
    verdicts: tuple[Verdict, ...],
    max_hold: timedelta,
    record: HoldRecord | None,
    malformed: str | None,
    repaired: InvalidInput | None,
) -> Decision:
    annotations = view.annotations
    desired = annotations.get(DESIRED_DRAIN)
    request = parse_drain_request(desired)
    last_applied = annotations.get(LAST_APPLIED_DRAIN)
    released = annotations.get(RELEASED)

    by, by_invalid = _releaser(annotations, desired)
    why = _not_holdable(request.verb, desired, last_applied, released, by)
    same = record is not None and record.held_drain == desired
    ran_out = False
    if why is None and record is not None and same and record.age(view.now) >= max_hold:
        # Marked released below, so that the request is not held afresh afterwards.
        why = f"its earlier hold (since {format_rfc3339(record.since)}) has run out"
        ran_out = True
    if why is None:
        assert desired is not None
        blocks, unknowns = _split(verdicts)
        if blocks:
            since = record.since if record is not None and same else view.now
            blocks = _capped(blocks, annotations, since, max_hold)
            stale = tuple(k for k in RELEASED_KEYS if k in annotations)
            patch = hold_patch(
                desired,
                last_applied,
                view.resource_version,
                (b.reason for b in blocks),
                since,
                hold_detail(blocks),
                expires=later(since, max_hold),
                remove=stale,
            )
            superseded = record if record is not None and not same else None
            repair = repaired if same else None
            return Hold(desired, blocks, since, tuple(patch), verdicts, superseded, same, repair)
        if unknowns:
            # Nothing is held or written: a record whose held-since was repaired carries no
            # start to count from (it may be this pass's now, which would move the recheck
            # on with every pass); the hold, taken again, says when it began.
            return Wait(unknowns, record if repaired is None else None, desired, verdicts)
        why = _no_guard_blocks(verdicts)

    stale_keys = tuple(k for k in OWNED_KEYS if k in annotations)
    stale_keys += _stale_marker(annotations, desired, rewritten=ran_out)
    passes = request.verb is Verb.DRAIN and desired != last_applied
    if not stale_keys:
        return Idle(why, verdicts, request=desired, passes=passes, released_by_invalid=by_invalid)
    outcome: Outcome | None
    if record is None:
        outcome = None
        ended = f"unreadable hold record ({malformed})" if malformed else "stale keys"
    elif same:
        outcome = Outcome.EXPIRED if ran_out else Outcome.SAFE
        ended = f"hold of {record.held_drain} ended"
    else:
        outcome, ended = Outcome.SUPERSEDED, f"hold of {record.held_drain} superseded"
    if not any(k in OWNED_KEYS for k in stale_keys):
        outcome, ended = None, f"{desired or 'no request'} replaced the released request"
    mark = desired if ran_out else None
    patch = cleanup_patch(desired, annotations, stale_keys, mark_released=mark)
    why = f"{ended}; {why}"
    return CleanUp(stale_keys, why, tuple(patch), record, outcome, verdicts, desired, passes)


def _capped(
    blocks: tuple[Block, ...], annotations: Mapping[str, str], since: datetime, max_hold: timedelta
) -> tuple[Block, ...]:
    """The blocks of a hold since ``since``; a hold-request that outlasts max-hold says that
    the hold ends sooner (an operator's "until 9999" is held for max-hold, not forever)."""
    ends = later(since, max_hold)
    capped = []
    for block in blocks:
        if block.reason is Reason.MANUAL:
            try:
                expiry, _ = parse_hold_request(annotations.get(HOLD_REQUEST, ""))
            except ValueError:
                expiry = ends  # not this guard's Block: leave it as it is
            if expiry > ends:
                note = f"(beyond max-hold: held until {format_rfc3339(ends)} at most)"
                block = replace(block, detail=f"{block.detail} {note}")
        capped.append(block)
    return tuple(capped)


def _releaser(
    annotations: Mapping[str, str], desired: str | None
) -> tuple[str | None, InvalidInput | None]:
    """Who released ``desired`` by hand (``released-by`` beside a ``released`` of it), and
    the value as invalid input when it cannot be one (it is then not shown)."""
    if desired is None or annotations.get(RELEASED) != desired:
        return None, None
    try:
        return read_released_by(annotations), None
    except MalformedHold as err:
        return None, InvalidInput.of("annotation", RELEASED_BY, annotations[RELEASED_BY], str(err))


def _not_holdable(
    verb: Verb,
    desired: str | None,
    last_applied: str | None,
    released: str | None,
    released_by: str | None,
) -> str | None:
    """Why this request must not be held, or None if the guards may hold it."""
    if verb is Verb.NONE:
        return "no drain request"
    if verb is Verb.UNCORDON:
        return f"{desired} is an uncordon: never held"
    if verb is not Verb.DRAIN:
        return f"{desired!r} is not a drain request"
    if desired == last_applied:
        return f"{desired} is already applied"
    if released == desired:
        if released_by is not None:
            return f"{desired} was released by {released_by} and is not held again"
        return f"{desired} was released earlier and is not held again"
    return None


def _minutes(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 60:.1f} min"
