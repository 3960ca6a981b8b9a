"""The simulated API server's storage: objects, resourceVersions, watch history, write log.

Everything here is synchronous and runs on the event loop, so each operation is atomic:
a write, the watch events it causes and the write-log record it leaves happen together.
That gives the same guarantees etcd + the watch cache give a real server: one cluster-wide
resourceVersion counter, events delivered in resourceVersion order, a watch started from
resourceVersion R sees exactly the events after R.

The store also plays the disruption controller: after a pod or PodDisruptionBudget write it
recomputes the status of the PDBs in that namespace (``disruption``; as a separate write, by
the controller's identity), the way ``pkg/controller/disruption`` does. Field selectors are
parsed in ``fieldselectors``, evictions handled in ``eviction``.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import copy
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from drain_guard_sim.apiserver import errors, labels
from drain_guard_sim.apiserver.disruption import compute_pdb_status
from drain_guard_sim.apiserver.fieldselectors import FieldSelector, parse_field_selector
from drain_guard_sim.apiserver.labels import labels_of
from drain_guard_sim.apiserver.patching import apply_patch
from drain_guard_sim.apiserver.resources import (
    RESOURCES,
    ResourceIndex,
    ResourceType,
    field_value,
)
from drain_guard_sim.timestamps import rfc3339

JsonObj = dict[str, Any]
T = TypeVar("T")

ADMIN = "system:admin"
DISRUPTION_CONTROLLER = "system:serviceaccount:kube-system:disruption-controller"
APISERVER = "system:apiserver"

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def parse_labels(text: str | None) -> labels.Selector:
    try:
        return labels.parse(text)
    except labels.SelectorError as err:
        raise errors.bad_request(f"unable to parse requirement: {err}") from None


def _selectors(
    rt: ResourceType,
    label_selector: str | labels.Selector | None,
    field_selector: str | FieldSelector | None,
) -> tuple[labels.Selector, FieldSelector]:
    """The selectors of a list or watch, given as query text or already parsed."""
    selected = (
        label_selector
        if isinstance(label_selector, labels.Selector)
        else parse_labels(label_selector)
    )
    fields = (
        field_selector
        if isinstance(field_selector, FieldSelector)
        else parse_field_selector(field_selector or "", rt)
    )
    return selected, fields


# --- records ----------------------------------------------------------------------------


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


# --- the store --------------------------------------------------------------------------


class Store:
    """In-memory objects of every served resource, one resourceVersion counter."""

    def __init__(
        self,
        resources: tuple[ResourceType, ...] = RESOURCES,
        *,
        history: int = 10_000,
        clock: Callable[[], datetime] | None = None,
        pdb_controller: bool = True,
    ) -> None:
        self.index = ResourceIndex(resources)
        self._objects: dict[str, dict[tuple[str, str], JsonObj]] = {r.key: {} for r in resources}
        self._rv = 1
        self._history: deque[StoreEvent] = deque(maxlen=history)
        self._window_start = self._rv  # watches from rv >= this are served from history
        self._watchers: set[Watcher] = set()
        # The cacher's dispatch: watchers by (resource, trigger value), and the rest by resource.
        self._by_trigger: dict[tuple[str, str], set[Watcher]] = {}
        self._unindexed: dict[str, set[Watcher]] = {}
        self._waiters: builtins.list[asyncio.Future[None]] = []
        self.write_log: builtins.list[WriteRecord] = []
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.pdb_controller = pdb_controller
        #: Admission (runs on create, update, patch and delete, dry runs included, before
        #: anything is stored): (operation, resource, subresource, user, name, old, new);
        #: raises ApiError to deny. The API server sets it (NodeRestriction).
        self.admission: Callable[..., None] | None = None
        self._rng_names = _NameGenerator()

    # --- basic state ---

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

    def list(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | labels.Selector | None = None,
        field_selector: str | FieldSelector | None = None,
        at: int | None = None,
    ) -> builtins.list[JsonObj]:
        """Matching objects in key order (namespace, name); ``namespace=None`` means all.
        ``at``: as they were at that resourceVersion (a list with ``resourceVersionMatch=
        Exact``), 410 Expired before the retained window, as etcd's compaction answers."""
        rt = self.rt(resource)
        selected, fields = _selectors(rt, label_selector, field_selector)
        objects = self._bucket(rt) if at is None else self._state_at(rt, at)
        out = []
        for (ns, _name), obj in sorted(objects.items()):
            if rt.namespaced and namespace is not None and ns != namespace:
                continue
            if selected.matches(labels_of(obj)) and fields.matches(obj):
                out.append(copy.deepcopy(obj))
        return out

    # --- writes ---

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

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

    def _commit(
        self,
        rt: ResourceType,
        verb: str,
        user: str,
        new: JsonObj | None,
        old: JsonObj | None,
        subresource: str = "",
    ) -> JsonObj | None:
        """Store ``new`` (None deletes ``old``), emit the watch event, log the write."""
        ref = new if new is not None else old
        assert ref is not None
        meta = ref["metadata"]
        ns, name = meta.get("namespace", "") if rt.namespaced else "", meta["name"]
        rv = self._next_rv()
        if new is None:
            assert old is not None
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(rv)
            del self._bucket(rt)[(ns, name)]
            self._emit(rt, "DELETED", gone, old)
            self._record(rt, verb, user, ns, name, old, None, subresource)
            result = gone
        else:
            new["metadata"]["resourceVersion"] = str(rv)
            self._bucket(rt)[(ns, name)] = new
            self._emit(rt, "ADDED" if old is None else "MODIFIED", copy.deepcopy(new), old)
            self._record(rt, verb, user, ns, name, old, new, subresource)
            result = copy.deepcopy(new)
        if self.pdb_controller and rt.key in ("pods", "poddisruptionbudgets.policy"):
            self._sync_pdbs(ns)
        return result

    def create(
        self,
        resource: str | ResourceType,
        obj: JsonObj,
        namespace: str | None = None,
        *,
        user: str = ADMIN,
        keep_status: bool = True,
        dry_run: bool = False,
    ) -> JsonObj:
        """Create ``obj``. ``keep_status=False`` resets status as the real create does
        for resources with a status subresource (the HTTP path); test set-up keeps it."""
        rt = self.rt(resource)
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace is not None and body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    rt,
                    rt.kind,
                    "",
                    [("FieldValueRequired", "metadata.name", "Required value: name or "
                      "generateName is required")],
                )  # fmt: skip
            meta["name"] = prefix + self._rng_names.suffix()
        name = meta["name"]
        ns = meta.get("namespace", "")
        if (ns, name) in self._bucket(rt):
            raise errors.already_exists(rt, name)
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.clock())
        meta.pop("deletionTimestamp", None)
        if rt.generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.has_status and not keep_status:
            self._reset_status(rt, new)
        self._admit("CREATE", rt, "", user, name, None, new)
        if dry_run:
            new["metadata"]["resourceVersion"] = ""
            return new
        result = self._commit(rt, "create", user, new, None)
        assert result is not None
        return result

    def _admit(
        self,
        operation: str,
        rt: ResourceType,
        subresource: str,
        user: str,
        name: str,
        old: JsonObj | None,
        new: JsonObj | None,
    ) -> None:
        if self.admission is not None:
            self.admission(operation, rt, subresource, user, name, old, new)

    @staticmethod
    def _reset_status(rt: ResourceType, obj: JsonObj) -> None:
        if not rt.reset_status_on_create:
            return
        if rt.kind == "Pod":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif rt.custom:
            obj.pop("status", None)
        else:
            obj["status"] = {}

    def _prepare_update(
        self, rt: ResourceType, old: JsonObj, new: JsonObj, subresource: str, name: str
    ) -> JsonObj:
        """What a strategy's PrepareForUpdate + the generic registry do to an update."""
        new = copy.deepcopy(new)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        old_meta = old["metadata"]
        if meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        if rt.namespaced and meta.get("namespace", old_meta["namespace"]) != old_meta["namespace"]:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        uid = meta.get("uid")
        if uid and uid != old_meta["uid"]:
            raise errors.conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{old_meta['uid']}",
            )
        rv = meta.get("resourceVersion")
        if rv in (None, ""):
            if not rt.allow_unconditional_update:
                raise errors.invalid(
                    rt,
                    rt.kind,
                    name,
                    [("FieldValueInvalid", "metadata.resourceVersion",
                      "Invalid value: 0x0: must be specified for an update")],
                )  # fmt: skip
        elif str(rv) != old_meta["resourceVersion"]:
            raise errors.conflict(rt, name)
        if subresource == "status":
            result = copy.deepcopy(old)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            if not rt.custom:
                for key in ("labels", "annotations"):
                    if key in meta:
                        result["metadata"][key] = meta[key]
                    else:
                        result["metadata"].pop(key, None)
            new = result
            meta = new["metadata"]
        elif rt.has_status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        for key in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp",
                    "generation"):  # fmt: skip
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if rt.generation and _spec_changed(rt, old, new):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        meta["resourceVersion"] = old_meta["resourceVersion"]
        return new

    def update(
        self,
        resource: str | ResourceType,
        obj: JsonObj,
        namespace: str | None = None,
        *,
        name: str | None = None,
        user: str = ADMIN,
        subresource: str = "",
        dry_run: bool = False,
    ) -> JsonObj:
        """PUT: replace the object (or its status with ``subresource="status"``)."""
        rt = self.rt(resource)
        name = name or (obj.get("metadata") or {}).get("name")
        if not name:
            raise errors.bad_request("name is required")
        if rt.namespaced:
            namespace = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
        old = self._bucket(rt).get((self._ns(rt, namespace), name))
        if old is None:
            raise errors.not_found(rt, name)
        new = self._prepare_update(rt, old, obj, subresource, name)
        return self._finish_update(rt, "update", user, old, new, subresource, dry_run)

    def _finish_update(
        self,
        rt: ResourceType,
        verb: str,
        user: str,
        old: JsonObj,
        new: JsonObj,
        subresource: str,
        dry_run: bool,
    ) -> JsonObj:
        self._admit("UPDATE", rt, subresource, user, old["metadata"]["name"], old, new)
        if dry_run:
            return copy.deepcopy(new)
        if _same(old, new):
            # A no-op write: the real server does not bump the resourceVersion or notify.
            return copy.deepcopy(old)
        result = self._commit(rt, verb, user, new, copy.deepcopy(old), subresource)
        assert result is not None
        return result

    def patch(
        self,
        resource: str | ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "strategic",
        user: str = ADMIN,
        subresource: str = "",
        dry_run: bool = False,
    ) -> JsonObj:
        """PATCH with ``patch_type`` json, merge or strategic (or the full media type)."""
        rt = self.rt(resource)
        old = self._bucket(rt).get((self._ns(rt, namespace), name))
        if old is None:
            raise errors.not_found(rt, name)
        if rt.custom and patch_type in ("strategic", "application/strategic-merge-patch+json"):
            raise errors.unsupported_media_type(
                "application/strategic-merge-patch+json",
                ("application/json-patch+json", "application/merge-patch+json",
                 "application/apply-patch+yaml"),
            )  # fmt: skip
        patched = apply_patch(copy.deepcopy(old), patch, patch_type)
        new = self._prepare_update(rt, old, patched, subresource, name)
        return self._finish_update(rt, "patch", user, old, new, subresource, dry_run)

    def delete(
        self,
        resource: str | ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        user: str = ADMIN,
        preconditions: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        subresource: str = "",
        verb: str = "delete",
    ) -> JsonObj:
        """Delete at once (no finalizers, no grace period); returns the deleted object."""
        rt = self.rt(resource)
        old = self._bucket(rt).get((self._ns(rt, namespace), name))
        if old is None:
            raise errors.not_found(rt, name)
        if preconditions:
            uid = preconditions.get("uid")
            if uid and uid != old["metadata"]["uid"]:
                raise errors.precondition_conflict(
                    rt,
                    name,
                    f"the UID in the precondition ({uid}) does not match the UID in record "
                    f"({old['metadata']['uid']}). The object might have been deleted and then "
                    "recreated",
                )
            rv = preconditions.get("resourceVersion")
            if rv and str(rv) != old["metadata"]["resourceVersion"]:
                raise errors.precondition_conflict(
                    rt,
                    name,
                    f"the ResourceVersion in the precondition ({rv}) does not match the "
                    f"ResourceVersion in record ({old['metadata']['resourceVersion']}). The "
                    "object might have been modified",
                )
        if verb == "delete":
            self._admit("DELETE", rt, subresource, user, name, old, None)
        elif subresource == "eviction":  # the eviction's CREATE, on the pod it evicts
            self._admit("CREATE", rt, subresource, user, name, old, None)
        if dry_run:
            return copy.deepcopy(old)
        result = self._commit(rt, verb, user, None, old, subresource)
        assert result is not None
        return result

    def delete_collection(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        user: str = ADMIN,
    ) -> builtins.list[JsonObj]:
        rt = self.rt(resource)
        doomed = self.list(
            rt, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [
            self.delete(rt, o["metadata"]["name"], o["metadata"].get("namespace"), user=user,
                        verb="deletecollection")
            for o in doomed
        ]  # fmt: skip

    # --- the disruption controller ---

    def _controller_scale(self, namespace: str, ref: Mapping[str, Any]) -> int | None:
        """The scale of a pod's controller, as the disruption controller's finders read it
        (a kind with a scale subresource: of those the simulator serves, a Deployment's
        ``spec.replicas``); None when none is found (a DaemonSet, a Job, a missing one)."""
        if (ref.get("apiVersion"), ref.get("kind")) != ("apps/v1", "Deployment"):
            return None
        found = self.try_get("deployments", str(ref.get("name")), namespace)
        if found is None or found["metadata"].get("uid") != ref.get("uid"):
            return None
        return int((found.get("spec") or {}).get("replicas", 1))

    def _sync_pdbs(self, namespace: str) -> None:
        pdb_rt = self.rt("poddisruptionbudgets")
        pdbs = sorted((k, v) for k, v in self._bucket(pdb_rt).items() if k[0] == namespace)
        if not pdbs:
            return
        pods = [p for (ns, _n), p in self._bucket(self.rt("pods")).items() if ns == namespace]
        for (_ns, _name), pdb in pdbs:
            status = compute_pdb_status(pdb, pods, self.clock(), self._controller_scale)
            if status == pdb.get("status"):
                continue
            new = copy.deepcopy(pdb)
            new["status"] = status
            self.write_budget_status(DISRUPTION_CONTROLLER, new, copy.deepcopy(pdb))

    def write_budget_status(self, user: str, new: JsonObj, old: JsonObj) -> None:
        """A budget's status written by ``user`` (the disruption controller, the eviction
        handler) without recomputing the budgets on it: the controller acts on pod writes."""
        saved = self.pdb_controller
        self.pdb_controller = False
        try:
            self._commit(self.rt("poddisruptionbudgets"), "update", user, new, old, "status")
        finally:
            self.pdb_controller = saved

    # --- watches ---

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
        selected, fields = _selectors(rt, label_selector, field_selector)
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

    # --- waiting ---

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

    # --- list continuation ---

    @staticmethod
    def encode_continue(rv: int, ns: str, name: str) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{ns}/{name}\x00"})
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @staticmethod
    def decode_continue(token: str) -> tuple[int, str, str]:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            data = json.loads(raw)
            ns, _, name = str(data["start"]).rstrip("\x00").partition("/")
            return int(data["rv"]), ns, name
        except (ValueError, KeyError, TypeError) as err:
            raise errors.bad_request(f"continue key is not valid: {err}") from None


# --- helpers ----------------------------------------------------------------------------


class _NameGenerator:
    def __init__(self) -> None:
        import random

        self._rng = random.Random(0x5EED)

    def suffix(self) -> str:
        return "".join(self._rng.choice(_GENERATE_ALPHABET) for _ in range(5))


def _same(a: JsonObj, b: JsonObj) -> bool:
    return a == b


def _spec_changed(rt: ResourceType, old: JsonObj, new: JsonObj) -> bool:
    skip = {"metadata", "status"} if rt.has_status else {"metadata"}
    keys = (set(old) | set(new)) - skip - {"apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)
