"""The store's watch cache: the retained event window, the open watches and their dispatch.

A watch is served from the window of events after its resourceVersion (410 Expired before
it), and each write's event goes only to the watches its trigger field can concern, as
kube-apiserver's cacher does.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from drain_guard_sim.apiserver import errors, labels
from drain_guard_sim.apiserver.fieldselectors import FieldSelector, parse_selectors
from drain_guard_sim.apiserver.identities import ADMIN
from drain_guard_sim.apiserver.labels import labels_of
from drain_guard_sim.apiserver.objects import StoredObjects
from drain_guard_sim.apiserver.resources import ResourceType, field_value

JsonObj = dict[str, Any]


@dataclass(frozen=True)
class StoreEvent:
    rv: int
    resource: str  # ResourceType.key
    type: str  # ADDED, MODIFIED, DELETED
    obj: JsonObj
    prev: JsonObj | None


#: The watch cache's trigger field per resource (kube-apiserver's ``TriggerFunc``: the pod
#: registry's ``spec.nodeName``, the node registry's ``metadata.name``). A watch whose field
#: selector pins that field with ``=`` is only offered the events of objects whose value, now
#: or before the write, is that one; every other watch is offered every event of its resource.
TRIGGER_FIELDS = {"pods": "spec.nodeName", "nodes": "metadata.name"}


@dataclass(eq=False)
class Watcher:
    """One open watch. ``queue`` carries (type, object) pairs; None ends the stream."""

    rt: ResourceType
    namespace: str | None
    label_selector: labels.Selector
    fields: FieldSelector
    name: str | None = None
    user: str = ""
    queue: asyncio.Queue[tuple[str, JsonObj] | None] = field(default_factory=asyncio.Queue)
    abort: bool = False  # end by breaking the connection rather than a clean end of stream

    @property
    def trigger(self) -> str | None:
        """The trigger field's value this watch is indexed by (the cacher's ``MatcherIndex``)."""
        trigger_field = TRIGGER_FIELDS.get(self.rt.key)
        if trigger_field is None:
            return None
        if trigger_field == "metadata.name" and self.name is not None:
            return self.name
        for req in self.fields.requirements:
            if req.field == trigger_field and req.equals:
                return req.value
        return None

    def passes(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.name is not None and meta.get("name") != self.name:
            return False
        return self.label_selector.matches(labels_of(obj)) and self.fields.matches(obj)

    def convert(self, event: StoreEvent) -> tuple[str, JsonObj] | None:
        """The cacher's convertToWatchEvent: leaving the selection is DELETED, entering ADDED."""
        cur = event.type != "DELETED" and self.passes(event.obj)
        old = self.passes(event.prev)
        if cur and not old:
            return ("ADDED", event.obj)
        if cur and old:
            return ("MODIFIED", event.obj)
        if old and not cur:
            if event.type == "DELETED":
                return ("DELETED", event.obj)
            gone = copy.deepcopy(event.prev)
            assert gone is not None
            gone["metadata"]["resourceVersion"] = str(event.rv)
            return ("DELETED", gone)
        return None

    def close(self, abort: bool = False) -> None:
        self.abort = abort
        self.queue.put_nowait(None)


class WatchCache(StoredObjects):
    """The watch part of :class:`~drain_guard_sim.apiserver.store.Store` (which holds the
    state)."""

    _history: deque[StoreEvent]
    _window_start: int
    _watchers: set[Watcher]
    _by_trigger: dict[tuple[str, str], set[Watcher]]
    _unindexed: dict[str, set[Watcher]]

    def _emit(self, rt: ResourceType, type_: str, obj: JsonObj, prev: JsonObj | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        event = StoreEvent(rv, rt.key, type_, obj, prev)
        if len(self._history) == self._history.maxlen and self._history:
            self._window_start = self._history[0].rv
        self._history.append(event)
        watchers = set(self._unindexed.get(rt.key, ()))
        trigger_field = TRIGGER_FIELDS.get(rt.key)
        if trigger_field is not None:
            for version in (obj, prev):
                if version is not None:
                    value = field_value(version, trigger_field)
                    watchers |= self._by_trigger.get((rt.key, value), set())
        shared: JsonObj | None = None  # one copy of the object for every watcher it goes to
        for watcher in watchers:
            converted = watcher.convert(event)
            if converted is None:
                continue
            if converted[1] is obj:
                if shared is None:
                    shared = copy.deepcopy(obj)
                watcher.queue.put_nowait((converted[0], shared))
            else:
                watcher.queue.put_nowait((converted[0], copy.deepcopy(converted[1])))

    def watch(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | labels.Selector | None = None,
        field_selector: str | FieldSelector | None = None,
        name: str | None = None,
        user: str = ADMIN,
    ) -> Watcher:
        """Open a watch; raises ApiError 410 if ``resource_version`` is older than the window.

        Without a resourceVersion (or "0") the watcher first gets ADDED events for the
        current state, as a real server sends them.
        """
        rt = self.rt(resource)
        selected, fields = parse_selectors(rt, label_selector, field_selector)
        watcher = Watcher(rt, namespace if rt.namespaced else None, selected, fields, name, user)
        if resource_version in (None, "", "0"):
            for (_ns, _n), obj in sorted(self._bucket(rt).items()):
                if watcher.passes(obj):
                    watcher.queue.put_nowait(("ADDED", copy.deepcopy(obj)))
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise errors.bad_request(
                    f'invalid resource version "{resource_version}"'
                ) from None  # fmt: skip
            if since < self._window_start:
                raise errors.expired(f"too old resource version: {since} ({self._window_start})")
            newer: builtins.list[StoreEvent] = []
            for event in reversed(self._history):  # the events after ``since``, newest first
                if event.rv <= since:
                    break
                newer.append(event)
            for event in reversed(newer):
                if event.resource == rt.key:
                    converted = watcher.convert(event)
                    if converted is not None:
                        watcher.queue.put_nowait((converted[0], copy.deepcopy(converted[1])))
        self._watchers.add(watcher)
        self._dispatch_set(watcher).add(watcher)
        return watcher

    def _dispatch_set(self, watcher: Watcher) -> set[Watcher]:
        trigger = watcher.trigger
        if trigger is None:
            return self._unindexed.setdefault(watcher.rt.key, set())
        return self._by_trigger.setdefault((watcher.rt.key, trigger), set())

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)
        self._dispatch_set(watcher).discard(watcher)

    @property
    def watchers(self) -> frozenset[Watcher]:
        return frozenset(self._watchers)

    def cut_watches(
        self, *, abort: bool = False, resource: str | None = None, user: str | None = None
    ) -> int:
        """End open watch streams now (cleanly, or by breaking the connection)."""
        n = 0
        for watcher in list(self._watchers):
            if resource is not None and watcher.rt.key != self.rt(resource).key:
                continue
            if user is not None and watcher.user != user:
                continue
            watcher.close(abort)
            self.unwatch(watcher)
            n += 1
        return n

    def freeze_watches(self, *, resource: str | None = None, user: str | None = None) -> int:
        """Silence open watch streams for good, their connections left open (half-open)."""
        n = 0
        for watcher in self._watchers:
            if resource is not None and watcher.rt.key != self.rt(resource).key:
                continue
            if user is not None and watcher.user != user:
                continue
            # The stream's loop sends nothing more, not even its end: a half-open connection.
            watcher.queue.put_nowait(("__FROZEN__", {}))
            n += 1
        return n

    def _state_at(self, rt: ResourceType, rv: int) -> dict[tuple[str, str], JsonObj]:
        """The objects of ``rt`` at resourceVersion ``rv``: today's, with every later event of
        the retained history undone, newest first."""
        if rv < self._window_start:
            raise errors.expired("The resourceVersion for the provided list is too old.")
        state = dict(self._bucket(rt))
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.resource != rt.key:
                continue
            meta = event.obj["metadata"]
            key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
            if event.type == "ADDED":
                state.pop(key, None)
            else:
                state[key] = event.prev if event.prev is not None else event.obj
        return state

    def compact(self) -> int:
        """Drop the retained event window: any watch from an older resourceVersion gets 410."""
        self._history.clear()
        self._window_start = self._rv
        return self._rv
