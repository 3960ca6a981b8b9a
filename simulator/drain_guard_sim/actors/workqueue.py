"""client-go's rate-limiting delaying work queue, as MCO's controllers use it."""

from __future__ import annotations

import asyncio


class WorkQueue:
    """client-go's rate-limiting delaying work queue, for one controller's keys.

    A key is processed by one worker at a time; a key added while it is processed comes back
    once ``done``; ``add_after`` keeps the earliest pending time; ``add_rate_limited`` waits
    base·2^failures (client-go's ItemExponentialFailureRateLimiter, the dominant part of
    DefaultControllerRateLimiter at these rates).
    """

    def __init__(self, base: float, max_delay: float) -> None:
        self._base = base
        self._max = max_delay
        self._queue: list[str] = []
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._waiting: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[str, int] = {}
        self._ready = asyncio.Event()
        self._shutdown = False

    def add(self, key: str) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._ready.set()

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        ready_at = loop.time() + delay
        pending = self._waiting.get(key)
        if pending is not None:
            if pending[0] <= ready_at:
                return
            pending[1].cancel()
        handle = loop.call_at(ready_at, self._fire, key)
        self._waiting[key] = (ready_at, handle)

    def _fire(self, key: str) -> None:
        self._waiting.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: str) -> None:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        self.add_after(key, min(self._base * 2**failures, self._max))

    def num_requeues(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    async def get(self) -> str:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.pop(0)
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._ready.set()

    def shutdown(self) -> None:
        self._shutdown = True
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
