"""``/readyz``: synced watches, the Node found, and the API answering recently."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from drain_guard.status import readiness

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
STALE = timedelta(minutes=10)


def _ready(**overrides: object) -> tuple[bool, str]:
    args: dict[str, object] = {
        "node_synced": True,
        "pods_synced": True,
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
    assert _ready(node_synced=False) == (False, "node watch not synced")
    assert _ready(pods_synced=False) == (False, "pod watch not synced")
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
