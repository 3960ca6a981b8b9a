"""The alert guard: alerts matching the operator's filter fire (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from drain_guard.core.alerts import OnUnreachable
from drain_guard.guards.base import (
    Block,
    Clear,
    Guard,
    GuardKind,
    GuardSettings,
    NodeView,
    ObjectRef,
    Unknown,
    Verdict,
)
from drain_guard.protocol import Reason, format_rfc3339


class AlertGuard:
    """Blocks while alerts matching the operator's filter fire (``--alert-url``); while the
    query goes unanswered, blocks or not as ``--alert-unreachable`` says, and says so."""

    reason = Reason.ALERT
    reads: tuple[ObjectRef, ...] = ()

    def __init__(self, on_unreachable: OnUnreachable) -> None:
        self.on_unreachable = on_unreachable

    def check(self, view: NodeView) -> Verdict:
        seen = view.alerts
        if seen is None or seen.checked_at is None:
            return Unknown(self.reason, "the alerts have not been queried yet")
        if seen.error is not None:
            since = format_rfc3339(seen.since) if seen.since else "now"
            why = f"alert query unanswered since {since} ({seen.error})"
            if self.on_unreachable is OnUnreachable.HOLD:
                return Block(self.reason, f"{why}; --alert-unreachable=hold")
            return Clear(self.reason, f"{why}; --alert-unreachable=pass", abstained=True)
        if seen.firing:
            return Block(self.reason, f"firing: {seen.named()}")
        return Clear(self.reason, "no matching alert fires")


def _releases_when(detail: str, _until: datetime | None) -> str:
    if detail.startswith("alert query unanswered"):
        return f"{Reason.ALERT}: when the alert query is answered, no matching alert fired"
    return f"{Reason.ALERT}: when the matching alerts resolve (or are silenced)"


def _build(settings: GuardSettings, _raw: Mapping[str, object]) -> Guard | None:
    """On with alert gating (``--alert-url``)."""
    return None if settings.alerts is None else AlertGuard(settings.alerts.on_unreachable)


KIND = GuardKind(Reason.ALERT, _releases_when, _build)
