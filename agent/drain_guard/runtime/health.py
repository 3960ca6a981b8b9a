"""A program's API health in one place: each watch's state, the last API contact, and the one
readiness rule of ``/readyz`` (the agent's and the central shield's alike).

:class:`Health` is what the I/O layer reports to (``drain_guard.kube.counters.Counters``): it
keeps the state and is the only writer of the health metrics (``drain_guard_synced``,
``drain_guard_last_api_contact_timestamp_seconds``, API errors, watch restarts, credential
refusals), through :class:`HealthMetrics`. Pure: the clock is given; the metric objects (and
their registry) stay with ``drain_guard.runtime.metrics``, which needs prometheus_client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Protocol

from drain_guard.core.durations import format_duration
from drain_guard.core.operations import Operation, Watched
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.protocol import format_rfc3339


class HealthMetrics(Protocol):
    """Where :class:`Health` shows what it is told (``drain_guard.runtime.metrics.BaseMetrics``)."""

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
        why = watch_unready(str(resource), watches.get(resource, WatchStatus()), now, stale_after)
        if why is not None:
            return why
    return None


def watch_unready(
    name: str, watch: WatchStatus, now: datetime, stale_after: timedelta
) -> str | None:
    """The one rule on a watch the program needs (named ``name``): why it is not ready (not
    listed, silent, failing for longer than ``stale_after``), or None."""
    if not watch.listed:
        return f"{name} watch not listed yet"
    since = watch.failing_since
    if watch.silent and since is not None:
        return f"{name} watch silent since {format_rfc3339(since)} ({watch.error})"
    if not watch.watching and since is not None and now - since > stale_after:
        return (
            f"{name} watch failing since {format_rfc3339(since)} ({watch.error};"
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
