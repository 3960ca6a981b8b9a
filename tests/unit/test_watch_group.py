"""Several watches of one resource are one watch in /status, /readyz and the metrics
(`kube.counters.WatchGroup`): the agent's pod watch and those of its blocking-pod
namespaces, the central shield's pod watches. Each member's state counts; before the group,
the last watch to report replaced the others' state, so a healthy one hid a failing one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from drain_guard.core.operations import Watched
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube.counters import WatchGroup
from drain_guard.runtime.health import Health
from drain_guard.runtime.metrics import BaseMetrics

SYNCED = WatchStatus(listed=True, watching=True)
STALE_AFTER = timedelta(minutes=10)
LONG_AGO = datetime.now(UTC) - STALE_AFTER - timedelta(minutes=1)
FAILING = WatchStatus(listed=True, watching=False, failing_since=LONG_AGO, error="403 Forbidden")


def _group(size: int) -> tuple[Health, WatchGroup]:
    health = Health(BaseMetrics())
    health.api_contact()
    return health, WatchGroup(health, size)


def test_a_member_failing_is_not_hidden_by_another_reporting_after_it() -> None:
    health, group = _group(2)
    group.member(1).watch_state(Watched.POD, FAILING)  # a blocking-pod namespace's watch
    group.member(0).watch_state(Watched.POD, SYNCED)  # the pod watch, reporting later
    seen = health.watch(Watched.POD)
    assert not seen.synced
    assert (seen.failing_since, seen.error) == (LONG_AGO, "403 Forbidden")
    ready, why = health.ready((Watched.POD,), datetime.now(UTC), STALE_AFTER)
    assert not ready
    assert why.startswith("pod watch failing since ")


def test_the_group_is_synced_only_once_each_member_is() -> None:
    health, group = _group(3)
    group.member(0).watch_state(Watched.POD, SYNCED)
    group.member(2).watch_state(Watched.POD, SYNCED)
    assert not health.watch(Watched.POD).synced  # member 1 has not listed
    group.member(1).watch_state(Watched.POD, SYNCED)
    assert health.watch(Watched.POD).synced
    assert health.ready((Watched.POD,), datetime.now(UTC), STALE_AFTER) == (True, "")


def test_a_silent_member_makes_the_group_silent() -> None:
    health, group = _group(2)
    group.member(0).watch_state(Watched.POD, SYNCED)
    group.member(1).watch_state(Watched.POD, WatchStatus(listed=True, watching=True, silent=True))
    assert health.watch(Watched.POD).silent


def test_a_group_of_one_reports_its_watch_as_it_is() -> None:
    health, group = _group(1)
    group.member(0).watch_state(Watched.POD, FAILING)
    assert health.watch(Watched.POD) == FAILING


def test_a_group_is_idle_confirmed_only_when_each_member_is() -> None:
    """Since the earliest confirmation; a member that delivers again makes the group not idle."""
    early, late = datetime(2026, 3, 1, 12, tzinfo=UTC), datetime(2026, 3, 1, 12, 1, tzinfo=UTC)
    idle = [
        WatchStatus(listed=True, watching=True, idle_confirmed_at=early),
        WatchStatus(listed=True, watching=True, idle_confirmed_at=late),
    ]
    assert WatchStatus.of_all(idle).idle_confirmed_at == early
    assert WatchStatus.of_all([*idle, WatchStatus(listed=True, watching=True)]).synced
    assert WatchStatus.of_all([*idle, WatchStatus(listed=True, watching=True)]) == WatchStatus(
        listed=True, watching=True
    )
    assert WatchStatus.from_json(WatchStatus.of_all(idle).to_json()).idle_confirmed_at == early
