"""A watch stream that freezes (a half-open connection: no event, no bookmark, no end) while
its object changes is found behind by the read that checks a stream quiet for 1.5 bookmark
periods: reported silent (/readyz says so) and renewed at once, and the change arrives
(issue 27: it was noticed only after 3 minutes, /readyz 200 throughout). A frozen stream
whose objects do not change is merely idle to the agent: the read finds it current.

In-process: the agent's own list-watch through the real client against the simulator, whose
bookmarks come every half second here, and the bookmark period the agent assumes likewise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

import pytest

from drain_guard.core.operations import Watched
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube import listwatch
from drain_guard.kube.client import Kube
from drain_guard.kube.listwatch import WatchCache
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.health import Health
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from tests.helpers import NODE, WAIT

PERIOD = 0.5


class _Observed(Health):
    """The agent's counters, and an event on each change of a watch's state."""

    def __init__(self) -> None:
        super().__init__(Metrics())
        self.changed = asyncio.Event()
        #: Every state the node watch reported, and /readyz's rule at that moment.
        self.node_states: list[tuple[WatchStatus, tuple[bool, str]]] = []
        self.restarts: list[str] = []
        #: Answers from the API: events, bookmarks, lists (a quiet stream's checks).
        self.contacts = 0

    def api_contact(self) -> None:
        super().api_contact()
        self.contacts += 1
        self.changed.set()

    async def until_contacts(self, count: int) -> None:
        async with asyncio.timeout(WAIT):
            while self.contacts < count:
                self.changed.clear()
                await self.changed.wait()

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        super().watch_state(resource, state)
        if resource is Watched.NODE:
            self.node_states.append((state, _ready(self)))
        self.changed.set()

    def watch_restart(self, resource: Watched, reason: str) -> None:
        super().watch_restart(resource, reason)
        self.restarts.append(reason)

    async def until(self, predicate: object) -> WatchStatus:
        async with asyncio.timeout(WAIT):
            while True:
                state = self.watches.get(Watched.NODE, WatchStatus())
                if predicate(state):  # type: ignore[operator]
                    return state
                self.changed.clear()
                await self.changed.wait()


def _ready(counters: _Observed) -> tuple[bool, str]:
    """The agent's rule on the node watch (the pod watch and the API taken as current)."""
    now = datetime.now(UTC)
    counters.last_contact = now
    return counters.ready((Watched.NODE,), now, timedelta(minutes=10))


def _write(api: SimApiServer, value: str) -> None:
    api.patch("nodes", NODE, {"metadata": {"annotations": {"x": value}}})


async def _seen(cache: WatchCache, value: str) -> None:
    """Wait until the watch has brought the Node's write of ``value`` into the cache."""
    async with asyncio.timeout(WAIT):
        while cache.node is None or cache.node.annotations.get("x") != value:
            cache.changed.clear()
            await cache.changed.wait()


async def test_a_frozen_watch_that_misses_a_change_is_reported_silent_and_renewed(
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
            _write(api, "before")
            await _seen(cache, "before")  # the watch stream is open
            watches_before = api.request_count(verb="watch", resource="nodes")
            assert api.freeze_watches(resource="nodes") == 1
            _write(api, "missed")  # the frozen stream does not deliver it

            # The read finds the stream behind; renewed, the watch brings the write.
            await _seen(cache, "missed")
            await counters.until(lambda s: s.synced and not s.silent)
            assert api.request_count(verb="watch", resource="nodes") > watches_before
            assert _ready(counters) == (True, "")
            silent = [(state, ready) for state, ready in counters.node_states if state.silent]
            assert silent, counters.node_states
            state, (ok, why) = silent[0]
            assert not state.watching
            assert state.error == (
                f"no event or bookmark for {1.5 * PERIOD:g}s, and a read found changes it missed"
            )
            assert not ok
            assert why.startswith("node watch silent since ")
            assert counters.restarts.count("frozen") == 1, counters.restarts
            _write(api, "after")
            await _seen(cache, "after")
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
    renewed = [
        r.getMessage() for r in caplog.records if "a frozen stream, renewed" in r.getMessage()
    ]
    assert len(renewed) == 1, [r.getMessage() for r in caplog.records]


async def test_a_frozen_watch_whose_node_does_not_change_is_idle_and_kept(
    api: SimApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No bookmark, no event, for several quiet periods: each read finds the cache current
    (one LIST each), so the stream is kept, never silent, and /readyz stays ready."""
    monkeypatch.setattr(listwatch, "BOOKMARK_PERIOD", PERIOD)
    api.bookmark_interval = PERIOD
    counters = _Observed()
    cache = WatchCache()
    async with api.api_client(ADMIN) as api_client:
        watch = asyncio.create_task(Kube(api_client, counters).watch_node(NODE, cache))
        try:
            await counters.until(lambda s: s.synced)
            _write(api, "before")
            await _seen(cache, "before")  # the watch stream is open
            watches = api.request_count(verb="watch", resource="nodes")
            lists = api.request_count(verb="list", resource="nodes")
            assert api.freeze_watches(resource="nodes") == 1
            # Frozen, the stream brings nothing: each answer now is a check's LIST.
            await counters.until_contacts(counters.contacts + 3)
            assert api.request_count(verb="list", resource="nodes") >= lists + 3
            assert api.request_count(verb="watch", resource="nodes") == watches
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
    assert not [s for s, _ in counters.node_states if s.silent or not s.synced][1:]
    confirmed = [s.idle_confirmed_at for s, _ in counters.node_states if s.idle_confirmed_at]
    assert len(confirmed) >= 3, counters.node_states
    assert confirmed == sorted(confirmed)
    assert (
        counters.watch(Watched.NODE)
        .to_text(datetime.now(UTC))
        .startswith("synced (idle, confirmed by a read at ")
    )
    assert counters.restarts == []
    assert _ready(counters) == (True, "")
