"""A watch's backoff starts over once the API answers it again, not at its next event.

A chaos run (seed 3, four test workers) stalled: the agent's pod watch, quiet on its node,
had its stream broken a few times over the run and never saw an event in between, so its
attempts added up and each re-watch waited longer (0 s, 1 s, 3 s, 6 s, 8 s in a replay),
the agent blind to a new build pod meanwhile. In-process: the agent's own list-watch
through the real client against the simulator, which breaks the stream (a reset
connection) each time.
"""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client as k8s

from drain_guard.core.operations import Watched
from drain_guard.kube.counters import NullCounters
from drain_guard.kube.listwatch import ListWatch, WatchCache
from drain_guard.kube.retry import Backoff
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from tests.helpers import NODE, WAIT


class _Recorded(Backoff):
    """The attempt each retry was delayed for."""

    def __init__(self) -> None:
        super().__init__(base=0.02)
        self.attempts: list[int] = []

    def next_delay(self, retry_after: float | None = None) -> float:
        delay = super().next_delay(retry_after)
        self.attempts.append(self.attempt)
        return delay


class _Contacts(NullCounters):
    """The API's answers the watch has had (a list, a watch started, a bookmark)."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = asyncio.Event()

    def api_contact(self) -> None:
        self.count += 1
        self.changed.set()

    async def beyond(self, count: int) -> None:
        async with asyncio.timeout(WAIT):
            while self.count <= count:
                self.changed.clear()
                await self.changed.wait()


async def test_each_broken_stream_of_a_quiet_watch_is_retried_at_the_first_step(
    api: SimApiServer,
) -> None:
    api.bookmark_interval = 3600.0  # no bookmark on the stream about to be broken
    backoff, cache, contacts = _Recorded(), WatchCache(), _Contacts()
    async with api.api_client(ADMIN) as client:
        watch = ListWatch(
            resource=Watched.POD,
            list_fn=k8s.CoreV1Api(client).list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={NODE}",
            replace=cache.replace_pods,
            apply=cache.apply_pod,
            counters=contacts,
            backoff=backoff,
        )
        task = asyncio.create_task(watch.run())
        try:
            await contacts.beyond(1)  # listed, then the watch answered
            for _ in range(4):
                answered = contacts.count
                assert api.cut_watches(abort=True) == 1
                await contacts.beyond(answered)  # watching again
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    # Four breaks, no pod event between them: each retry is a first one.
    assert backoff.attempts == [1, 1, 1, 1]
