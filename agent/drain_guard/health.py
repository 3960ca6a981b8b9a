"""A program's API health in one place: each watch's state, the last API contact, and the one
readiness rule of ``/readyz`` (the agent's and the central shield's alike).

:class:`Health` is what the I/O layer reports to (``drain_guard.kube.counters.Counters``): it
keeps the state and is the only writer of the health metrics (``drain_guard_synced``,
``drain_guard_last_api_contact_timestamp_seconds``, API errors, watch restarts, credential
refusals), through :class:`HealthMetrics`. Pure: the clock is given; the metric objects (and
their registry) stay with ``drain_guard.metrics``, which needs prometheus_client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from drain_guard.kube.operations import Operation, Watched
from drain_guard.protocol import format_rfc3339, parse_rfc3339


def format_duration(delta: timedelta) -> str:
    """``3d04h`` (from 48 hours), ``1h02m``, ``12m05s``, ``7s``: short, for humans."""
    seconds = max(0, int(delta.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 48:
        return f"{hours // 24}d{hours % 24:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


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


class HealthMetrics(Protocol):
    """Where :class:`Health` shows what it is told (``drain_guard.metrics.BaseMetrics``)."""

    def count_api_error(self, operation: Operation) -> None: ...

    def api_contact(self, when: datetime) -> None: ...

    def count_watch_restart(self, resource: Watched, reason: str) -> None: ...

    def set_synced(self, resource: Watched, synced: bool) -> None: ...

    def count_credentials_read(self, identity: str) -> None: ...

    def set_credentials_refused(self, identity: str, refused: bool) -> None: ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Health:
    """A program's API health: what its watches and calls report (it is their
    ``kube.Counters``), kept for ``/status`` and ``/readyz`` and shown in the metrics."""

    def __init__(self, metrics: HealthMetrics, clock: Callable[[], datetime] = _utc_now) -> None:
        self.metrics = metrics
        self.clock = clock
        self.last_contact: datetime | None = None
        self.watches: dict[Watched, WatchStatus] = {}

    def watch(self, resource: Watched) -> WatchStatus:
        """The state of the watch of ``resource`` (not listed yet if it never reported)."""
        return self.watches.get(resource, WatchStatus())

    # kube.Counters

    def api_error(self, operation: Operation, status: int) -> None:
        self.metrics.count_api_error(operation)

    def api_contact(self) -> None:
        self.last_contact = self.clock()
        self.metrics.api_contact(self.last_contact)

    def watch_restart(self, resource: Watched, reason: str) -> None:
        self.metrics.count_watch_restart(resource, reason)

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        self.watches[resource] = state
        self.metrics.set_synced(resource, state.synced)

    def credentials_read(self, identity: str) -> None:
        self.metrics.count_credentials_read(identity)

    def credentials_refused(self, identity: str, refused: bool) -> None:
        self.metrics.set_credentials_refused(identity, refused)

    # The readiness rule

    def ready(
        self,
        watched: tuple[Watched, ...],
        now: datetime,
        stale_after: timedelta,
        also: str | None = None,
    ) -> tuple[bool, str]:
        """``/readyz`` of every program: the watches of ``watched`` listed, not silent and not
        failing for longer than ``stale_after`` (a renewal retried keeps a program ready);
        then the program's own condition, ``also`` (why it is not ready, or None); then the
        API answered within ``stale_after`` (a program cut off from the API cannot act, and
        should say so)."""
        why = (
            _watches_unready(self.watches, watched, now, stale_after)
            or also
            or _contact_unready(self.last_contact, now, stale_after)
        )
        return why is None, why or ""


def _watches_unready(
    watches: Mapping[Watched, WatchStatus],
    resources: tuple[Watched, ...],
    now: datetime,
    stale_after: timedelta,
) -> str | None:
    """Why the first of ``resources``' watches is not ready, or None."""
    for resource in resources:
        watch = watches.get(resource, WatchStatus())
        if not watch.listed:
            return f"{resource} watch not listed yet"
        since = watch.failing_since
        if watch.silent and since is not None:
            return f"{resource} watch silent since {format_rfc3339(since)} ({watch.error})"
        if not watch.watching and since is not None and now - since > stale_after:
            return (
                f"{resource} watch failing since {format_rfc3339(since)} ({watch.error};"
                f" --api-stale-after {format_duration(stale_after)})"
            )
    return None


def _contact_unready(
    last_contact: datetime | None, now: datetime, stale_after: timedelta
) -> str | None:
    """Why the API counts as not heard from (never, or not within ``stale_after``), or None."""
    if last_contact is not None and now - last_contact <= stale_after:
        return None
    last = "never" if last_contact is None else f"since {format_rfc3339(last_contact)}"
    return f"API server not reached {last} (--api-stale-after {format_duration(stale_after)})"
