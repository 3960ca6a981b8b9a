"""The simulated API server's storage: objects, resourceVersions, watch history, write log.

Everything here is synchronous and runs on the event loop, so each operation is atomic:
a write, the watch events it causes and the write-log record it leaves happen together.
That gives the same guarantees etcd + the watch cache give a real server: one cluster-wide
resourceVersion counter, events delivered in resourceVersion order, a watch started from
resourceVersion R sees exactly the events after R.

The store also plays the disruption controller: after a pod or PodDisruptionBudget write it
recomputes the status of the PDBs in that namespace (``disruption``; as a separate write, by
the controller's identity), the way ``pkg/controller/disruption`` does. Field selectors are
parsed in ``fieldselectors``, evictions handled in ``eviction``. The watches are in
``watchcache``, the write log and waiting on it in ``writelog``, the disruption controller's
part in ``disruption``, what a registry's strategy does to a create or an update in
``strategy``; reading the objects in ``objects``, which each part builds on: the store
combines them over its one state and writes it.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from drain_guard_sim.apiserver import errors, labels
from drain_guard_sim.apiserver.disruption import DisruptionController
from drain_guard_sim.apiserver.fieldselectors import FieldSelector, parse_selectors
from drain_guard_sim.apiserver.identities import ADMIN
from drain_guard_sim.apiserver.labels import labels_of
from drain_guard_sim.apiserver.patching import apply_patch
from drain_guard_sim.apiserver.resources import RESOURCES, ResourceIndex, ResourceType
from drain_guard_sim.apiserver.strategy import prepare_update, reset_status
from drain_guard_sim.apiserver.watchcache import StoreEvent, WatchCache, Watcher
from drain_guard_sim.apiserver.writelog import WriteLog, WriteRecord
from drain_guard_sim.timestamps import rfc3339

JsonObj = dict[str, Any]


_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


# --- the store --------------------------------------------------------------------------


class Store(WatchCache, WriteLog, DisruptionController):
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
        selected, fields = parse_selectors(rt, label_selector, field_selector)
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
            reset_status(rt, new)
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
        new = prepare_update(rt, old, obj, subresource, name)
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
        new = prepare_update(rt, old, patched, subresource, name)
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


# --- helpers ----------------------------------------------------------------------------


class _NameGenerator:
    def __init__(self) -> None:
        import random

        self._rng = random.Random(0x5EED)

    def suffix(self) -> str:
        return "".join(self._rng.choice(_GENERATE_ALPHABET) for _ in range(5))


def _same(a: JsonObj, b: JsonObj) -> bool:
    return a == b
