"""A hold's life as the agent tells it: begun, found, resumed, updated, ended and how (pure).

The Node carries the hold (docs/protocol.md); what the agent keeps between passes is only
``Memory``: the hold it last knew on the Node, the last hold it counted as ended (an end is
counted once, however it is seen), the reasons the hold was counted under (each once), and
the drain request it last saw (a new one is counted, and timed for the reaction histogram).
Two functions turn that memory and the Node into what happened: ``observe()`` before each
decision, on the Node as the watch shows it (someone else's writes: the MCD's newer request,
an operator's release), and ``applied()`` after the agent's own write, on the decision and
the Node before and after it. The controller applies the ``Transition``s they return
(metrics, Events, log lines) and keeps the new memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from drain_guard.decision import decisions
from drain_guard.decision.decisions import HoldWrite
from drain_guard.protocol import (
    DESIRED_DRAIN,
    HELD_DRAIN,
    HOLD_PREFIX,
    LAST_APPLIED_DRAIN,
    RELEASED,
    RELEASED_BY,
    HoldRecord,
    MalformedHold,
    Outcome,
    Verb,
    parse_drain_request,
    read_hold,
    releaser_of,
)

__all__ = [
    "RACE_REACH",
    "Began",
    "Change",
    "Ended",
    "Found",
    "Memory",
    "RaceEvidence",
    "RaceLost",
    "Requested",
    "Resumed",
    "Transition",
    "Updated",
    "applied",
    "attempted",
    "hold_on",
    "known_hold",
    "observe",
]


#: How soon (seconds) after the agent wrote a hold on a schedulable Node a cordon counts as
#: the MCC's lost race: the drain controller acts on no ``hold-`` value, so a cordon then comes
#: from a sync that read the request before the hold took effect, and that sync cordons in its
#: next calls (MCO retries a failed cordon 10 s later). An operator's cordon that close is
#: counted too; a later one is not.
RACE_REACH = 30.0


@dataclass(frozen=True)
class Memory:
    """What the agent knows between passes that the Node does not say."""

    #: The hold as this agent last knew it on the Node (written, resumed, or found).
    hold: HoldRecord | None = None
    #: The last hold counted as ended, so that an end seen twice is counted once.
    last_ended: HoldRecord | None = None
    #: The hold the agent saw end while its request stays in ``desiredDrain`` (released, and
    #: MCO not past it yet), at the start of the request's first hold: the same wait, which
    #: noop-image's ``expected`` does not start again. None once ``desiredDrain`` moves on:
    #: the same request written later (a revert X→Y→X, or a config requested again) is a new
    #: wait, keyed by this, not by its name.
    pending_end: HoldRecord | None = None
    #: The ``desiredDrain`` value last seen, and when (monotonic seconds) it was delivered.
    request: str | None = None
    request_seen_at: float = 0.0
    #: False until the first Node was seen: the request found at start is not new to anyone.
    observed: bool = False
    #: The reasons the current hold was counted under (``drain_guard_holds_total``): a hold
    #: counts once under each of its reasons, a reason gained later too, none twice.
    counted: frozenset[str] = frozenset()
    #: A release the agent sent whose fate it does not know (no answer, or a 5xx: the API
    #: server may commit it after all): its request and outcome. Should the hold then end
    #: just as that release would have ended it, the end is that release's, not an
    #: operator's (issue 35 F3).
    releasing: tuple[str, Outcome] | None = None
    #: When the agent came to know ``hold``, by the monotonic clock and the wall clock read
    #: together: from then on the hold's age is counted by the monotonic clock, which no step
    #: of the wall clock moves (issue 35 F2). None without a hold.
    anchor: tuple[float, datetime] | None = None
    #: The request the agent held on a schedulable Node, and when (monotonic), for
    #: ``RACE_REACH``: a cordon seen by then is the MCC's lost race.
    race_window: tuple[str, float] | None = None
    #: The request whose lost race was counted: once per request, however it shows.
    race_lost: str | None = None


@dataclass(frozen=True)
class Requested:
    """A new drain request appeared (``drain_guard_drain_requests_total``)."""

    verb: Verb


@dataclass(frozen=True)
class _Holding:
    """A hold in force after the agent's write: what it holds, why, since when."""

    request: str
    reasons: tuple[str, ...]
    detail: str
    since: datetime


@dataclass(frozen=True)
class Began(_Holding):
    """The agent wrote a new hold: counted, timed from the request's arrival, DrainHeld."""

    reaction_seconds: float


@dataclass(frozen=True)
class Found:
    """A hold on the Node that this agent did not write in this run (a restart): resumed."""

    record: HoldRecord


@dataclass(frozen=True)
class Resumed(_Holding):
    """The MCD wrote the held request again (it restarted) and the agent held it again: the
    same hold, with its age; not a new hold and not an end. ``gained``: its reasons it was
    not counted under before."""

    gained: tuple[str, ...] = ()


@dataclass(frozen=True)
class Updated(_Holding):
    """The reasons or the detail of the hold changed; ``gained``: its reasons it was not
    counted under before (a build pod started on a node held for its image, say)."""

    gained: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ended:
    """The hold ended: ``outcome`` says how; ``desired`` is ``desiredDrain`` afterwards;
    ``released_by`` who released it by hand, as the Node records it (``released-by``)."""

    record: HoldRecord
    outcome: Outcome
    desired: str | None
    held_for: timedelta
    released_by: str | None = None
    #: Why a guard let the drain go, when it says (a same-image drain nothing will replace).
    why: str = ""


class RaceEvidence(StrEnum):
    """How the agent knows the MCC began a drain before the hold took effect (the log's
    words)."""

    CORDONED_BEFORE = "node was already cordoned when the hold was written"
    CORDONED_AFTER = (
        "node was cordoned just after the hold was written (the MCC had read the request before it)"
    )
    DRAINED = "the MCC completed the held request's drain"


@dataclass(frozen=True)
class RaceLost:
    """The MCC began the drain before the hold took effect (docs/troubleshooting.md): counted
    once per request."""

    request: str
    evidence: RaceEvidence = RaceEvidence.CORDONED_BEFORE


Transition = Requested | Began | Found | Resumed | Updated | Ended | RaceLost


@dataclass(frozen=True)
class Change:
    """The memory after a pass, and what happened in it, in order."""

    memory: Memory
    transitions: tuple[Transition, ...] = ()


def hold_on(annotations: Mapping[str, str]) -> HoldRecord | None:
    """The hold on the Node if it is drain-guard's and in force (desiredDrain = hold-<held>)."""
    try:
        record = read_hold(annotations)
    except MalformedHold:
        return None
    if record is None:
        return None
    if annotations.get(DESIRED_DRAIN) != HOLD_PREFIX + record.held_drain:
        return None
    return record


def _know(memory: Memory, record: HoldRecord | None, now: datetime, monotonic: float) -> Memory:
    """Remember ``record`` as the hold on the Node. A hold the agent already knew keeps its
    anchor (a rewrite of ``held-since`` after a step of the clock changes nothing); a new one
    is anchored now."""
    if record is None:
        return replace(memory, hold=None, anchor=None)
    known = memory.hold
    if known is not None and known.held_drain == record.held_drain and memory.anchor is not None:
        return replace(memory, hold=replace(record, since=known.since))
    return replace(memory, hold=record, anchor=(monotonic, now))


def known_hold(memory: Memory, now: datetime, monotonic: float) -> HoldRecord | None:
    """The hold the agent knows, its ``held-since`` on the wall clock of ``now``: as it was
    when the agent came to know the hold (never later than then: a start in the future is
    what this process did not see, and the Node's record cannot tell it), moved by however
    far the wall clock has been stepped since, in whole seconds (the two clocks read a
    moment apart differ by microseconds, never by a step)."""
    hold, anchor = memory.hold, memory.anchor
    if hold is None or anchor is None:
        return hold
    at, then = anchor
    stepped = (now - then).total_seconds() - (monotonic - at)
    return replace(hold, since=min(hold.since, then) + timedelta(seconds=round(stepped)))


def _age(memory: Memory, record: HoldRecord, now: datetime, monotonic: float) -> timedelta:
    """How long ``record`` has been held: by the monotonic clock when it is the hold the
    agent knows, else by its ``held-since``."""
    known = known_hold(memory, now, monotonic)
    if known is not None and known.held_drain == record.held_drain:
        return now - known.since
    return now - record.since


def _end(
    memory: Memory,
    record: HoldRecord,
    outcome: Outcome,
    desired: str | None,
    now: datetime,
    monotonic: float,
    released_by: str | None = None,
    why: str = "",
) -> Change:
    held_for = _age(memory, record, now, monotonic)
    ended = Ended(record, outcome, desired, held_for, released_by, why)
    ended_memory = replace(
        memory,
        hold=None,
        anchor=None,
        last_ended=record,
        pending_end=_still_pending(memory, record, desired),
        counted=frozenset(),
        releasing=None,
    )
    return Change(ended_memory, (ended,))


def _still_pending(memory: Memory, record: HoldRecord, desired: str | None) -> HoldRecord | None:
    """``record``, ended with ``desiredDrain`` = ``desired``, if its request still pends: at the
    earliest start of that request's holds (held again after a release, the wait began then)."""
    if desired != record.held_drain:
        return None
    earlier = memory.pending_end
    if earlier is not None and earlier.held_drain == record.held_drain:
        return replace(record, since=min(earlier.since, record.since))
    return record


def _moved_on(memory: Memory, desired: str | None) -> Memory:
    """Forget the ended hold, and the lost race counted, once ``desiredDrain`` is neither
    their request nor a hold of it."""
    ended, lost = memory.pending_end, memory.race_lost
    if ended is not None and desired not in (ended.held_drain, HOLD_PREFIX + ended.held_drain):
        memory = replace(memory, pending_end=None)
    if lost is not None and desired not in (lost, HOLD_PREFIX + lost):
        memory = replace(memory, race_lost=None)
    return memory


def _cordoned_after_hold(
    memory: Memory, desired: str | None, seen_at: float, *, cordoned: bool
) -> tuple[Memory, tuple[RaceLost, ...]]:
    """A cordon seen within ``RACE_REACH`` of the agent's hold on a schedulable Node, while
    that hold is still in force: the MCC's lost race."""
    if memory.race_window is None:
        return memory, ()
    request, written_at = memory.race_window
    if desired != HOLD_PREFIX + request or seen_at - written_at > RACE_REACH:
        return replace(memory, race_window=None), ()
    if not cordoned:
        return memory, ()
    return _race_lost(replace(memory, race_window=None), request, RaceEvidence.CORDONED_AFTER)


def _race_lost(
    memory: Memory, request: str, evidence: RaceEvidence
) -> tuple[Memory, tuple[RaceLost, ...]]:
    """``request``'s lost race, unless already counted."""
    if memory.race_lost == request:
        return memory, ()
    return replace(memory, race_lost=request), (RaceLost(request, evidence),)


def attempted(memory: Memory, release: decisions.Release) -> Memory:
    """The agent sent ``release`` and does not know whether it was committed."""
    return replace(memory, releasing=(release.original, release.outcome))


def _own_release(memory: Memory, held: str, annotations: Mapping[str, str]) -> Outcome | None:
    """The outcome of the agent's own unanswered release, if the Node shows what it wrote:
    the request restored, ``released`` set exactly when that outcome sets it, and no
    ``released-by`` (which only an operator's release writes)."""
    if memory.releasing is None:
        return None
    request, outcome = memory.releasing
    if request != held or annotations.get(DESIRED_DRAIN) != held or RELEASED_BY in annotations:
        return None
    if (annotations.get(RELEASED) == held) != outcome.marks_released:
        return None
    return outcome


def observe(
    memory: Memory,
    annotations: Mapping[str, str],
    *,
    now: datetime,
    monotonic: float,
    seen_at: float,
    cordoned: bool = False,
) -> Change:
    """What the Node as the watch shows it says happened since the agent last looked.

    ``now`` and ``monotonic`` are the two clocks, read together; ``seen_at`` is when
    (monotonic) the watch delivered this Node; ``cordoned``: its ``spec.unschedulable``.
    """
    transitions: list[Transition] = []
    desired = annotations.get(DESIRED_DRAIN)
    request = parse_drain_request(desired)
    memory = _moved_on(memory, desired)
    memory, lost = _cordoned_after_hold(memory, desired, seen_at, cordoned=cordoned)
    transitions.extend(lost)
    if desired != memory.request:
        # The value found at start counts only if it still waits for the drain controller:
        # an old, applied request is not new to anyone, and a hold- value is drain-guard's
        # own write from before the restart (its request was counted when it came), or a
        # foreign hold, which asks the drain controller for nothing.
        pending = desired != annotations.get(LAST_APPLIED_DRAIN) and request.verb is not Verb.HOLD
        if request.verb is not Verb.NONE and (pending or memory.observed):
            transitions.append(Requested(request.verb))
        memory = replace(memory, request=desired, request_seen_at=seen_at, observed=True)
    elif not memory.observed:
        memory = replace(memory, observed=True)
    on_node = hold_on(annotations)
    known = memory.hold
    if known is not None and (on_node is None or on_node.held_drain != known.held_drain):
        if desired == known.held_drain and HELD_DRAIN in annotations:
            # The MCD wrote the held request again over the hold (it restarted): not an
            # end; decide() holds it again with the same age (Resumed), or cleans up.
            return Change(memory, tuple(transitions))
        if (
            desired
            == HOLD_PREFIX + known.held_drain
            == HOLD_PREFIX + annotations.get(HELD_DRAIN, "")
        ):
            # Still this hold, its record unreadable (a bad held-since, say): not an end;
            # decide() repairs the record or releases the hold as invalid.
            return Change(memory, tuple(transitions))
        # Someone else restored the request (drain-guard release, or by hand): manual.
        # A drain or uncordon other than the held one is the MCD's newer request.
        superseded = desired != known.held_drain and request.verb in (Verb.DRAIN, Verb.UNCORDON)
        own = _own_release(memory, known.held_drain, annotations)
        if superseded:
            outcome, by = Outcome.SUPERSEDED, None
        elif own is not None:
            # Our own release, answered with an error yet committed (an etcd freeze's 504).
            outcome, by = own, None
        else:
            outcome, by = Outcome.MANUAL, releaser_of(annotations, known.held_drain)
        change = _end(memory, known, outcome, desired, now, monotonic, by)
        memory = change.memory
        transitions.extend(change.transitions)
    if memory.hold is None and on_node is not None:
        # Counted under its reasons when it began, by the agent that wrote it.
        memory = _know(memory, on_node, now, monotonic)
        memory = replace(memory, counted=frozenset(r.value for r in on_node.reasons))
        transitions.append(Found(on_node))
    return Change(memory, tuple(transitions))


def applied(
    memory: Memory,
    decision: decisions.Decision,
    *,
    cordoned: bool,
    after: Mapping[str, str],
    now: datetime,
    monotonic: float,
) -> Change:
    """What the agent's own write of ``decision`` did; ``cordoned``: the Node it decided on
    was already unschedulable; ``after``: the Node's annotations as the API returned them."""
    # Our own write is not a new request: remember its value, keep when the request came.
    # A write of ours that landed settles any earlier unanswered release: it was not needed.
    memory = replace(memory, request=after.get(DESIRED_DRAIN), releasing=None)
    transitions: list[Transition] = []
    end = decision.hold_ended
    if end is not None:
        # A hold the Node's record does not show (unreadable) is the one the agent knew.
        record = end.record or memory.hold
        if record is not None and record != memory.last_ended:
            change = _end(
                memory, record, end.outcome, decision.request, now, monotonic, why=end.why
            )
            memory, transitions = change.memory, list(change.transitions)
            if end.outcome is Outcome.RACE_LOST:
                memory, lost = _race_lost(memory, record.held_drain, RaceEvidence.DRAINED)
                transitions.extend(lost)
        memory = replace(memory, hold=None, anchor=None, race_window=None)
    written = decision.hold_written
    if written is not None:
        record = hold_on(after)
        reasons = tuple(b.reason.value for b in written.blocks)
        detail = decisions.hold_detail(written.blocks)
        since = record.since if record is not None else written.since
        counted = frozenset() if written.how is HoldWrite.BEGIN else memory.counted
        gained = tuple(r for r in reasons if r not in counted)
        if written.how is HoldWrite.BEGIN:
            reaction = monotonic - memory.request_seen_at
            transitions.append(Began(written.request, reasons, detail, since, reaction))
        elif written.how is HoldWrite.RESUME:
            transitions.append(Resumed(written.request, reasons, detail, since, gained))
        else:
            transitions.append(Updated(written.request, reasons, detail, since, gained))
        if written.starts and cordoned:
            memory, lost = _race_lost(memory, written.request, RaceEvidence.CORDONED_BEFORE)
            transitions.extend(lost)
        elif written.starts:
            memory = replace(memory, race_window=(written.request, monotonic))
        memory = replace(_know(memory, record, now, monotonic), counted=counted | set(gained))
    return Change(memory, tuple(transitions))
