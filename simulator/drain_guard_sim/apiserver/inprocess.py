"""The simulated API server's in-process API: the tests' and the harness's reads, writes,
waits and controls on its store, without HTTP but with the same semantics."""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from drain_guard_sim.apiserver import eviction
from drain_guard_sim.apiserver.identities import ADMIN
from drain_guard_sim.apiserver.store import Store
from drain_guard_sim.apiserver.writelog import WriteRecord

JsonObj = dict[str, Any]
T = TypeVar("T")


class InProcessApi:
    """The in-process part of :class:`~drain_guard_sim.apiserver.server.SimApiServer` (which
    holds the state)."""

    store: Store
    requests: Counter[tuple[str, str, str]]

    def create(
        self,
        resource: str,
        obj: JsonObj,
        namespace: str | None = None,
        *,
        user: str = ADMIN,
        keep_status: bool = True,
    ) -> JsonObj:
        return self.store.create(resource, obj, namespace, user=user, keep_status=keep_status)

    def get(self, resource: str, name: str, namespace: str | None = None) -> JsonObj:
        return self.store.get(resource, name, namespace)

    def try_get(self, resource: str, name: str, namespace: str | None = None) -> JsonObj | None:
        return self.store.try_get(resource, name, namespace)

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[JsonObj]:
        return self.store.list(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        )

    def update(
        self,
        resource: str,
        obj: JsonObj,
        namespace: str | None = None,
        *,
        user: str = ADMIN,
        subresource: str = "",
    ) -> JsonObj:
        return self.store.update(resource, obj, namespace, user=user, subresource=subresource)

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "strategic",
        user: str = ADMIN,
        subresource: str = "",
    ) -> JsonObj:
        return self.store.patch(
            resource,
            name,
            patch,
            namespace,
            patch_type=patch_type,
            user=user,
            subresource=subresource,
        )

    def delete(
        self, resource: str, name: str, namespace: str | None = None, *, user: str = ADMIN
    ) -> JsonObj:
        return self.store.delete(resource, name, namespace, user=user)

    def evict(self, name: str, namespace: str | None = None, *, user: str = ADMIN) -> JsonObj:
        return eviction.evict(self.store, name, namespace, user=user)

    async def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> T:
        return await self.store.wait_for(predicate, timeout)

    async def wait_for_write(
        self,
        match: Callable[[WriteRecord], bool],
        *,
        since: int = 0,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> WriteRecord:
        return await self.store.wait_for_write(match, since=since, timeout=timeout)

    @property
    def write_log(self) -> builtins.list[WriteRecord]:
        return self.store.write_log

    def writes(self, resource: str | None = None, **filters: Any) -> builtins.list[WriteRecord]:
        return self.store.writes(resource, **filters)

    @property
    def resource_version(self) -> int:
        return self.store.resource_version

    def compact(self) -> int:
        """Forget the retained watch window: a watch from an older resourceVersion gets 410."""
        return self.store.compact()

    def cut_watches(
        self, *, abort: bool = False, resource: str | None = None, user: str | None = None
    ) -> int:
        """End every open watch stream now; ``abort`` breaks the connection instead."""
        return self.store.cut_watches(abort=abort, resource=resource, user=user)

    def freeze_watches(self, *, resource: str | None = None, user: str | None = None) -> int:
        """Silence open watch streams for good, their connections open (half-open)."""
        return self.store.freeze_watches(resource=resource, user=user)

    @property
    def open_watches(self) -> int:
        return len(self.store.watchers)

    def request_count(
        self, *, user: str | None = None, verb: str | None = None, resource: str | None = None
    ) -> int:
        return sum(
            n
            for (u, v, r), n in self.requests.items()
            if (user is None or u == user)
            and (verb is None or v == verb)
            and (resource is None or r == resource)
        )
