"""The store's write log: every successful mutation as the audit log would show it, and
waiting on it (a condition re-checked after each write or logged request, never polled)."""

from __future__ import annotations

import asyncio
import builtins
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from drain_guard_sim.apiserver.objects import StoredObjects
from drain_guard_sim.apiserver.resources import ResourceType

JsonObj = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class WriteRecord:
    """One successful mutation, as the audit log would show it (plus the objects)."""

    rv: int
    time: float  # time.monotonic()
    wall: datetime
    user: str
    verb: str  # create, update, patch, delete (kube-audit verbs)
    group: str
    resource: str  # plural, e.g. "pods"
    subresource: str  # "", "status", "eviction"
    namespace: str
    name: str
    before: JsonObj | None
    after: JsonObj | None

    @property
    def gr(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def obj(self) -> JsonObj:
        """The object after the write, or before it for a delete."""
        obj = self.after if self.after is not None else self.before
        assert obj is not None
        return obj


class WriteLog(StoredObjects):
    """The write-log part of :class:`~drain_guard_sim.apiserver.store.Store` (which holds the
    state)."""

    _waiters: builtins.list[asyncio.Future[None]]
    write_log: builtins.list[WriteRecord]

    def _record(
        self,
        rt: ResourceType,
        verb: str,
        user: str,
        namespace: str,
        name: str,
        before: JsonObj | None,
        after: JsonObj | None,
        subresource: str = "",
    ) -> WriteRecord:
        record = WriteRecord(
            rv=self._rv,
            time=time.monotonic(),
            wall=self.clock(),
            user=user,
            verb=verb,
            group=rt.group,
            resource=rt.plural,
            subresource=subresource,
            namespace=namespace,
            name=name,
            before=copy.deepcopy(before),
            after=copy.deepcopy(after),
        )
        self.write_log.append(record)
        self.notify()
        return record

    def notify(self) -> None:
        """Wake every :meth:`wait_for` to look again (a write, or a request the server logged)."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> T:
        """Wait until ``predicate()`` is truthy, re-checking after every write and every logged
        request (no polling)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout} s")
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(asyncio.shield(fut), remaining)
            except TimeoutError:
                continue

    async def wait_for_write(
        self,
        match: Callable[[WriteRecord], bool],
        *,
        since: int = 0,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> WriteRecord:
        """The first write-log record after resourceVersion ``since`` that ``match``es."""

        def find() -> WriteRecord | None:
            for record in self.write_log:
                if record.rv > since and match(record):
                    return record
            return None

        found = await self.wait_for(find, timeout)
        assert found is not None
        return found

    def writes(
        self,
        resource: str | None = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
        user: str | None = None,
        verb: str | None = None,
        since: int = 0,
    ) -> builtins.list[WriteRecord]:
        """Write-log records filtered by resource (plural or plural.group), name, ..."""
        key = self.rt(resource).key if resource else None
        return [
            r
            for r in self.write_log
            if r.rv > since
            and (key is None or r.gr == key)
            and (name is None or r.name == name)
            and (namespace is None or r.namespace == namespace)
            and (user is None or r.user == user)
            and (verb is None or r.verb == verb)
        ]
