"""Decisions: what to write about a node's drain request, and why (pure: no I/O).

``drain_guard.decide`` returns one of these; the controller applies its ``patch`` and
reports it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from drain_guard.guards import Block, Clear, InvalidInput, Unknown, Verdict
from drain_guard.protocol import (
    OWNED_KEYS,
    HoldRecord,
    JsonPatchOp,
    Outcome,
    truncate_utf8,
)

__all__ = [
    "CleanUp",
    "Decision",
    "Foreign",
    "Hold",
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
    if isinstance(decision, Hold | UpdateHold | Wait) and decision.since_repaired is not None:
        found.append(decision.since_repaired)
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
    #: The hold's ``held-since`` was unreadable or in the future: rewritten to now, reported.
    since_repaired: InvalidInput | None = None

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
    #: The hold's ``held-since`` was unreadable or in the future: rewritten to now, reported.
    since_repaired: InvalidInput | None = None

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
    #: The hold's ``held-since`` was unreadable or in the future: rewritten to now, reported.
    since_repaired: InvalidInput | None = None

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
