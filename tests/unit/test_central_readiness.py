"""The central shield's /readyz and /status read its pod watch as the agent's do (issue 14):
listed once is not current, and a watch failing for longer than --api-stale-after is not
ready, though the pods it listed long ago are still in the cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from drain_guard.core.operations import Watched
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube.listwatch import WatchCache
from drain_guard.programs.central import CentralShield
from drain_guard.runtime.health import Health
from drain_guard.runtime.metrics import BaseMetrics
from drain_guard.shield.loop import Shield
from drain_guard.shield.plan import ShieldStatus

STALE_AFTER = timedelta(minutes=10)
MCO_NS = "openshift-machine-config-operator"


class _Shield:
    """Stands in for the Shield: its budgets listed and watching."""

    def status(self) -> ShieldStatus:
        return ShieldStatus(namespaces=(MCO_NS,), synced={MCO_NS: True})


def _central(pod_watch: WatchStatus) -> CentralShield:
    counters = Health(BaseMetrics())
    pods = WatchCache()
    pods.replace_pods([])  # the pod watch has listed once
    counters.watch_state(Watched.POD, pod_watch)
    counters.api_contact()  # the budget watches still answer
    return CentralShield(cast(Shield, _Shield()), pods, counters, STALE_AFTER)


def test_ready_while_the_pod_watch_is_watching() -> None:
    central = _central(WatchStatus(listed=True, watching=True))
    assert central.ready() == (True, "")
    assert central.status().synced == {"pod": True, "poddisruptionbudget": True}


def test_a_pod_watch_failing_longer_than_stale_after_is_not_ready_nor_synced() -> None:
    since = datetime.now(UTC) - STALE_AFTER - timedelta(minutes=1)
    central = _central(WatchStatus(listed=True, watching=False, failing_since=since, error="503"))
    ready, why = central.ready()
    assert not ready
    assert why.startswith("pod watch failing since ")
    assert central.status().synced["pod"] is False


def test_a_short_pod_watch_failure_keeps_it_ready_but_not_synced() -> None:
    since = datetime.now(UTC) - timedelta(seconds=30)
    central = _central(WatchStatus(listed=True, watching=False, failing_since=since, error="503"))
    assert central.ready() == (True, "")
    assert central.status().synced["pod"] is False
