"""``/readyz``: the watches listed and not failing for long, the Node found, and the API
answering recently."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from drain_guard.core.operations import Watched
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.health import Health

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
STALE = timedelta(minutes=10)
CURRENT = WatchStatus(listed=True, watching=True)


def _failing(since: timedelta, listed: bool = True) -> WatchStatus:
    return WatchStatus(listed=listed, failing_since=NOW - since, error="503 unavailable")


def _ready(
    watches: dict[Watched, WatchStatus] | None = None,
    node_found: bool = True,
    last_contact: datetime | None = NOW - timedelta(seconds=30),
) -> tuple[bool, str]:
    """The agent's readiness (controller.ready): health's rule, the Node found."""
    health = Health(Metrics(), clock=lambda: last_contact or NOW)
    if last_contact is not None:
        health.api_contact()
    watched = {Watched.NODE: CURRENT, Watched.POD: CURRENT} if watches is None else watches
    for resource, state in watched.items():
        health.watch_state(resource, state)
    also = None if node_found else "node worker-0 not found"
    return health.ready((Watched.NODE, Watched.POD), NOW, STALE, also=also)


def test_ready_when_synced_and_the_api_answered_recently() -> None:
    assert _ready() == (True, "")


def test_each_reason_is_named() -> None:
    assert _ready(watches={Watched.POD: CURRENT}) == (False, "node watch not listed yet")
    not_listed = {Watched.NODE: CURRENT, Watched.POD: _failing(timedelta(seconds=1), listed=False)}
    assert _ready(watches=not_listed) == (False, "pod watch not listed yet")
    failing = {Watched.NODE: _failing(timedelta(minutes=11)), Watched.POD: CURRENT}
    assert _ready(watches=failing) == (
        False,
        "node watch failing since 2026-11-30T11:49:00Z (503 unavailable; --api-stale-after 10m00s)",
    )
    assert _ready(node_found=False) == (False, "node worker-0 not found")
    ok, why = _ready(last_contact=None)
    assert not ok
    assert "API server not reached never" in why
    ok, why = _ready(last_contact=NOW - timedelta(minutes=11))
    assert not ok
    assert "since 2026-11-30T11:49:00Z" in why


@given(st.integers(min_value=0, max_value=3600))
def test_ready_exactly_while_contact_is_within_the_window(age: int) -> None:
    ok, _ = _ready(last_contact=NOW - timedelta(seconds=age))
    assert ok == (timedelta(seconds=age) <= STALE)


@given(st.integers(min_value=0, max_value=3600))
def test_a_listed_watch_failing_keeps_the_agent_ready_within_the_window(age: int) -> None:
    """A renewal that fails and is retried is no reason to flap; an outage longer than
    --api-stale-after is, even while the other watch keeps the contact time fresh."""
    ok, _ = _ready(watches={Watched.NODE: CURRENT, Watched.POD: _failing(timedelta(seconds=age))})
    assert ok == (timedelta(seconds=age) <= STALE)
