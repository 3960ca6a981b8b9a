"""Watch bookmarks as the agent relies on them: a watch that allows them gets one before its
``timeoutSeconds`` ends it, and a watch resumed from that bookmark's resourceVersion neither
misses an event written in between nor repeats one (``drain_guard.kube.listwatch`` renews
its watches from the last bookmark instead of listing again).

The real server's watch cache (k8s.io/apiserver, storage/cacher) schedules a bookmark for
each watch that allows them about once a minute and 2 s before the watch's deadline (the
request's ``timeoutSeconds``), in one-second buckets; the bookmark carries the resourceVersion
the cache has reached for the resource, and is sent only if that is newer than what the watch
delivered last (the start counts as delivered: a watch from a resourceVersion skips the
writes it does not select up to the cache's present). So while each watch here runs, pods
are created on another node, as a cluster's other pods change: the cache moves on, and the
bookmark before the deadline is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

from tests.conformance.client import Client, JsonObj
from tests.conformance.objects import pod, pods_path
from tests.helpers import WAIT

#: Seconds: long enough for the bookmark 2 s before the end (within its one-second bucket).
TIMEOUT = "5"
#: Seconds between two pods created elsewhere while a watch runs.
ELSEWHERE_EVERY = 0.5

_names = itertools.count()


async def _all(events: AsyncIterator[JsonObj]) -> list[JsonObj]:
    return [e async for e in events]


async def _watch_while_busy(admin: Client, ns: str, **params: str) -> list[JsonObj]:
    """Every event of a pod watch of ``ns`` (to its timeout) while pods are created on the
    node ``<ns>-elsewhere``, which its ``spec.nodeName`` selector leaves out."""
    created = 0

    async def elsewhere() -> None:
        nonlocal created
        while True:
            name = f"elsewhere-{next(_names)}"
            await admin.ok("POST", pods_path(ns), pod(name, f"{ns}-elsewhere"))
            created += 1
            await asyncio.sleep(ELSEWHERE_EVERY)

    writer = asyncio.create_task(elsewhere())
    try:
        events = await asyncio.wait_for(_all(admin.watch(pods_path(ns), **params)), WAIT)
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
    assert created, "no pod created elsewhere during the watch"
    return events


async def _listed_at(admin: Client, ns: str, selector: str) -> str:
    """The resourceVersion of a list of the pods ``selector`` selects: where a watch starts."""
    listed = await admin.ok("GET", pods_path(ns), params={"fieldSelector": selector})
    return str(listed["metadata"]["resourceVersion"])


async def test_a_bookmark_comes_before_the_watch_times_out_and_only_when_allowed(
    admin: Client, ns: str
) -> None:
    """A watch that allows bookmarks and sees no event of its own still gets a BOOKMARK
    before its timeout, carrying a resourceVersion past its start (a plain bookmark: no
    annotation); the same watch without ``allowWatchBookmarks`` gets nothing."""
    selector = f"spec.nodeName={ns}-n0"
    rv = await _listed_at(admin, ns, selector)
    watch = {"fieldSelector": selector, "resourceVersion": rv, "timeoutSeconds": TIMEOUT}
    events = await _watch_while_busy(admin, ns, allowWatchBookmarks="true", **watch)
    assert events, "no bookmark before the watch's timeout"
    assert {e["type"] for e in events} == {"BOOKMARK"}
    mark = events[-1]["object"]
    assert (mark["kind"], mark["apiVersion"]) == ("Pod", "v1")
    assert int(mark["metadata"]["resourceVersion"]) > int(rv)
    assert set(mark["metadata"]) <= {"resourceVersion", "creationTimestamp"}
    assert await _watch_while_busy(admin, ns, **watch) == []


async def test_a_watch_resumed_from_a_bookmark_misses_nothing_and_repeats_nothing(
    admin: Client, ns: str
) -> None:
    """The agent's renewal: a watch sees its pod, then a bookmark past the writes it did not
    select, and times out; a pod is created while no watch is open; the watch resumed from
    the bookmark's resourceVersion starts (no 410) with that pod, and not the first again."""
    selector = f"spec.nodeName={ns}-n0"
    rv = await _listed_at(admin, ns, selector)
    await admin.ok("POST", pods_path(ns), pod("before", f"{ns}-n0"))
    first = await _watch_while_busy(
        admin,
        ns,
        fieldSelector=selector,
        resourceVersion=rv,
        allowWatchBookmarks="true",
        timeoutSeconds=TIMEOUT,
    )
    seen = [(e["type"], e["object"]["metadata"].get("name")) for e in first]
    assert seen[0] == ("ADDED", "before")
    assert first[-1]["type"] == "BOOKMARK", seen
    assert {t for t, _ in seen[1:]} == {"BOOKMARK"}
    mark = first[-1]["object"]["metadata"]["resourceVersion"]

    between = await admin.ok("POST", pods_path(ns), pod("between", f"{ns}-n0"))

    async def resumed() -> list[JsonObj]:
        events: list[JsonObj] = []
        async for event in admin.watch(
            pods_path(ns), fieldSelector=selector, resourceVersion=mark, timeoutSeconds="30"
        ):
            events.append(event)
            if event["type"] != "BOOKMARK":
                return events
        return events

    events = await asyncio.wait_for(resumed(), WAIT)
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "between")
    ]
    assert (
        events[0]["object"]["metadata"]["resourceVersion"]
        == (between["metadata"]["resourceVersion"])
    )
