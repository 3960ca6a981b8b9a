"""``/readyz``: the watches listed and not failing for long, the Node found, and the API
answering recently."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from drain_guard.status import WatchStatus, readiness

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
STALE = timedelta(minutes=10)
CURRENT = WatchStatus(listed=True, watching=True)


def _failing(since: timedelta, listed: bool = True) -> WatchStatus:
    return WatchStatus(listed=listed, failing_since=NOW - since, error="503 unavailable")


def _ready(**overrides: object) -> tuple[bool, str]:
    args: dict[str, object] = {
        "watches": {"node": CURRENT, "pod": CURRENT},
        "node_found": True,
        "node_name": "worker-0",
        "last_contact": NOW - timedelta(seconds=30),
        "now": NOW,
        "stale_after": STALE,
    }
    args.update(overrides)
    return readiness(**args)  # type: ignore[arg-type]


def test_ready_when_synced_and_the_api_answered_recently() -> None:
    assert _ready() == (True, "")


def test_each_reason_is_named() -> None:
    assert _ready(watches={"pod": CURRENT}) == (False, "node watch not listed yet")
    not_listed = {"node": CURRENT, "pod": _failing(timedelta(seconds=1), listed=False)}
    assert _ready(watches=not_listed) == (False, "pod watch not listed yet")
    failing = {"node": _failing(timedelta(minutes=11)), "pod": CURRENT}
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
    ok, _ = _ready(watches={"node": CURRENT, "pod": _failing(timedelta(seconds=age))})
    assert ok == (timedelta(seconds=age) <= STALE)
