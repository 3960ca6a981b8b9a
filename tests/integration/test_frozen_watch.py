"""A watch stream that goes silent (a half-open connection: no event, no bookmark, no end) is
reported silent after 1.5 bookmark periods, so that /readyz says so, and renewed after 2
(issue 27: it was noticed only after 3 minutes, /readyz 200 throughout).

In-process: the agent's own list-watch through the real client against the simulator, whose
bookmarks come every half second here, and the bookmark period the agent assumes likewise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

import pytest

from drain_guard.health import Health, WatchStatus
from drain_guard.kube import listwatch
from drain_guard.kube.client import Kube
from drain_guard.kube.listwatch import WatchCache
from drain_guard.kube.operations import Watched
from drain_guard.metrics import Metrics
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from tests.helpers import NODE, WAIT

PERIOD = 0.5


class _Observed(Health):
    """The agent's counters, and an event on each change of a watch's state."""

    def __init__(self) -> None:
        super().__init__(Metrics())
        self.changed = asyncio.Event()

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        super().watch_state(resource, state)
        self.changed.set()

    async def until(self, predicate: object) -> WatchStatus:
        async with asyncio.timeout(WAIT):
            while True:
                state = self.watches.get(Watched.NODE, WatchStatus())
                if predicate(state):  # type: ignore[operator]
                    return state
                self.changed.clear()
                await self.changed.wait()


def _ready(counters: _Observed) -> tuple[bool, str]:
    """The agent's rule on the node watch (the pod watch taken as current)."""
    counters.api_contact()
    return counters.ready((Watched.NODE,), datetime.now(UTC), timedelta(minutes=10))


async def _seen(api: SimApiServer, cache: WatchCache, value: str) -> None:
    """Write the Node and wait until the watch has brought the write into the cache."""
    api.patch("nodes", NODE, {"metadata": {"annotations": {"x": value}}})
    async with asyncio.timeout(WAIT):
        while cache.node is None or cache.node.annotations.get("x") != value:
            cache.changed.clear()
            await cache.changed.wait()


async def test_a_frozen_watch_is_reported_silent_then_renewed_within_two_bookmark_periods(
    api: SimApiServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(listwatch, "BOOKMARK_PERIOD", PERIOD)
    api.bookmark_interval = PERIOD
    caplog.set_level(logging.INFO, logger="drain_guard.kube")
    counters = _Observed()
    cache = WatchCache()
    async with api.api_client(ADMIN) as api_client:
        watch = asyncio.create_task(Kube(api_client, counters).watch_node(NODE, cache))
        try:
            await counters.until(lambda s: s.synced)
            assert _ready(counters) == (True, "")
            await _seen(api, cache, "before")  # the watch stream is open
            watches_before = api.request_count(verb="watch", resource="nodes")
            assert api.freeze_watches(resource="nodes") == 1

            silent = await counters.until(lambda s: s.silent)
            assert not silent.watching
            assert silent.error == f"no event or bookmark for {1.5 * PERIOD:g}s"
            ok, why = _ready(counters)
            assert not ok
            assert why.startswith("node watch silent since ")

            # Renewed: a new watch, current again, and what changes reaches the cache.
            await counters.until(lambda s: s.synced and not s.silent)
            assert api.request_count(verb="watch", resource="nodes") > watches_before
            assert _ready(counters) == (True, "")
            await _seen(api, cache, "after")
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
    renewed = [
        r.getMessage() for r in caplog.records if "a frozen stream, renewed" in r.getMessage()
    ]
    assert renewed, [r.getMessage() for r in caplog.records]
    assert f"no event or bookmark for {2 * PERIOD:g}s" in renewed[0]
