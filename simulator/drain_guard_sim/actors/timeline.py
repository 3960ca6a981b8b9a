"""A shared timeline of what the simulated cluster's actors did.

Every actor (MCD, MCC drain controller, node controller, build controllers, the demo) appends
one line per noteworthy step. The demo prints it for a newcomer and tests assert on it, so the
messages use the MCO's own log wording where one exists.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["Timeline", "TimelineEntry"]


@dataclass(frozen=True)
class TimelineEntry:
    """One step: seconds since the timeline started, who did it, on which node, what."""

    t: float
    actor: str
    node: str | None
    message: str

    def format(self, time_scale: float = 1.0) -> str:
        """One printable line; ``time_scale`` converts simulated seconds back to MCO seconds."""
        where = f" [{self.node}]" if self.node else ""
        return f"{self.t / time_scale:8.1f}s  {self.actor:<22}{where} {self.message}"


class Timeline:
    """Append-only, awaitable list of :class:`TimelineEntry` (one per simulated cluster)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._entries: list[TimelineEntry] = []
        self._changed = asyncio.Event()

    def add(self, actor: str, node: str | None, message: str) -> TimelineEntry:
        entry = TimelineEntry(self._clock() - self._start, actor, node, message)
        self._entries.append(entry)
        # Wake every waiter, then arm a fresh event for the next append.
        self._changed.set()
        self._changed = asyncio.Event()
        return entry

    def since_start(self, clock_value: float) -> float:
        """A reading of the timeline's clock (``time.monotonic``), as seconds since the start."""
        return clock_value - self._start

    @property
    def entries(self) -> tuple[TimelineEntry, ...]:
        return tuple(self._entries)

    def select(
        self,
        *,
        actor: str | None = None,
        node: str | None = None,
        contains: str | None = None,
        since: float | None = None,
    ) -> list[TimelineEntry]:
        """Entries matching every given filter, in order."""
        return [
            e
            for e in self._entries
            if (actor is None or e.actor == actor)
            and (node is None or e.node == node)
            and (contains is None or contains in e.message)
            and (since is None or e.t >= since)
        ]

    async def wait_for(self, predicate: Callable[[TimelineEntry], bool]) -> TimelineEntry:
        """The first entry (past or future) satisfying ``predicate``; event-driven, no polling.

        Callers bound the wait with ``asyncio.timeout``.
        """
        seen = 0
        while True:
            for entry in self._entries[seen:]:
                if predicate(entry):
                    return entry
            seen = len(self._entries)
            await self._changed.wait()

    def format(
        self, entries: Iterable[TimelineEntry] | None = None, time_scale: float = 1.0
    ) -> str:
        return "\n".join(
            e.format(time_scale) for e in (self._entries if entries is None else entries)
        )
