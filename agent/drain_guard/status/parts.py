"""The parts of the agent's ``/status`` that have a shape of their own (pure): alert gating's
latest answer, what ``--observe-only`` would have held and saw, the pods and the booted image a
decision read, the invalid input it ignored, a release that fails. Each with its JSON (and the
inverse) and, where ``to_text`` shows it, its line; ``AgentStatus`` (``status.agent``) holds
them. ``docs/status.md`` explains each field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from drain_guard.core.alerts import AlertsSeen
from drain_guard.core.durations import format_duration
from drain_guard.protocol import (
    format_rfc3339,
    format_rfc3339_or_none,
    parse_rfc3339_or_none,
)
from drain_guard.status.holdrequest import printable


@dataclass(frozen=True)
class AlertsStatus:
    """Alert gating in ``/status``: where the alerts are queried, and the latest answer."""

    url: str
    seen: AlertsSeen

    def to_json(self) -> dict[str, Any]:
        seen = self.seen
        return {
            "url": self.url,
            "state": seen.state,
            "firing": list(seen.firing),
            "checkedAt": format_rfc3339_or_none(seen.checked_at),
            "error": seen.error,
            "since": format_rfc3339_or_none(seen.since),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AlertsStatus:
        seen = AlertsSeen(
            firing=tuple(str(a) for a in data["firing"]),
            checked_at=parse_rfc3339_or_none(data["checkedAt"]),
            error=data["error"],
            since=parse_rfc3339_or_none(data["since"]),
        )
        return cls(url=str(data["url"]), seen=seen)

    def text(self) -> str:
        """One line of ``drain-guard status``: the alert query's state, and what it found."""
        seen = self.seen
        text = f"{seen.state} ({self.url}"
        if seen.checked_at is not None:
            text += f", checked {format_rfc3339_or_none(seen.checked_at)}"
        text += ")"
        if seen.state == "firing":
            text += ": " + ", ".join(seen.firing)
        elif seen.state == "unreachable":
            text += f" since {format_rfc3339_or_none(seen.since)}: {seen.error}"
        return text


@dataclass(frozen=True)
class WouldHoldStatus:
    """An observe-only agent's latest would-be hold: the request it would have held, when it
    first decided so, why. Kept after the drain went ahead, until the next one."""

    at: datetime
    request: str
    reasons: tuple[str, ...]
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "at": format_rfc3339(self.at),
            "request": self.request,
            "reasons": list(self.reasons),
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WouldHoldStatus:
        return cls(
            required_time(data["at"]), data["request"], tuple(data["reasons"]), data["detail"]
        )


@dataclass(frozen=True)
class ObservedStatus:
    """What an --observe-only agent saw since it started, for an admin deciding whether to
    turn enforcing on: the drain requests, the would-be holds by reason (each reason of a
    request once, as ``drain_guard_would_holds_total``), and the running build pods that went
    from the node while it was cordoned: what a drain evicts, and a hold would have spared."""

    requests: int = 0
    would_holds: tuple[tuple[str, int], ...] = ()  # (reason, requests), by reason
    build_pods_evicted: int = 0
    last_evicted: str | None = None  # namespace/name of the latest of them

    def requested(self) -> ObservedStatus:
        return replace(self, requests=self.requests + 1)

    def would_hold(self, reasons: Iterable[str]) -> ObservedStatus:
        counts = dict(self.would_holds)
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
        return replace(self, would_holds=tuple(sorted(counts.items())))

    def evicted(self, pod: str) -> ObservedStatus:
        return replace(self, build_pods_evicted=self.build_pods_evicted + 1, last_evicted=pod)

    def to_json(self) -> dict[str, Any]:
        return {
            "drainRequests": self.requests,
            "wouldHolds": dict(self.would_holds),
            "buildPodsEvicted": self.build_pods_evicted,
            "lastEvicted": self.last_evicted,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ObservedStatus:
        return cls(
            int(data["drainRequests"]),
            tuple(sorted((str(r), int(n)) for r, n in data["wouldHolds"].items())),
            int(data["buildPodsEvicted"]),
            data["lastEvicted"],
        )

    def text(self, since: datetime) -> str:
        held = ", ".join(f"{r} {n}" for r, n in self.would_holds) or "none"
        evicted = f"{self.build_pods_evicted}"
        if self.last_evicted is not None:
            evicted += f" (latest {printable(self.last_evicted)})"
        return (
            f"since {format_rfc3339(since)}: {self.requests} drain requests; would have held,"
            f" by reason: {held}; build pods gone from the cordoned node (a drain evicts"
            f" them): {evicted}"
        )


@dataclass(frozen=True)
class PodStatus:
    """A build pod (or a pod builds depend on) seen on the node."""

    namespace: str
    name: str
    phase: str


@dataclass(frozen=True)
class InvalidInputStatus:
    """Malformed input the agent ignores: its kind (as the metric counts it), the annotation
    and value, and what is wrong with it."""

    kind: str
    what: str
    why: str


@dataclass(frozen=True)
class BootedImageStatus:
    """The booted OS image, where it was read, and why it could not be if it was not.

    ``source`` is a file path (the ostree origin) or a command (``rpm-ostree status --json``).
    """

    digest: str | None = None
    reference: str | None = None
    source: str | None = None
    error: str | None = None
    error_since: datetime | None = None  #: since when the read fails (retried meanwhile)


@dataclass(frozen=True)
class ReleaseFailingStatus:
    """A release the agent decided and could not write yet: retried until it lands, and
    alerted on (``DrainGuardReleaseFailing``) long before the MCD's one-hour drain timeout."""

    request: str
    outcome: str
    since: datetime
    attempts: int
    error: str

    def to_json(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "outcome": self.outcome,
            "since": format_rfc3339(self.since),
            "attempts": self.attempts,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReleaseFailingStatus:
        return cls(
            str(data["request"]),
            str(data["outcome"]),
            required_time(data["since"]),
            int(data["attempts"]),
            str(data["error"]),
        )

    def text(self, now: datetime) -> str:
        return (
            f"{printable(self.request)} ({self.outcome}) failing since"
            f" {format_rfc3339(self.since)} ({format_duration(now - self.since)},"
            f" {self.attempts} attempts): {printable(self.error)}"
        )


def required_time(value: str) -> datetime:
    parsed = parse_rfc3339_or_none(value)
    if parsed is None:
        raise ValueError("missing time")
    return parsed
