"""The hold record on the Node (pure): ``read_hold`` (a reason the agent does not know is kept,
not refused), who released a request (``released-by``), and the protocol's errors."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from drain_guard.protocol.keys import (
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_DETAIL,
    HOLD_EXPIRES,
    HOLD_REASONS,
    MAX_RELEASED_BY_BYTES,
    OWNED_KEYS,
    RELEASED,
    RELEASED_BY,
    Reason,
)
from drain_guard.protocol.times import parse_rfc3339


class ProtocolError(ValueError):
    """A patch was asked for that would break an invariant of the protocol."""


class MalformedHold(ValueError):  # noqa: N818 - the name the architecture contract uses
    """The hold annotations on the Node cannot be read; the message says which and why."""


class UnreadableSince(MalformedHold):
    """The hold record is whole but for its ``held-since``: the hold itself is readable, only
    its age is unknown (``decide()`` keeps the hold and restarts its clock)."""

    def __init__(
        self,
        why: str,
        value: str,
        held_drain: str,
        reasons: tuple[Reason, ...],
        detail: str,
        unknown_reasons: tuple[str, ...] = (),
    ) -> None:
        super().__init__(why)
        self.value = value
        self.held_drain = held_drain
        self.reasons = reasons
        self.detail = detail
        self.unknown_reasons = unknown_reasons

    def record(self, since: datetime) -> HoldRecord:
        """The hold record with its age counted from ``since``."""
        return HoldRecord(self.held_drain, self.reasons, since, self.detail, self.unknown_reasons)


@dataclass(frozen=True)
class HoldRecord:
    """What the agent wrote on the Node when it held a drain."""

    held_drain: str
    #: The reasons this agent knows (its guards'), in the record's order.
    reasons: tuple[Reason, ...]
    since: datetime
    detail: str
    #: The record's reasons this agent does not know (a newer agent's guards): kept and shown,
    #: never held on (docs/protocol.md, "Reasons an agent does not know").
    unknown_reasons: tuple[str, ...] = ()
    #: ``hold-expires``: when the hold ends at the latest, as the holding agent wrote it; None
    #: in an older agent's record (or an unreadable value, which the agent writes afresh).
    expires: datetime | None = None

    @property
    def reason_names(self) -> tuple[str, ...]:
        """Every reason of the record, known or not, as ``/status`` and the CLI show them."""
        return (*(r.value for r in self.reasons), *self.unknown_reasons)

    def age(self, now: datetime) -> timedelta:
        """How long the hold has lasted (negative if ``since`` is in the future)."""
        return now - self.since


#: A reason's name as ``hold-reasons`` carries it: what this agent's reasons look like, and
#: the only shape a reason it does not know may take (docs/protocol.md, "Reasons an agent
#: does not know").
_REASON_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")


def _parse_reasons(text: str) -> tuple[tuple[Reason, ...], tuple[str, ...]]:
    """The reasons this agent knows, and the well-formed names it does not (a newer agent's)."""
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(names):
        raise MalformedHold(f"{HOLD_REASONS}={text!r}: expected comma-separated reasons")
    known: dict[Reason, None] = {}
    unknown: dict[str, None] = {}
    for name in names:
        if name in Reason.__members__.values():
            known[Reason(name)] = None
        elif _REASON_NAME.fullmatch(name):
            unknown[name] = None
        else:
            raise MalformedHold(
                f"{HOLD_REASONS}={text!r}: {name!r} is not a reason's name (lower-case letters,"
                " digits and '-', at most 63)"
            )
    return tuple(known), tuple(unknown)


def read_hold(annotations: Mapping[str, str]) -> HoldRecord | None:
    """The hold record, or None when none of its keys is present.

    Raises MalformedHold when some keys are present but the record is incomplete or
    unparseable; UnreadableSince (a MalformedHold) when only ``held-since`` is. A
    ``held-since`` in the future is returned as is: ``decide()`` judges it.
    """
    present = [key for key in OWNED_KEYS if key in annotations]
    if not present:
        return None
    missing = [key for key in (HELD_DRAIN, HOLD_REASONS, HELD_SINCE) if key not in annotations]
    if missing:
        raise MalformedHold(f"hold record incomplete: missing {', '.join(missing)}")
    held = annotations[HELD_DRAIN]
    if not held:
        raise MalformedHold(f"{HELD_DRAIN} is empty")
    reasons, unknown = _parse_reasons(annotations[HOLD_REASONS])
    detail = annotations.get(HOLD_DETAIL, "")
    try:
        since = parse_rfc3339(annotations[HELD_SINCE])
    except ValueError as err:
        why = f"{HELD_SINCE}: {err}"
        raise UnreadableSince(
            why, annotations[HELD_SINCE], held, reasons, detail, unknown
        ) from None
    expires = annotations.get(HOLD_EXPIRES)
    try:
        until = None if expires is None else parse_rfc3339(expires)
    except ValueError:
        until = None  # the agent holding it writes it afresh; a reader counts from since
    return HoldRecord(held, reasons, since, detail, unknown, until)


def check_released_by(value: str) -> str:
    """``value`` if it can be a ``released-by``: a user name as the API server gives it, not
    empty, at most ``MAX_RELEASED_BY_BYTES``, with no control character (it is printed in
    Events, logs and ``drain-guard status``). Raises ProtocolError saying why not."""
    if not value.strip():
        raise ProtocolError("empty")
    if len(value.encode()) > MAX_RELEASED_BY_BYTES:
        raise ProtocolError(f"longer than {MAX_RELEASED_BY_BYTES} bytes")
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in value):
        raise ProtocolError("it holds a control character")
    return value


def read_released_by(annotations: Mapping[str, str]) -> str | None:
    """Who released the request in ``released``, or None when no one is recorded (the agent
    released it, or the releaser's name was not known). A ``released-by`` without
    ``released`` is stale, not read. Raises MalformedHold for a value that cannot be one."""
    value = annotations.get(RELEASED_BY)
    if value is None or RELEASED not in annotations:
        return None
    try:
        return check_released_by(value)
    except ProtocolError as err:
        raise MalformedHold(f"{RELEASED_BY}: {err}") from None


def releaser_of(annotations: Mapping[str, str], request: str | None) -> str | None:
    """Who released ``request`` by hand, as the Node records it; None when ``released`` is
    not that request, no one is recorded, or the record is malformed (``decide()`` reports
    that as invalid input)."""
    if request is None or annotations.get(RELEASED) != request:
        return None
    try:
        return read_released_by(annotations)
    except MalformedHold:
        return None
