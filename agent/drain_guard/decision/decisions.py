"""Decisions: what to write about a node's drain request, and why (pure: no I/O).

``drain_guard.decision.decide`` returns one of these; the controller applies its ``patch`` and
reports it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from drain_guard.guards import Block, Clear, ImageCompared, InvalidInput, Unknown, Verdict
from drain_guard.protocol import (
    OWNED_KEYS,
    HoldRecord,
    JsonPatchOp,
    Outcome,
    Reason,
    truncate_utf8,
)

__all__ = [
    "FACTS",
    "CleanUp",
    "Decision",
    "Foreign",
    "Hold",
    "HoldEnd",
    "HoldWrite",
    "HoldWritten",
    "Idle",
    "Keep",
    "Release",
    "UpdateHold",
    "Wait",
    "hold_detail",
    "invalid_inputs",
]


def hold_detail(blocks: Sequence[Block]) -> str:
    """The ``hold-detail`` text for a set of blocks: one line, within the 1 KiB limit."""
    text = "; ".join(f"{b.reason}: {b.detail}" for b in blocks)
    return truncate_utf8(" ".join(text.split()))


def invalid_inputs(decision: Decision) -> tuple[InvalidInput, ...]:
    """Every malformed input behind this decision: what a guard read, and an unreadable hold
    record (released as ``invalid``, or cleaned up)."""
    found = [v.invalid for v in decision.verdicts if isinstance(v, Clear) and v.invalid]
    if decision.record_invalid is not None:
        found.append(decision.record_invalid)
    return tuple(found)


#: What ``record_invalid`` names: the hold record's annotations as a whole.
_RECORD = "hold record (drain-guard.io/*)"


class HoldWrite(Enum):
    """How a decision's write changes drain-guard's hold on the Node."""

    BEGIN = "begin"  # desiredDrain becomes hold-<request>: a new hold
    RESUME = "resume"  # the MCD wrote the held request again: the same hold, its age kept
    UPDATE = "update"  # the hold's reasons or detail rewritten in place


@dataclass(frozen=True)
class HoldWritten:
    """The hold a decision writes (``holds.applied`` tells it as begun, resumed or updated)."""

    how: HoldWrite
    request: str
    blocks: tuple[Block, ...]
    since: datetime

    @property
    def starts(self) -> bool:
        """desiredDrain becomes ``hold-<request>`` with this write (not an update in place)."""
        return self.how is not HoldWrite.UPDATE


@dataclass(frozen=True)
class HoldEnd:
    """A hold that ends with a decision's write, and how; ``record`` None: the hold the
    agent knows (the Node's record was unreadable, or gone)."""

    record: HoldRecord | None
    outcome: Outcome
    #: Why a guard let the drain go, when it says (``let_go``): the release's Event says it.
    why: str = ""


def let_go(verdicts: Sequence[Verdict]) -> tuple[str, ...]:
    """What each guard that let a drain go because nothing would end its hold says (the
    noop-image guard, for a same-image drain no new image will replace, docs/protocol.md)."""
    return tuple(
        v.detail
        for v in verdicts
        if isinstance(v, Clear)
        and isinstance(v.evidence, ImageCompared)
        and v.evidence.replacement is not None
        and not v.evidence.replacement.holds
    )


class _Decided(ABC):
    """What every decision says of itself, so that no reader branches on its type.

    Besides these, each decision has ``request`` (the drain request it is about: the held
    one for a hold, desiredDrain's value otherwise, None if there is none) and ``blocks``
    (what a hold is held for; empty when the decision does not hold), and ``patch``,
    ``verdicts`` and ``recheck_at``. A fact that does not vary is a class attribute.
    ``FACTS`` lists them all; a test fails for a decision type that lacks one.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """The ``decision`` of ``/status`` (one of ``status.DECISIONS``)."""

    @property
    @abstractmethod
    def reasons(self) -> tuple[Reason, ...]:
        """Why it holds, keeps, waits or releases: the guards' reasons (empty: none)."""

    @property
    @abstractmethod
    def held_since(self) -> datetime | None:
        """Since when the hold record it keeps on the Node is held (None: it keeps none)."""

    @property
    @abstractmethod
    def hold_written(self) -> HoldWritten | None:
        """The hold its write begins, resumes or updates, if any."""

    @property
    @abstractmethod
    def hold_ended(self) -> HoldEnd | None:
        """The hold its write ends, if any (a release, a superseded or stale hold)."""

    @property
    @abstractmethod
    def record_invalid(self) -> InvalidInput | None:
        """Malformed input in the hold record behind it, if any (reported, never held on)."""

    @property
    def log_outcome(self) -> str:
        """The ``outcome`` of its decision log line."""
        return self.name

    @abstractmethod
    def _explain(self) -> str: ...

    def explain(self) -> str:
        """One line, whatever text its inputs carried."""
        return " ".join(self._explain().split())


#: What every decision carries; the exhaustiveness test checks every type against it.
FACTS = (
    "name",
    "request",
    "reasons",
    "blocks",
    "held_since",
    "hold_written",
    "hold_ended",
    "record_invalid",
    "log_outcome",
    "explain",
    "patch",
    "verdicts",
    "recheck_at",
)


@dataclass(frozen=True)
class Idle(_Decided):
    """Nothing held, nothing to write."""

    why: str
    verdicts: tuple[Verdict, ...] = ()
    patch: tuple[JsonPatchOp, ...] = ()
    request: str | None = None
    #: A drain request the MCC may apply now: /status says ``pass`` rather than ``idle``.
    passes: bool = False
    #: The released marker's ``released-by``, malformed: reported, not shown.
    released_by_invalid: InvalidInput | None = None

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    reasons = blocks = ()
    held_since = hold_written = hold_ended = None

    @property
    def name(self) -> str:
        return "pass" if self.passes else "idle"

    @property
    def record_invalid(self) -> InvalidInput | None:
        """Who released the request it lets pass, unreadable."""
        return self.released_by_invalid

    def _explain(self) -> str:
        return f"idle: {self.why}"


@dataclass(frozen=True)
class Hold(_Decided):
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
    #: The hold's ``held-since`` was unreadable or in the future: rewritten to now, reported.
    since_repaired: InvalidInput | None = None

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    name = "hold"

    @property
    def request(self) -> str:
        return self.original

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return _reasons(self.blocks)

    @property
    def held_since(self) -> datetime:
        return self.since

    @property
    def hold_written(self) -> HoldWritten:
        how = HoldWrite.RESUME if self.resumed else HoldWrite.BEGIN
        return HoldWritten(how, self.original, self.blocks, self.since)

    @property
    def hold_ended(self) -> HoldEnd | None:
        return None if self.supersedes is None else HoldEnd(self.supersedes, Outcome.SUPERSEDED)

    @property
    def record_invalid(self) -> InvalidInput | None:
        """Its ``held-since``, unreadable or in the future, rewritten to now."""
        return self.since_repaired

    def _explain(self) -> str:
        what = "hold again" if self.resumed else "hold"
        text = f"{what} {self.original}: {hold_detail(self.blocks)}"
        if self.supersedes is not None:
            text += f" (supersedes the hold of {self.supersedes.held_drain})"
        return text


@dataclass(frozen=True)
class UpdateHold(_Decided):
    """Still held, but the reasons or the detail changed: rewrite them."""

    record: HoldRecord
    blocks: tuple[Block, ...]
    patch: tuple[JsonPatchOp, ...]
    verdicts: tuple[Verdict, ...] = ()
    #: The hold's ``held-since`` was unreadable or in the future: rewritten to now, reported.
    since_repaired: InvalidInput | None = None

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    name = "update-hold"
    hold_ended = None

    @property
    def request(self) -> str:
        return self.record.held_drain

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return _reasons(self.blocks)

    @property
    def held_since(self) -> datetime:
        return self.record.since

    @property
    def hold_written(self) -> HoldWritten:
        return HoldWritten(HoldWrite.UPDATE, self.record.held_drain, self.blocks, self.record.since)

    @property
    def record_invalid(self) -> InvalidInput | None:
        """Its ``held-since``, unreadable or in the future, rewritten to now."""
        return self.since_repaired

    def _explain(self) -> str:
        return f"still holding {self.record.held_drain}, now: {hold_detail(self.blocks)}"


@dataclass(frozen=True)
class Keep(_Decided):
    """Still held for the same reasons: nothing to write."""

    record: HoldRecord
    blocks: tuple[Block, ...]
    verdicts: tuple[Verdict, ...] = ()
    patch: tuple[JsonPatchOp, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    name = "holding"
    hold_written = hold_ended = record_invalid = None

    @property
    def request(self) -> str:
        return self.record.held_drain

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return _reasons(self.blocks)

    @property
    def held_since(self) -> datetime:
        return self.record.since

    def _explain(self) -> str:
        return f"holding {self.record.held_drain}: {hold_detail(self.blocks)}"


@dataclass(frozen=True)
class Wait(_Decided):
    """A guard cannot decide yet and none blocks: keep any hold in place (its ``held-since``
    repaired if need be, the only write)."""

    unknowns: tuple[Unknown, ...]
    record: HoldRecord | None
    request: str
    verdicts: tuple[Verdict, ...] = ()
    patch: tuple[JsonPatchOp, ...] = ()
    #: The hold's ``held-since`` was unreadable or in the future: rewritten to now, reported.
    since_repaired: InvalidInput | None = None

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    name = "wait"
    blocks = ()
    hold_written = hold_ended = None

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return tuple(u.reason for u in self.unknowns)

    @property
    def held_since(self) -> datetime | None:
        return None if self.record is None else self.record.since

    @property
    def record_invalid(self) -> InvalidInput | None:
        """Its ``held-since``, unreadable or in the future, rewritten to now."""
        return self.since_repaired

    def _explain(self) -> str:
        waiting = "; ".join(f"{u.reason}: {u.detail}" for u in self.unknowns)
        if self.record is not None:
            return f"holding {self.record.held_drain} until guards can decide ({waiting})"
        return f"waiting before deciding on {self.request} ({waiting})"


@dataclass(frozen=True)
class Release(_Decided):
    """Restore ``original`` to desiredDrain and remove the hold record."""

    original: str
    outcome: Outcome
    why: str
    patch: tuple[JsonPatchOp, ...]
    record: HoldRecord | None
    verdicts: tuple[Verdict, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    name = "release"
    blocks = ()
    held_since = hold_written = None

    @property
    def request(self) -> str:
        return self.original

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return () if self.record is None else self.record.reasons

    @property
    def hold_ended(self) -> HoldEnd:
        return HoldEnd(self.record, self.outcome, "; ".join(let_go(self.verdicts)))

    @property
    def record_invalid(self) -> InvalidInput | None:
        invalid = self.outcome is Outcome.INVALID
        return InvalidInput("annotation", _RECORD, self.why) if invalid else None

    @property
    def log_outcome(self) -> str:
        return f"release:{self.outcome.value}"

    def _explain(self) -> str:
        return f"release {self.original} ({self.outcome}): {self.why}"


@dataclass(frozen=True)
class CleanUp(_Decided):
    """Remove agent keys left over from a hold that ended otherwise (e.g. superseded)."""

    keys: tuple[str, ...]
    why: str
    patch: tuple[JsonPatchOp, ...]
    #: The hold that ended, if its record was readable, and how it ended.
    ended: HoldRecord | None = None
    outcome: Outcome | None = None
    verdicts: tuple[Verdict, ...] = ()
    request: str | None = None
    #: A drain request the MCC may apply now: /status says ``pass`` rather than ``idle``.
    passes: bool = False

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    reasons = blocks = ()
    held_since = hold_written = None

    @property
    def name(self) -> str:
        return "pass" if self.passes else "idle"

    @property
    def hold_ended(self) -> HoldEnd:
        """The hold that ended while no agent ran ends now (superseded, unless known)."""
        return HoldEnd(self.ended, self.outcome or Outcome.SUPERSEDED)

    @property
    def record_invalid(self) -> InvalidInput | None:
        """Hold keys without a readable record: malformed."""
        malformed = self.ended is None and any(k in OWNED_KEYS for k in self.keys)
        return InvalidInput("annotation", _RECORD, self.why) if malformed else None

    def _explain(self) -> str:
        return f"clean up {', '.join(self.keys)}: {self.why}"


@dataclass(frozen=True)
class Foreign(_Decided):
    """desiredDrain says ``hold-…`` but drain-guard did not write it: left alone."""

    value: str
    why: str
    verdicts: tuple[Verdict, ...] = ()
    patch: tuple[JsonPatchOp, ...] = ()

    #: When to decide again even if nothing changes (an expiry), if ever.
    recheck_at: datetime | None = None

    name = "idle"
    reasons = blocks = ()
    held_since = hold_written = hold_ended = record_invalid = None

    @property
    def request(self) -> str:
        return self.value

    def _explain(self) -> str:
        return f"not touching {self.value}: {self.why}"


def _reasons(blocks: Sequence[Block]) -> tuple[Reason, ...]:
    return tuple(b.reason for b in blocks)


Decision = Idle | Hold | UpdateHold | Keep | Wait | Release | CleanUp | Foreign
