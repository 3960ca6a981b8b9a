"""The store's objects by resource and its resourceVersion counter, read by every part of the
store (the watch cache, the write log, the disruption controller); ``store.Store`` sets them
up and writes them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime
from typing import Any

from drain_guard_sim.apiserver import errors
from drain_guard_sim.apiserver.resources import ResourceIndex, ResourceType

JsonObj = dict[str, Any]


class StoredObjects:
    """The objects and the counter the store's parts share (``Store.__init__`` sets them)."""

    index: ResourceIndex
    _objects: dict[str, dict[tuple[str, str], JsonObj]]
    _rv: int
    clock: Callable[[], datetime]

    @property
    def resource_version(self) -> int:
        return self._rv

    def rt(self, resource: str | ResourceType) -> ResourceType:
        return self.index.lookup(resource)

    def _bucket(self, rt: ResourceType) -> dict[tuple[str, str], JsonObj]:
        return self._objects[rt.key]

    @staticmethod
    def _ns(rt: ResourceType, namespace: str | None) -> str:
        return (namespace or "default") if rt.namespaced else ""

    def get(self, resource: str | ResourceType, name: str, namespace: str | None = None) -> JsonObj:
        rt = self.rt(resource)
        obj = self._bucket(rt).get((self._ns(rt, namespace), name))
        if obj is None:
            raise errors.not_found(rt, name)
        return copy.deepcopy(obj)

    def try_get(
        self, resource: str | ResourceType, name: str, namespace: str | None = None
    ) -> JsonObj | None:
        rt = self.rt(resource)
        obj = self._bucket(rt).get((self._ns(rt, namespace), name))
        return copy.deepcopy(obj) if obj is not None else None
