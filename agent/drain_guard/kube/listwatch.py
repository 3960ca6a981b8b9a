"""List, then watch from the list's resourceVersion, forever; and the cache the agent's
watches fill.

The watch stream is read here rather than through ``kubernetes_asyncio.watch.Watch``: that
class retries a 410 once with the same stale resourceVersion and then raises, turns error
statuses into exceptions without their headers (so a 429's Retry-After is lost), and reads
lines with aiohttp's 64 KiB line limit. Reading the stream ourselves keeps one explicit state
machine: list, watch from the list's resourceVersion (bookmarks move it forward), renew on the
server's ``timeoutSeconds``, re-list on 410, back off with jitter on anything else.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from drain_guard.core.nodes import NodeObj
from drain_guard.core.operations import Watched
from drain_guard.core.pods import Pod
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube.call import (
    API_FAILURES,
    REQUEST_TIMEOUT,
    JsonObj,
    KubeError,
    StreamError,
    call_api,
    error_from,
)
from drain_guard.kube.counters import Counters
from drain_guard.kube.retry import Backoff, Outage

log = logging.getLogger(__name__)

#: ``timeoutSeconds`` asked for on watches (±10 %): client-go's reflector asks 5 to 10 minutes,
#: kube-apiserver gives a watch that asks none 30 to 60. Each renewal is one request; at rest
#: they are nearly all the agent sends (two an hour a watch). The agent's ``--watch-timeout``
#: sets it; this is the default of the parts that take none. A frozen stream is found
#: by the quiet check (``QUIET_PERIODS``), not by this.
WATCH_TIMEOUT = 1800
#: Items per page of a list (``limit``/``continue``), as client-go's reflector pages: the API
#: server answers a large list in bounded pieces, and none is one response of the whole set.
LIST_PAGE = 500
#: How often kube-apiserver's watch cache sends an idle watch a bookmark (a minute) while
#: the cache moves on: only past the watch's start, which on a quiet cluster whose etcd sends
#: no progress notifications (etcd's default interval is 10 minutes) can take many minutes.
#: So silence alone proves nothing: a stream quiet for ``QUIET_PERIODS`` is checked by one
#: read of what it watches (:func:`stream_is_current`); only a stream the read finds behind
#: is taken for frozen (a half-open connection), reported silent and renewed.
BOOKMARK_PERIOD = 60.0
QUIET_PERIODS = 1.5


def _key_and_version(obj: JsonObj) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    return key, str(metadata.get("resourceVersion", ""))


def delivered_versions(items: Sequence[JsonObj]) -> dict[str, str]:
    """``namespace/name`` to resourceVersion of each object: what a list or a stream gave."""
    return dict(_key_and_version(item) for item in items)


def stream_is_current(delivered: Mapping[str, str], listed: Sequence[JsonObj]) -> bool:
    """Whether a quiet stream is merely idle: a list read now has the objects, each at the
    version, that the list and the stream delivered. Else the stream missed an event."""
    return delivered_versions(listed) == delivered


@dataclass
class WatchCache:
    """The latest Node and pods from the watches; ``changed`` wakes the controller."""

    node: NodeObj | None = None
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    node_synced: bool = False
    pods_synced: bool = False
    # monotonic time at which the watch delivered the latest Node version, for reaction_seconds
    node_seen_at: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Called after every change of the pods with the pod's key, None after a relist (the
    #: shield plans on the same pods, re-planning what changed).
    pod_listeners: list[Callable[[tuple[str, str] | None], None]] = field(default_factory=list)

    @property
    def synced(self) -> bool:
        return self.node_synced and self.pods_synced

    def _notify(self) -> None:
        self.changed.set()

    def replace_node(self, items: Sequence[JsonObj]) -> None:
        self.node = NodeObj.from_dict(items[0]) if items else None
        self.node_synced = True
        self.node_seen_at = time.monotonic()
        self._notify()

    def apply_node(self, kind: str, obj: JsonObj) -> None:
        self.node = None if kind == "DELETED" else NodeObj.from_dict(obj)
        self.node_seen_at = time.monotonic()
        self._notify()

    def _notify_pods(self, key: tuple[str, str] | None = None) -> None:
        self._notify()
        for listener in self.pod_listeners:
            listener(key)

    def replace_pods(self, items: Sequence[JsonObj]) -> None:
        self.pods = {}
        for item in items:
            pod = Pod.from_dict(item)
            self.pods[(pod.namespace, pod.name)] = pod
        self.pods_synced = True
        self._notify_pods()

    def apply_pod(self, kind: str, obj: JsonObj) -> None:
        pod = Pod.from_dict(obj)
        key = (pod.namespace, pod.name)
        if kind == "DELETED":
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        self._notify_pods(key)


@dataclass
class NamedCache:
    """One object watched by its name alone (``Kube.watch_named``): what a guard reads."""

    #: The object as last delivered; None while it does not exist.
    obj: JsonObj | None = None
    listed: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: How its watch stands (``/status``, ``/readyz``): while it fails, ``obj`` is the last
    #: object seen, which the guard still decides on.
    watch: WatchStatus = field(default_factory=WatchStatus)

    def replace(self, items: Sequence[JsonObj]) -> None:
        self.obj = items[0] if items else None
        self.listed = True
        self.changed.set()

    def apply(self, kind: str, obj: JsonObj) -> None:
        self.obj = None if kind == "DELETED" else obj
        self.changed.set()


@dataclass
class ObjectsCache:
    """Every object of one cluster-scoped resource, by name (``Kube.watch_cluster``): MCO's
    pools, MachineOSBuilds and MachineOSConfigs, which the noop-image guard reads."""

    objects: dict[str, JsonObj] = field(default_factory=dict)
    listed: bool = False
    #: Why the watch fails, while it does, and since when (its relay sets them; None once
    #: answered again).
    error: str | None = None
    failing_since: datetime | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def replace(self, items: Sequence[JsonObj]) -> None:
        self.objects = {str(item["metadata"]["name"]): item for item in items}
        self.listed = True
        self.changed.set()

    def apply(self, kind: str, obj: JsonObj) -> None:
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
        self.changed.set()

    def forget(self, *, listed: bool) -> None:
        """Empty, as a new watch's before its list (``listed``: nothing is to be listed)."""
        self.objects = {}
        self.listed = listed
        self.error = self.failing_since = None
        self.changed.set()


class _GoneError(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class _FrozenError(Exception):
    """A quiet stream missed what a read found (a half-open connection): renew it."""


@dataclass
class ListWatch:
    """List, then watch from the list's resourceVersion, forever (until cancelled)."""

    resource: Watched
    list_fn: Callable[..., Awaitable[Any]]
    field_selector: str
    replace: Callable[[Sequence[JsonObj]], None]
    apply: Callable[[str, JsonObj], None]
    counters: Counters
    #: What the logs call this watch ("pods on node worker-0"); the metrics use ``resource``.
    name: str = ""
    watch_timeout: int = WATCH_TIMEOUT
    #: Only the objects with these labels (the central shield's watches of build pods).
    label_selector: str = ""
    resource_version: str | None = None
    backoff: Backoff = field(default_factory=Backoff)
    _phase: str = "list"
    _listed: bool = False
    #: Since when (wall clock) the stream a read found behind had been quiet, until the
    #: renewed watch is answered.
    _silent_since: datetime | None = None
    #: When a read last found the quiet stream current; None once it delivers again.
    _idle_confirmed_at: datetime | None = None
    #: ``namespace/name`` to resourceVersion of what the list and the stream delivered.
    _delivered: dict[str, str] = field(default_factory=dict)
    outage: Outage = field(init=False)

    def __post_init__(self) -> None:
        # Each retry counts as a restart of the watch, with reason "error".
        self.outage = Outage(
            f"watch of {self.name or self.resource}",
            log,
            lambda: self.counters.watch_restart(self.resource, "error"),
        )

    async def run(self) -> None:
        while True:
            try:
                if self.resource_version is None:
                    self._phase = "list"
                    await self._list()
                self._phase = "watch"
                await self._watch_once()
                # The server ended the watch (timeoutSeconds): renew from where we are.
                self.counters.watch_restart(self.resource, "closed")
            except _FrozenError as exc:
                log.warning("watch of %s: %s", self.name or self.resource, exc)
                self.counters.watch_restart(self.resource, "frozen")
                self._report_state()
            except _GoneError:
                log.info("watch of %s expired (410), listing again", self.name or self.resource)
                self.counters.watch_restart(self.resource, "expired")
                self.resource_version = None
            except Exception as exc:  # a failed renewal never ends the watch
                status = getattr(exc, "status", 0)
                if isinstance(exc, (*API_FAILURES, StreamError, ValueError)):
                    operation = (
                        self.resource.list_operation
                        if self._phase == "list"
                        else self.resource.watch_operation
                    )
                    self.counters.api_error(operation, status)
                if not isinstance(exc, (*API_FAILURES, ValueError)):
                    self.resource_version = None  # a stream error, or ours: list afresh
                retry_after = exc.retry_after if isinstance(exc, KubeError) else None
                delay = self.backoff.next_delay(retry_after if status == 429 else None)
                self.outage.failed(self._phase, exc, delay)
                self._report_state()
                await asyncio.sleep(delay)

    def _answered(self) -> None:
        """A list, or the start of a watch, was answered: the watch is current, and the
        backoff starts over. A quiet watch (the pods of an idle node) delivers no event to
        reset it: its attempts would add up over separate outages, each cut stream waiting
        longer, up to the 30 s cap, blind to the pods meanwhile."""
        was_current = (
            self.outage.since is None
            and self._silent_since is None
            and self._idle_confirmed_at is None
        )
        self._silent_since = None
        self._idle_confirmed_at = None
        self.outage.ended()
        self.backoff.reset()
        if not was_current or not self._listed:
            self._listed = True
            self._report_state()

    def _report_state(self) -> None:
        silent = self._silent_since is not None and self.outage.since is None
        self.counters.watch_state(
            self.resource,
            WatchStatus(
                listed=self._listed,
                watching=self._listed and self.outage.since is None and not silent,
                failing_since=self.outage.since or self._silent_since,
                error=self.outage.error or (self._frozen() if silent else None),
                silent=silent,
                idle_confirmed_at=self._idle_confirmed_at,
            ),
        )

    @staticmethod
    def _frozen() -> str:
        quiet = QUIET_PERIODS * BOOKMARK_PERIOD
        return f"no event or bookmark for {quiet:g}s, and a read found changes it missed"

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        """The stream's next bytes (b"" at its end). Quiet for ``QUIET_PERIODS``, the stream
        is checked by a read: idle (the read matches what it delivered), it is kept and waited
        on again; behind, it is frozen: reported silent, and _FrozenError renews it. A read
        that fails is a failed watch (the outage path)."""
        while True:
            try:
                async with asyncio.timeout(QUIET_PERIODS * BOOKMARK_PERIOD):
                    chunk = await resp.content.readany()
            except TimeoutError:
                pass
            else:
                if self._idle_confirmed_at is not None:
                    self._idle_confirmed_at = None
                    self._report_state()
                return chunk
            quiet_since = datetime.now(UTC) - timedelta(seconds=QUIET_PERIODS * BOOKMARK_PERIOD)
            self._phase = "list"
            items, _ = await self._list_all()
            self._phase = "watch"
            if not stream_is_current(self._delivered, items):
                self._silent_since = quiet_since
                raise _FrozenError(f"{self._frozen()}: a frozen stream, renewed")
            log.debug("watch of %s: quiet, and current by a read", self.name or self.resource)
            self._idle_confirmed_at = datetime.now(UTC)
            self._report_state()

    def _selectors(self) -> dict[str, str]:
        selectors = {"field_selector": self.field_selector}
        if self.label_selector:
            selectors["label_selector"] = self.label_selector
        return selectors

    async def _list(self) -> None:
        """List, and replace the cache with what the list has; the watch starts from it."""
        items, resource_version = await self._list_all()
        try:
            self.replace(items)
        except (AttributeError, TypeError) as exc:
            raise ValueError(f"malformed {self.resource} in list: {exc}") from None
        self._delivered = delivered_versions(items)
        self.resource_version = resource_version
        self._answered()

    async def _list_all(self) -> tuple[list[JsonObj], str]:
        """The objects and the list's resourceVersion, in pages of LIST_PAGE (one consistent
        snapshot: every page is read at the first one's resourceVersion); an expired
        ``continue`` (410) is a failed list, retried from the first page."""
        items: list[JsonObj] = []
        page: dict[str, str] = {}
        while True:
            body = await call_api(self.list_fn, **self._selectors(), limit=LIST_PAGE, **page)
            self.counters.api_contact()
            page_items = body.get("items") or []
            if not isinstance(page_items, list):
                raise ValueError(f"malformed {self.resource} list: items is not a list")
            items += page_items
            metadata = body.get("metadata") or {}
            if not metadata.get("continue"):
                break
            page = {"_continue": str(metadata["continue"])}
        if not all(isinstance(item, dict) for item in items):
            raise ValueError(f"malformed {self.resource} list: an item is not an object")
        return items, str(metadata.get("resourceVersion", ""))

    async def _watch_once(self) -> None:
        # Jitter the server-side timeout so that a fleet of agents does not renew in lockstep.
        server_timeout = max(1, int(self.watch_timeout * random.uniform(0.9, 1.1)))
        resp = await self.list_fn(
            **self._selectors(),
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=server_timeout,
            _preload_content=False,
            # A frozen stream is renewed by _read (a quiet one found behind by a read).
            _request_timeout=aiohttp.ClientTimeout(
                total=server_timeout + 30, sock_connect=REQUEST_TIMEOUT
            ),
        )
        async with resp:
            if resp.status == 410:
                raise _GoneError()
            if not 200 <= resp.status <= 299:
                raise await error_from(resp)
            self.counters.api_contact()
            self._answered()
            # Split events ourselves: aiohttp's readline() refuses lines over 64 KiB, and
            # one Pod with large annotations can be longer than that.
            buffer = b""
            while chunk := await self._read(resp):
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        self._handle_line(line)
            if buffer.strip():
                self._handle_line(buffer)

    def _handle_line(self, line: bytes) -> None:
        event = json.loads(line)
        obj = event.get("object") or {} if isinstance(event, dict) else None
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata") or {}, dict):
            # A garbled stream: fail this watch (counted, logged, retried) rather than the
            # task, which would take the agent down with it. Re-list from scratch.
            self.resource_version = None
            raise ValueError(f"malformed watch event on {self.resource}: not an object")
        kind = str(event.get("type", ""))
        if kind == "ERROR" or "type" not in event:
            status = obj if kind == "ERROR" else event
            code = int(status.get("code") or 0)
            if code == 410:
                raise _GoneError()
            raise StreamError(code, str(status.get("message", "")))
        # Events and bookmarks (at most one a minute from a real server) show the API alive.
        self.counters.api_contact()
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        log.debug("watch of %s: %s at resourceVersion %s", self.name or self.resource, kind, rv)
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = str(rv)
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("ignoring watch event of type %r on %s", kind, self.resource)
            return
        try:
            self.apply(kind, obj)
        except (AttributeError, TypeError) as exc:
            self.resource_version = None
            raise ValueError(f"malformed {self.resource} in watch event: {exc}") from None
        key, version = _key_and_version(obj)
        if kind == "DELETED":
            self._delivered.pop(key, None)
        else:
            self._delivered[key] = version
        if rv:
            self.resource_version = str(rv)
