"""Pod watch events with missing fields or of the wrong shape, through the agent's ListWatch.

A fake API client plays the server: a list, then a watch stream carrying odd objects. The
watch must not die (the agent would lose its pod view), must keep the cache consistent,
and must never turn an unreadable pod into a finished one (that would let a drain evict a
build that is still running).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from drain_guard.core.operations import Watched
from drain_guard.kube.counters import NullCounters
from drain_guard.kube.listwatch import ListWatch, WatchCache

MCO_NS = "openshift-machine-config-operator"
BUILD = {"openshift.io/build.name": "build-rendered-worker-x"}


class _Content:
    """The watch stream's body, read as aiohttp's StreamReader is: ``readany`` gives the
    next chunk (a line here); after the last one the stream stays open, as a watch does."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = list(lines)

    async def readany(self) -> bytes:
        if self.lines:
            return self.lines.pop(0)
        await asyncio.Event().wait()
        return b""


class _Response:
    def __init__(self, body: Any = None, lines: list[bytes] | None = None) -> None:
        self.status = 200
        self.body = body
        self.content = _Content(lines or [])

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def text(self) -> str:
        return json.dumps(self.body)


class _Counters(NullCounters):
    def __init__(self) -> None:
        self.errors: list[tuple[str, int]] = []
        self.restarts: list[tuple[str, str]] = []

    def api_error(self, operation: str, status: int) -> None:
        self.errors.append((operation, status))

    def watch_restart(self, resource: str, reason: str) -> None:
        self.restarts.append((resource, reason))


def _event(kind: str, obj: Any) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


async def _watch(events: list[bytes]) -> tuple[WatchCache, _Counters, asyncio.Task[None]]:
    listed = {
        "metadata": {"resourceVersion": "10"},
        "items": [
            {
                "metadata": {"name": "b-build", "namespace": MCO_NS, "labels": BUILD},
                "status": {"phase": "Running"},
            }
        ],
    }
    calls = 0

    async def list_fn(**kwargs: Any) -> _Response:
        nonlocal calls
        calls += 1
        if kwargs.get("watch"):
            return _Response(lines=events if calls == 2 else [])
        return _Response(body=listed)

    cache, counters = WatchCache(), _Counters()
    watch = ListWatch(
        Watched.POD,
        list_fn,
        "spec.nodeName=worker-0",
        cache.replace_pods,
        cache.apply_pod,
        counters,
    )
    task = asyncio.create_task(watch.run())
    for _ in range(50):
        await asyncio.sleep(0)
    return cache, counters, task


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_missing_fields_are_kept_and_never_read_as_finished() -> None:
    events = [
        # The build pod loses its status: its phase is unknown, not "Succeeded".
        _event("MODIFIED", {"metadata": {"name": "b-build", "namespace": MCO_NS, "labels": BUILD}}),
        _event("ADDED", {"metadata": {"name": "no-labels", "namespace": "x", "labels": None}}),
        _event(
            "ADDED",
            {
                "metadata": {"name": "owners", "namespace": "x", "ownerReferences": [{}]},
                "status": {},
            },
        ),
        _event("ADDED", {"metadata": {"namespace": "x"}}),
    ]
    cache, _, task = await _watch(events)
    try:
        assert not task.done()
        build = cache.pods[(MCO_NS, "b-build")]
        assert build.phase not in ("Succeeded", "Failed")
        assert cache.pods[("x", "no-labels")].labels == {}
        assert cache.pods[("x", "owners")].owners == (("", ""),)
        assert cache.pods_synced
    finally:
        await _stop(task)


@pytest.mark.parametrize(
    "line",
    [
        b"this is not json\n",
        _event("ADDED", "a string, not an object"),
        _event("ADDED", {"metadata": "not a mapping"}),
        _event("ADDED", {"metadata": {"name": "x", "labels": ["not", "a", "mapping"]}}),
        b'{"object": {}}\n',
    ],
)
async def test_events_of_the_wrong_shape_do_not_kill_the_watch(line: bytes) -> None:
    """A garbled event is an error of the stream: counted, re-listed, the watch lives on."""
    cache, counters, task = await _watch([line])
    try:
        assert not task.done(), task.exception() if task.done() else None
        assert counters.errors, "the garbled event was not counted"
        # The cache still has what the (re-)list gave: the build pod, running.
        assert cache.pods[(MCO_NS, "b-build")].phase == "Running"
    finally:
        await _stop(task)
