"""How one watch stands, as the API client reports it (pure): ``WatchStatus``.

The API client (``kube.listwatch``) reports it to its ``Counters``; ``health.Health`` keeps it
and ``/status`` shows it. It lives with the client so that the client imports nothing of the
programs' health.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from drain_guard.core.durations import format_duration
from drain_guard.protocol import format_rfc3339, parse_rfc3339


@dataclass(frozen=True)
class WatchStatus:
    """One watch: whether it has listed since start (the agent has a full view, possibly old),
    whether it is watching now (its last request was answered and nothing failed since), and
    since when and why not. ``synced`` is both: the view is complete and current."""

    listed: bool = False
    watching: bool = False
    failing_since: datetime | None = None
    error: str | None = None
    #: The stream went quiet (no event, no bookmark) and a read found changes it had not
    #: delivered: frozen (a half-open connection), until its renewal is answered. A quiet
    #: stream that the read finds current is merely idle, and not silent.
    silent: bool = False
    #: When a read last found the quiet stream (no event, no bookmark for 1.5 bookmark
    #: periods) current: merely idle. None once it delivers something again.
    idle_confirmed_at: datetime | None = None

    @property
    def synced(self) -> bool:
        return self.listed and self.watching

    def to_json(self) -> dict[str, Any]:
        return {
            "listed": self.listed,
            "watching": self.watching,
            "failingSince": None
            if self.failing_since is None
            else format_rfc3339(self.failing_since),
            "error": self.error,
            "silent": self.silent,
            "idleConfirmedAt": None
            if self.idle_confirmed_at is None
            else format_rfc3339(self.idle_confirmed_at),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WatchStatus:
        since = data["failingSince"]
        confirmed = data.get("idleConfirmedAt")  # absent from older agents' /status
        return cls(
            listed=bool(data["listed"]),
            watching=bool(data["watching"]),
            failing_since=None if since is None else parse_rfc3339(since),
            error=data["error"],
            silent=bool(data.get("silent", False)),  # absent from older agents' /status
            idle_confirmed_at=None if confirmed is None else parse_rfc3339(confirmed),
        )

    def to_text(self, now: datetime) -> str:
        """``synced``, or what is missing: ``NOT synced: failing since … (2m05s: 503 …)``."""
        if self.synced and self.idle_confirmed_at is not None:
            return f"synced (idle, confirmed by a read at {format_rfc3339(self.idle_confirmed_at)})"
        if self.synced:
            return "synced"
        if self.failing_since is None:
            return "NOT synced: not listed yet"
        age = format_duration(now - self.failing_since)
        stale = "" if self.listed else ", not listed yet"
        since = format_rfc3339(self.failing_since)
        return f"NOT synced: failing since {since} ({age}: {self.error}){stale}"

    @classmethod
    def of_all(cls, states: Sequence[WatchStatus]) -> WatchStatus:
        """Several watches of one resource seen as one (``kube.counters.WatchGroup``): listed
        and watching only when each is, failing since the earliest, silent if any is, idle
        (confirmed since the earliest confirmation) only when each is."""
        failing = [s.failing_since for s in states if s.failing_since is not None]
        confirmed = [s.idle_confirmed_at for s in states if s.idle_confirmed_at is not None]
        return cls(
            listed=all(s.listed for s in states),
            watching=all(s.watching for s in states),
            failing_since=min(failing, default=None),
            error=next((s.error for s in states if s.error), None),
            silent=any(s.silent for s in states),
            idle_confirmed_at=min(confirmed) if len(confirmed) == len(states) else None,
        )
