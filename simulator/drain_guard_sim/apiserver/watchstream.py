"""Watch streaming: a watch's events, one JSON line each, with BOOKMARKs every
``bookmark_interval`` and 2 s before the stream's deadline, the initial-events-end bookmark,
a frozen stream's silence and an aborted one's broken connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from drain_guard_sim.apiserver.errors import ApiError
from drain_guard_sim.apiserver.resources import ResourceType
from drain_guard_sim.apiserver.store import Store
from drain_guard_sim.apiserver.watchcache import Watcher

__all__ = ["stream"]

JsonObj = dict[str, Any]


async def stream(
    request: web.Request,
    store: Store,
    rt: ResourceType,
    watcher: Watcher | None,
    expired: ApiError | None,
    *,
    timeout: float,  # noqa: ASYNC109 (the stream's own deadline, served to the client)
    bookmark_interval: float,
    bookmarks: bool,
    send_initial: bool,
    count: Callable[[JsonObj | None, int], None],
) -> web.StreamResponse:
    """Answer ``request`` with ``watcher``'s events until ``timeout`` (or ``expired``'s 410
    as the one event); ``count`` is told each event sent and its size, and at the end the
    bookmarks' bytes (with None)."""
    response = web.StreamResponse(status=200)
    response.content_type = "application/json"
    response.enable_chunked_encoding()
    await response.prepare(request)
    if expired is not None:
        await _send(response, "ERROR", expired.status)
        await response.write_eof()
        return response
    assert watcher is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    def next_bookmark_at(now: float) -> float | None:
        # cacheWatcher.nextBookmarkTime: every interval, and 2 s before the deadline.
        at = min(now + bookmark_interval, deadline - 2.0)
        return at if at > now else None

    next_bookmark = next_bookmark_at(loop.time()) if bookmarks else None
    if send_initial and bookmarks:
        # the initial events are queued; the end-of-initial-events bookmark follows them
        watcher.queue.put_nowait(("__INITIAL_END__", {}))
    aborted = False
    sent = 0  # bookmark bytes
    try:
        while True:
            now = loop.time()
            if now >= deadline:
                break
            if next_bookmark is not None and now >= next_bookmark and watcher.queue.empty():
                sent += await _send_bookmark(response, store, rt)
                next_bookmark = next_bookmark_at(loop.time())
                continue
            if not watcher.queue.empty():
                # Queued events first: with a bookmark due the wait below would be 0,
                # and wait_for(get(), 0) cancels the get before it runs (a livelock).
                item = watcher.queue.get_nowait()
            else:
                wait = deadline - now
                if next_bookmark is not None:
                    wait = min(wait, max(0.0, next_bookmark - now))
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    continue
            if item is None:
                aborted = watcher.abort
                break
            event_type, obj = item
            if event_type == "__INITIAL_END__":
                sent += await _send_bookmark(response, store, rt, initial_end=True)
                continue
            if event_type == "__FROZEN__":
                await asyncio.sleep(max(0.0, deadline - loop.time()))  # silent to the end
                break
            size = await _send(response, event_type, obj)
            count(obj, size)
    except ConnectionResetError:
        # The client hung up (an agent stopped or rebooted): the stream just ends. Raised
        # on, aiohttp would log it as an unhandled error with a traceback.
        return response
    finally:
        store.unwatch(watcher)
        count(None, sent)
    if aborted:
        if request.transport is not None:
            request.transport.abort()
        return response
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


async def _send(response: web.StreamResponse, event_type: str, obj: JsonObj) -> int:
    """Write one watch event; returns its size in bytes."""
    line = json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode()
    await response.write(line + b"\n")
    return len(line) + 1


async def _send_bookmark(
    response: web.StreamResponse, store: Store, rt: ResourceType, *, initial_end: bool = False
) -> int:
    metadata: JsonObj = {
        "resourceVersion": str(store.resource_version),
        "creationTimestamp": None,
    }
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return await _send(
        response, "BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version,
                               "metadata": metadata}
    )  # fmt: skip
