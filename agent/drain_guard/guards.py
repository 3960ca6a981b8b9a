"""Guards and the decision: given what the agent sees, what to write (pure: no I/O).

``decide()`` is the whole hold protocol of docs/protocol.md in one function: the
controller feeds it a ``NodeView`` and applies the patch of the ``Decision`` it returns
(if any), re-reading and deciding again when the patch's ``test`` operations fail.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from drain_guard.imageref import ImageRefError, digest_of
from drain_guard.pods import DEFAULT_SCOPE, Pod, PodScope, running_build_pods
from drain_guard.protocol import (
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    HELD_DRAIN,
    HOLD_REQUEST,
    LAST_APPLIED_DRAIN,
    OWNED_KEYS,
    RELEASED,
    HoldRecord,
    JsonPatchOp,
    MalformedHold,
    Outcome,
    Reason,
    Verb,
    cleanup_patch,
    format_rfc3339,
    hold_patch,
    later,
    parse_drain_request,
    parse_rfc3339,
    read_hold,
    release_patch,
    truncate_utf8,
    update_hold_patch,
)
from drain_guard.selectors import BuildPodSelector

__all__ = [
    "CLOCK_SKEW",
    "Block",
    "BootedImage",
    "BuildPodGuard",
    "BuildPodsSeen",
    "CleanUp",
    "Clear",
    "Decision",
    "Foreign",
    "Guard",
    "Hold",
    "Idle",
    "ImageCompared",
    "InvalidInput",
    "Keep",
    "ManualGuard",
    "NodeView",
    "NoopImageGuard",
    "NothingHeldError",
    "Release",
    "UpdateHold",
    "Verdict",
    "Wait",
    "decide",
    "default_guards",
    "evidence",
    "force_release",
    "format_hold_request",
    "hold_detail",
    "invalid_inputs",
    "parse_hold_request",
    "stale_keys",
]

#: How far in the future ``held-since`` may be before its age counts as unknown.
CLOCK_SKEW = timedelta(minutes=2)


# --- what the guards look at --------------------------------------------------------------


@dataclass(frozen=True)
class BootedImage:
    """The image the host booted; ``digest`` None means unknown, ``error`` says why."""

    digest: str | None
    reference: str | None
    source: str
    error: str | None = None


@dataclass(frozen=True)
class NodeView:
    """Everything ``decide()`` needs, as read by the controller at one moment."""

    name: str
    annotations: Mapping[str, str]
    #: None: the pod watch has not synced yet.
    pods: tuple[Pod, ...] | None
    booted: BootedImage
    now: datetime
    #: The Node's ``metadata.resourceVersion``: pinned by a patch when ``lastAppliedDrain``
    #: is absent (JSON Patch cannot test that a key is absent).
    resource_version: str


# --- verdicts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildPodsSeen:
    """The build-pod guard's evidence: the build pods running on the node."""

    pods: tuple[Pod, ...]


@dataclass(frozen=True)
class ImageCompared:
    """The no-op guard's evidence: desiredImage's digest (None: no image, no digest, or
    unreadable) and whether it is the booted one (None: the guard cannot know)."""

    desired_digest: str | None
    equal: bool | None


#: What a guard saw, for ``/status`` and the metrics; the decision reads only the verdict, and
#: two verdicts that say the same are equal whatever their evidence.
Evidence = BuildPodsSeen | ImageCompared


#: How much of a malformed value ``InvalidInput`` repeats (logs and /status stay small).
MAX_INVALID_BYTES = 256


@dataclass(frozen=True)
class InvalidInput:
    """Malformed input, ignored: ``kind`` as ``drain_guard_invalid_input_total`` counts it,
    ``what`` names the annotation and its value, ``why`` says what is wrong with it."""

    kind: str
    what: str
    why: str

    @classmethod
    def of(cls, kind: str, key: str, value: str, why: str) -> InvalidInput:
        what = f"{key}={truncate_utf8(repr(value), MAX_INVALID_BYTES)}"
        return cls(kind, what, truncate_utf8(" ".join(why.split()), MAX_INVALID_BYTES))


@dataclass(frozen=True)
class Block:
    """The guard blocks the drain."""

    reason: Reason
    detail: str
    evidence: Evidence | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Unknown:
    """The guard cannot decide yet (its data is not there): do not let a held drain go."""

    reason: Reason
    detail: str
    evidence: Evidence | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Clear:
    """The guard does not block; ``detail`` says why, for the status."""

    reason: Reason
    detail: str
    #: The guard could not compare and abstained (never hold on a guess).
    abstained: bool = False
    #: The guard's input was malformed: reported and counted, never held on.
    invalid: InvalidInput | None = None
    evidence: Evidence | None = field(default=None, compare=False)


Verdict = Block | Unknown | Clear

_E = TypeVar("_E", BuildPodsSeen, ImageCompared)


def evidence(verdicts: Sequence[Verdict], kind: type[_E]) -> _E | None:
    """The first evidence of ``kind`` among the verdicts, if a guard gave one."""
    return next((v.evidence for v in verdicts if isinstance(v.evidence, kind)), None)


class Guard(Protocol):
    """A small object that says whether a drain of this node should wait."""

    @property
    def reason(self) -> Reason: ...

    def check(self, view: NodeView) -> Verdict: ...


class BuildPodGuard:
    """Blocks while a build pod of the scope runs on the node: a drain would evict it."""

    reason = Reason.BUILD_POD

    def __init__(
        self, selectors: Sequence[BuildPodSelector], scope: PodScope = DEFAULT_SCOPE
    ) -> None:
        if not selectors:
            raise ValueError("the build-pod guard needs at least one selector")
        self.selectors = tuple(selectors)
        self.scope = scope

    def build_pods(self, pods: Sequence[Pod]) -> list[Pod]:
        """The pods a drain would harm (``pods.running_build_pods``)."""
        return running_build_pods(pods, self.selectors, self.scope)

    def check(self, view: NodeView) -> Verdict:
        if view.pods is None:
            return Unknown(self.reason, "pods on the node are not synced yet")
        found = self.build_pods(view.pods)
        seen = BuildPodsSeen(tuple(found))
        if not found:
            return Clear(self.reason, "no build pod on the node", evidence=seen)
        names = ", ".join(sorted(f"{p.namespace}/{p.name}" for p in found))
        return Block(self.reason, f"build pod{'s' if len(found) > 1 else ''} {names}", seen)


class NoopImageGuard:
    """Blocks a drain for a layered update to the image the node already booted."""

    reason = Reason.NOOP_IMAGE

    def check(self, view: NodeView) -> Verdict:
        desired = view.annotations.get(DESIRED_IMAGE)
        if not desired:
            return Clear(
                self.reason,
                "node is not layered (no desiredImage)",
                evidence=ImageCompared(None, False),
            )
        unknown = ImageCompared(None, None)
        try:
            digest = digest_of(desired)
        except ImageRefError as err:
            why = f"desiredImage unreadable: {err}"
            bad = InvalidInput.of("image_ref", DESIRED_IMAGE, desired, str(err))
            return Clear(self.reason, why, abstained=True, invalid=bad, evidence=unknown)
        if digest is None:
            why = f"desiredImage {desired} has no digest"
            return Clear(self.reason, why, abstained=True, evidence=unknown)
        if view.booted.digest is None:
            why = f"booted image unknown ({view.booted.source}: {view.booted.error or 'no digest'})"
            return Clear(self.reason, why, abstained=True, evidence=ImageCompared(digest, None))
        if digest == view.booted.digest:
            why = f"desiredImage is the booted image {_short(digest)}"
            return Block(self.reason, why, ImageCompared(digest, True))
        why = f"desiredImage {_short(digest)} differs from booted {_short(view.booted.digest)}"
        return Clear(self.reason, why, evidence=ImageCompared(digest, False))


def _short(digest: str) -> str:
    return digest[: len("sha256:") + 12]


#: A hold request's reason: one line for `oc describe node` and `drain-guard status`.
MAX_HOLD_REASON_BYTES = 256


def format_hold_request(until: datetime, reason: str) -> str:
    """The ``drain-guard.io/hold-request`` value that :func:`parse_hold_request` reads back as
    ``(until, reason)`` (``drain-guard hold``); ValueError, one line, for a reason that is
    empty, holds a control character or is longer than ``MAX_HOLD_REASON_BYTES``."""
    if not reason.strip():
        raise ValueError("the reason is empty: say why (it shows in drain-guard status)")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in reason):
        raise ValueError("the reason holds a control character (a newline?): one line please")
    if len(reason.encode()) > MAX_HOLD_REASON_BYTES:
        raise ValueError(f"the reason is longer than {MAX_HOLD_REASON_BYTES} bytes")
    return f"{format_rfc3339(until)};{' '.join(reason.split())}"


def parse_hold_request(text: str) -> tuple[datetime, str]:
    """Parse ``<RFC 3339 expiry>[;<reason text>]`` → (expiry, reason); ValueError if bad."""
    expiry_text, _, reason = text.partition(";")
    return parse_rfc3339(expiry_text), " ".join(reason.split())


class ManualGuard:
    """Blocks while an operator's ``drain-guard.io/hold-request`` has not expired."""

    reason = Reason.MANUAL

    def check(self, view: NodeView) -> Verdict:
        text = view.annotations.get(HOLD_REQUEST)
        if text is None:
            return Clear(self.reason, "no hold-request")
        try:
            expiry, why = parse_hold_request(text)
        except ValueError as err:
            why = f"{err}; expected <RFC 3339 expiry>[;<reason>]"
            bad = InvalidInput.of("hold_request", HOLD_REQUEST, text, why)
            return Clear(self.reason, f"{HOLD_REQUEST} ignored: {why}", invalid=bad)
        if expiry <= view.now:
            return Clear(self.reason, f"hold-request expired at {format_rfc3339(expiry)}")
        detail = f"hold-request until {format_rfc3339(expiry)}"
        return Block(self.reason, f"{detail}: {why}" if why else detail)


# --- decisions ----------------------------------------------------------------------------


def hold_detail(blocks: Sequence[Block]) -> str:
    """The ``hold-detail`` text for a set of blocks: one line, within the 1 KiB limit."""
    text = "; ".join(f"{b.reason}: {b.detail}" for b in blocks)
    return truncate_utf8(" ".join(text.split()))


def invalid_inputs(decision: Decision) -> tuple[InvalidInput, ...]:
    """Every malformed input behind this decision: what a guard read, and an unreadable hold
    record (released as ``invalid``, or cleaned up)."""
    found = [v.invalid for v in decision.verdicts if isinstance(v, Clear) and v.invalid]
    record = "hold record (drain-guard.io/*)"
    if isinstance(decision, Release) and decision.outcome is Outcome.INVALID:
        found.append(InvalidInput("annotation", record, decision.why))
    if (
        isinstance(decision, CleanUp)
        and decision.ended is None  # hold keys without a readable record: malformed
        and any(k in OWNED_KEYS for k in decision.keys)
    ):
        found.append(InvalidInput("annotation", record, decision.why))
    return tuple(found)


def _reasons(blocks: Sequence[Block]) -> str:
    return ",".join(b.reason.value for b in blocks)


class _OneLine(ABC):
    """Every decision explains itself in one line, whatever text its inputs carried."""

    @abstractmethod
    def _explain(self) -> str: ...

    def explain(self) -> str:
        return " ".join(self._explain().split())


@dataclass(frozen=True)
class Idle(_OneLine):
    """Nothing held, nothing to write."""

    why: str
    verdicts: tuple[Verdict, ...] = ()
    patch: tuple[JsonPatchOp, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    def _explain(self) -> str:
        return f"idle: {self.why}"


@dataclass(frozen=True)
class Hold(_OneLine):
    """Hold ``original``: rewrite desiredDrain to ``hold-<original>``."""

    original: str
    blocks: tuple[Block, ...]
    since: datetime
    patch: tuple[JsonPatchOp, ...]
    verdicts: tuple[Verdict, ...] = ()
    #: A hold of an older request that the MCD's newer request overwrote.
    supersedes: HoldRecord | None = None
    #: The MCD wrote the held request again (it restarted): the hold resumes, same age.
    resumed: bool = False

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    def _explain(self) -> str:
        what = "hold again" if self.resumed else "hold"
        text = f"{what} {self.original}: {hold_detail(self.blocks)}"
        if self.supersedes is not None:
            text += f" (supersedes the hold of {self.supersedes.held_drain})"
        return text


@dataclass(frozen=True)
class UpdateHold(_OneLine):
    """Still held, but the reasons or the detail changed: rewrite them."""

    record: HoldRecord
    blocks: tuple[Block, ...]
    patch: tuple[JsonPatchOp, ...]
    verdicts: tuple[Verdict, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    def _explain(self) -> str:
        return f"still holding {self.record.held_drain}, now: {hold_detail(self.blocks)}"


@dataclass(frozen=True)
class Keep(_OneLine):
    """Still held for the same reasons: nothing to write."""

    record: HoldRecord
    blocks: tuple[Block, ...]
    verdicts: tuple[Verdict, ...] = ()
    patch: tuple[JsonPatchOp, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    def _explain(self) -> str:
        return f"holding {self.record.held_drain}: {hold_detail(self.blocks)}"


@dataclass(frozen=True)
class Wait(_OneLine):
    """A guard cannot decide yet and none blocks: write nothing, keep any hold in place."""

    unknowns: tuple[Unknown, ...]
    record: HoldRecord | None
    request: str
    verdicts: tuple[Verdict, ...] = ()
    patch: tuple[JsonPatchOp, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    def _explain(self) -> str:
        waiting = "; ".join(f"{u.reason}: {u.detail}" for u in self.unknowns)
        if self.record is not None:
            return f"holding {self.record.held_drain} until guards can decide ({waiting})"
        return f"waiting before deciding on {self.request} ({waiting})"


@dataclass(frozen=True)
class Release(_OneLine):
    """Restore ``original`` to desiredDrain and remove the hold record."""

    original: str
    outcome: Outcome
    why: str
    patch: tuple[JsonPatchOp, ...]
    record: HoldRecord | None
    verdicts: tuple[Verdict, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    def _explain(self) -> str:
        return f"release {self.original} ({self.outcome}): {self.why}"


@dataclass(frozen=True)
class CleanUp(_OneLine):
    """Remove agent keys left over from a hold that ended otherwise (e.g. superseded)."""

    keys: tuple[str, ...]
    why: str
    patch: tuple[JsonPatchOp, ...]
    #: The hold that ended, if its record was readable, and how it ended.
    ended: HoldRecord | None = None
    outcome: Outcome | None = None
    verdicts: tuple[Verdict, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    def _explain(self) -> str:
        return f"clean up {', '.join(self.keys)}: {self.why}"


@dataclass(frozen=True)
class Foreign(_OneLine):
    """desiredDrain says ``hold-…`` but drain-guard did not write it: left alone."""

    value: str
    why: str
    verdicts: tuple[Verdict, ...] = ()
    patch: tuple[JsonPatchOp, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    def _explain(self) -> str:
        return f"not touching {self.value}: {self.why}"


Decision = Idle | Hold | UpdateHold | Keep | Wait | Release | CleanUp | Foreign


def _present(annotations: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(k for k in (*OWNED_KEYS, RELEASED) if k in annotations)


def default_guards(
    selectors: Sequence[BuildPodSelector], scope: PodScope = DEFAULT_SCOPE
) -> tuple[Guard, ...]:
    """The guards the agent runs, in the order their reasons are listed."""
    return (BuildPodGuard(selectors, scope), NoopImageGuard(), ManualGuard())


def decide(view: NodeView, guards: Sequence[Guard], max_hold: timedelta) -> Decision:
    """Decide what to do about this node's drain request now (docs/protocol.md, the decision table).

    The decision's ``recheck_at`` is the next instant it could change with no new watch
    event (a hold's max-hold, a hold-request's expiry), so the controller need not poll.
    """
    decision = _decide(view, guards, max_hold)
    return replace(decision, recheck_at=_recheck_at(view, decision, max_hold))


def _recheck_at(view: NodeView, decision: Decision, max_hold: timedelta) -> datetime | None:
    times: list[datetime] = []
    if isinstance(decision, Hold):
        times.append(later(decision.since, max_hold))
    elif isinstance(decision, Keep | UpdateHold) or (
        isinstance(decision, Wait) and decision.record is not None
    ):
        assert decision.record is not None
        times.append(later(decision.record.since, max_hold))
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
    annotations: Mapping[str, str], resource_version: str, outcome: Outcome
) -> Release:
    """Release the hold now, whatever the guards say (operator release, uninstall).

    A manual release marks the request released so the agent does not hold it again.
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
        mark_released=outcome is Outcome.MANUAL,
        allow_completed=held == last_applied,
    )
    return Release(held, outcome, f"{outcome} release", tuple(patch), record)


def stale_keys(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """drain-guard's keys on a Node without a hold that nothing needs any more.

    Left by a hold that was superseded or released by hand while no agent ran, or a
    ``released`` of a request that moved on. A record of the request that is in
    ``desiredDrain`` again is not stale: the agent resumes that hold with its age.
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
    released = annotations.get(RELEASED)
    if released is not None and released != desired:
        keys += (RELEASED,)
    return keys


def _decide(view: NodeView, guards: Sequence[Guard], max_hold: timedelta) -> Decision:
    annotations = view.annotations
    desired = annotations.get(DESIRED_DRAIN)
    request = parse_drain_request(desired)
    try:
        record = read_hold(annotations)
        malformed: str | None = None
    except MalformedHold as err:
        record, malformed = None, str(err)
    # Every guard speaks on every pass, whether or not a request waits: the decision carries
    # what each saw (build pods, image digests, malformed input) for /status and the metrics.
    verdicts = tuple(guard.check(view) for guard in guards)
    if request.verb is Verb.HOLD:
        return _decide_held(view, verdicts, max_hold, request.target, record, malformed)
    return _decide_unheld(view, verdicts, max_hold, record, malformed)


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
            mark_released=outcome in (Outcome.EXPIRED, Outcome.INVALID),
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
    if age < -CLOCK_SKEW:
        return release(
            Outcome.EXPIRED, f"held-since {format_rfc3339(record.since)} is in the future"
        )
    if age >= max_hold:
        return release(Outcome.EXPIRED, f"held for {_minutes(age)}, max-hold {_minutes(max_hold)}")
    blocks, unknowns = _split(verdicts)
    if blocks:
        blocks = _capped(blocks, annotations, record.since, max_hold)
        if _reasons(blocks) == ",".join(record.reasons) and hold_detail(blocks) == record.detail:
            return Keep(record, blocks, verdicts)
        patch = update_hold_patch(record, (b.reason for b in blocks), hold_detail(blocks))
        return UpdateHold(record, blocks, tuple(patch), verdicts)
    if unknowns:
        return Wait(unknowns, record, original, verdicts)
    return release(Outcome.SAFE, "no guard blocks")


def _decide_unheld(
    view: NodeView,
    verdicts: tuple[Verdict, ...],
    max_hold: timedelta,
    record: HoldRecord | None,
    malformed: str | None,
) -> Decision:
    annotations = view.annotations
    desired = annotations.get(DESIRED_DRAIN)
    request = parse_drain_request(desired)
    last_applied = annotations.get(LAST_APPLIED_DRAIN)
    released = annotations.get(RELEASED)

    why = _not_holdable(request.verb, desired, last_applied, released)
    same = record is not None and record.held_drain == desired
    ran_out = False
    if why is None and record is not None and same:
        age = record.age(view.now)
        if age < -CLOCK_SKEW or age >= max_hold:
            # Marked released below, so that the request is not held afresh afterwards.
            why = f"its earlier hold (since {format_rfc3339(record.since)}) has run out"
            ran_out = True
    if why is None:
        assert desired is not None
        blocks, unknowns = _split(verdicts)
        if blocks:
            since = record.since if record is not None and same else view.now
            blocks = _capped(blocks, annotations, since, max_hold)
            stale = (RELEASED,) if released is not None else ()
            patch = hold_patch(
                desired,
                last_applied,
                view.resource_version,
                (b.reason for b in blocks),
                since,
                hold_detail(blocks),
                remove=stale,
            )
            superseded = record if record is not None and not same else None
            return Hold(desired, blocks, since, tuple(patch), verdicts, superseded, same)
        if unknowns:
            return Wait(unknowns, record, desired, verdicts)
        why = "no guard blocks"

    stale_keys = tuple(k for k in OWNED_KEYS if k in annotations)
    if released is not None and released != desired and not ran_out:
        stale_keys += (RELEASED,)
    if not stale_keys:
        return Idle(why, verdicts)
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
    return CleanUp(stale_keys, f"{ended}; {why}", tuple(patch), record, outcome, verdicts)


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


def _not_holdable(
    verb: Verb, desired: str | None, last_applied: str | None, released: str | None
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
        return f"{desired} was released earlier and is not held again"
    return None


def _minutes(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 60:.1f} min"
