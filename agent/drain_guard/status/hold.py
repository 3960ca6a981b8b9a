"""A hold as ``/status`` and ``drain-guard status`` both show it: one typed model, one JSON,
one text, so that the agent's view and the CLI's never tell a hold differently.

Pure: ``now`` is given, nothing here reads a clock. The agent builds a :class:`HoldView`
from its decision (``AgentStatus.hold_view()``), the CLI from the Node's annotations alone
(``drain_guard.status.node.node_state``); the hold's end is the one on the Node
(``hold-expires``), so neither needs the agents' ``--max-hold``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from drain_guard.core.durations import format_duration
from drain_guard.protocol import format_rfc3339, format_rfc3339_or_none, parse_rfc3339_or_none
from drain_guard.status.holdrequest import printable, stalled

#: What a reader of an older agent's record, which has no ``hold-expires``, is told instead.
UNKNOWN_END = (
    "unknown: an older agent's record, without hold-expires (it ends at the latest its"
    " --max-hold after held-since)"
)


@dataclass(frozen=True)
class HoldReasonStatus:
    """One reason a drain is held, and its detail (which pods, which digests)."""

    reason: str
    detail: str


@dataclass(frozen=True)
class HoldView:
    """A drain-guard hold in force on ``node``: the held request, since when, until when at
    the latest (``expires_at``; None when the record does not say), why, what releases it,
    and the pool whose rollout waits on it. ``since`` is None when the record is unreadable
    (the reader says why)."""

    node: str
    held_request: str
    since: datetime | None = None
    expires_at: datetime | None = None
    reasons: tuple[HoldReasonStatus, ...] = ()
    releases_when: tuple[str, ...] = ()
    pool: str | None = None

    def time_left(self, now: datetime) -> timedelta | None:
        """Time until the hold expires at ``now`` (never negative); None when unknown."""
        if self.expires_at is None:
            return None
        return max(timedelta(0), self.expires_at - now)

    def to_json(self, now: datetime) -> dict[str, Any]:
        """The hold's keys, named and shaped as ``/status`` names them (docs/status.md)."""
        left = self.time_left(now)
        return {
            "heldRequest": self.held_request,
            "holdReasons": reasons_json(self.reasons),
            "since": format_rfc3339_or_none(self.since),
            "expiresAt": format_rfc3339_or_none(self.expires_at),
            "timeLeftSeconds": None if left is None else int(left.total_seconds()),
            "releasesWhen": list(self.releases_when),
            "pool": self.pool,
        }

    @classmethod
    def from_json(cls, node: str, data: Mapping[str, Any]) -> HoldView:
        """The inverse of :meth:`to_json`; raises KeyError/ValueError if malformed."""
        return cls(
            node=node,
            held_request=str(data["heldRequest"]),
            since=parse_rfc3339_or_none(data["since"]),
            expires_at=parse_rfc3339_or_none(data["expiresAt"]),
            reasons=reasons_from_json(data["holdReasons"]),
            releases_when=tuple(str(c) for c in data["releasesWhen"]),
            pool=data["pool"],
        )

    def text_lines(self, now: datetime) -> list[str]:
        """The hold's lines of both text views: the request, its start and end, the reasons,
        what releases it (the release command last) and the pool waiting on it."""
        lines = [f"  held request:  {printable(self.held_request)}"]
        if self.since is not None:
            age = format_duration(now - self.since)
            lines.append(f"  held since:    {format_rfc3339(self.since)} ({age} ago)")
            if self.expires_at is None:
                lines.append(f"  expires:       {UNKNOWN_END}")
            else:
                left = format_duration(max(timedelta(0), self.expires_at - now))
                lines.append(
                    f"  expires:       {format_rfc3339(self.expires_at)} (in {left}; "
                    "then released with outcome expired)"
                )
        lines += reason_lines(self.reasons, self.releases_when)
        lines.append(f"  released:      now by drain-guard release --node-name {self.node}")
        if self.pool is not None:
            lines.append(f"  pool:          {stalled(printable(self.pool), self.node)}")
        return lines


def reason_lines(reasons: Sequence[HoldReasonStatus], releases_when: Sequence[str]) -> list[str]:
    """The reasons of a hold (or of a would-be hold) and what clears each."""
    lines = [f"  reason:        {r.reason}: {printable(r.detail)}" for r in reasons]
    lines += [f"  released:      {condition}" for condition in releases_when]
    return lines


def reasons_json(reasons: Sequence[HoldReasonStatus]) -> list[dict[str, str]]:
    return [{"reason": r.reason, "detail": r.detail} for r in reasons]


def reasons_from_json(data: Sequence[Mapping[str, Any]]) -> tuple[HoldReasonStatus, ...]:
    return tuple(HoldReasonStatus(str(r["reason"]), str(r["detail"])) for r in data)
