"""The manual guard: an operator's ``drain-guard.io/hold-request`` (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from drain_guard.guards.base import (
    Block,
    Clear,
    Guard,
    GuardKind,
    GuardSettings,
    InvalidInput,
    NodeView,
    ObjectRef,
    Verdict,
)
from drain_guard.protocol import HOLD_REQUEST, Reason, format_rfc3339, parse_rfc3339

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
    reads: tuple[ObjectRef, ...] = ()

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


def _releases_when(_detail: str, until: datetime | None) -> str:
    when = f"expires at {format_rfc3339(until)}" if until is not None else "expires"
    return f"{Reason.MANUAL}: when the hold request {when} or is removed"


def _build(_settings: GuardSettings, _raw: Mapping[str, object]) -> Guard:
    return ManualGuard()


KIND = GuardKind(Reason.MANUAL, _releases_when, _build)
