"""Kubernetes Events on the agent's Node (``DrainReleased``, ``DrainHoldExpired``,
``HoldRequestInvalid``; ``DrainHeld`` only for a node whose pool cannot be told) and on its
MachineConfigPool (``PoolRolloutHeld``, ``PoolRolloutReleased``: the pool's rollout waits on
this node's hold, and goes on).

Each Event is an API write (an etcd write), so a hold costs three (docs/protocol.md, Events):
its start is told once, on the pool, where nothing else says it (the Node's own annotations
say it on the Node while it lasts); its end on the Node, carrying what the hold was for, and
on the pool. Without a pool, two: ``DrainHeld`` and the end, on the Node. A hold's later
changes refresh its start Event in place (a PATCH of its count and message), never a new one.

A pool's Event is what ``oc describe mcp worker`` shows: kubectl lists the Events whose
``involvedObject`` has the pool's kind, name, empty namespace and, when the pool's uid is known,
its uid (``searchEvents`` in kubectl's ``pkg/describe``); so the recorder takes the pool's uid
from the agent's watch of its own pool (``watched_pool_uid``: the pool as last listed, so a pool
deleted and created again is named by its new uid), and looks it up (a ``get`` on
``machineconfigpools``, once a pool) only when that watch does not have it (not listed yet, MCO's
APIs not discovered, or the node moved to another pool since the hold began); neither when
``pool_uids`` is off (the systemd install: the node's identity may not read pools). Without
the uid the Event is still found by ``oc get events -A --field-selector
involvedObject.kind=MachineConfigPool,involvedObject.name=worker``. Its ``related`` object
is the agent's Node, as the confinement requires (docs/install.md).

Events are aggregated the way client-go's event correlator does it: an event with the same
type, reason and key as one written within ``window`` bumps that Event's ``count`` and
``lastTimestamp`` (and takes the newest message) with a PATCH instead of creating another, so a
long hold that is re-evaluated often does not flood the Node's events. Only the ``events`` verbs
``create`` and ``patch`` are used (the RBAC grants exactly those).

Events are best-effort (docs/troubleshooting.md): queued in memory, each tried once, lost if
the agent dies first; the annotations, the log and the metrics are the record of every hold.

Emitting never raises into the controller: a failure is logged, and counted as every other
API call is, by ``Kube.call`` (``drain_guard_api_errors_total{operation="event_create"|
"event_patch"}``; an answer is API contact); successes count in
``drain_guard_events_emitted_total{reason}``.

API (the controller)::

    events = EventRecorder(kube, node_name, metrics=metrics)
    events.node_uid = node.uid                       # once known; sets involvedObject.uid
    events.watched_pool_uid = mco_watches.pool_uid   # the pool's uid from the pool's watch
    await events.pool_held(pool, held_drain, reasons, detail, since, expires)
    await events.drain_held(held_drain, reasons, detail)    # instead, when no pool is known
    await events.pool_released(pool, held_drain, outcome, held_for)
    await events.drain_released(record, outcome, held_for)  # outcome "expired" →
                                                            # DrainHoldExpired (Warning)
    await events.drain_released(record, "manual", held_for, released_by="alice")
    await events.emit(reason, message, type="Normal", key=None, pool=None)  # the general form
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from drain_guard.core.durations import format_duration
from drain_guard.core.operations import Operation
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Kube
from drain_guard.protocol import (
    DRAIN_HELD,
    DRAIN_HOLD_EXPIRED,
    DRAIN_RELEASED,
    HOLD_REQUEST_INVALID,
    POOL_API_VERSION,
    POOL_KIND,
    POOL_ROLLOUT_HELD,
    POOL_ROLLOUT_RELEASED,
    HoldRecord,
    format_rfc3339,
    truncate_utf8,
)
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.status.holdrequest import printable, releases_when, split_hold_detail

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

#: Events of cluster-scoped objects live in the default namespace (as the kubelet's do).
EVENT_NAMESPACE = "default"
#: Same-key events within this window are aggregated (client-go uses 10 minutes too).
DEFAULT_WINDOW = timedelta(minutes=10)
#: Keys remembered for aggregation; the agent emits few distinct events, so this is plenty.
CACHE_SIZE = 64
#: The API server limits an Event's message to 1 KiB in events.k8s.io; keep to that.
MAX_MESSAGE = 1024


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _unwatched(_pool: str) -> str | None:
    """No watch of the pool: its uid is looked up."""
    return None


@dataclass
class _Written:
    """An Event this recorder wrote, for aggregation."""

    name: str
    count: int
    last: datetime


#: Events waiting to be written; beyond this the API has long been unreachable.
QUEUE_SIZE = 256


class EventRecorder:
    """Writes aggregated core/v1 Events about one Node."""

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        component: str = "drain-guard",
        clock: Callable[[], datetime] = _utcnow,
        *,
        metrics: Metrics | None = None,
        node_uid: str | None = None,
        window: timedelta = DEFAULT_WINDOW,
        pool_uids: bool = True,
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.component = component
        self.clock = clock
        self.metrics = metrics
        #: The Node's uid, once the controller knows it (involvedObject.uid).
        self.node_uid = node_uid
        self.window = window
        #: Whether to look pools' uids up (``oc describe mcp`` needs them; a read right too).
        self.pool_uids = pool_uids
        #: A pool's uid as the agent's watch of it last listed it (None: not watched, not
        #: listed); set once the watch exists.
        self.watched_pool_uid: Callable[[str], str | None] = _unwatched
        self._pool_uid: dict[str, str | None] = {}
        self._written: OrderedDict[tuple[str, str, str, str], _Written] = OrderedDict()
        self._lock = asyncio.Lock()
        self._last_name_ns = 0

    async def drain_held(self, held_drain: str, reasons: Sequence[str], detail: str) -> None:
        """A drain request is held, on a node whose pool cannot be told (else ``pool_held``
        tells it); a change of the hold refreshes the same Event (its count, the newest
        message)."""
        why = ", ".join(str(r) for r in reasons)
        await self.emit(
            DRAIN_HELD,
            f"Holding drain request {held_drain} ({why}): {detail}",
            key=held_drain,
        )

    async def drain_released(
        self,
        record: HoldRecord,
        outcome: str,
        held_for: timedelta,
        released_by: str | None = None,
        why: str = "",
    ) -> None:
        """A hold ended; an ``expired`` hold is a Warning ``DrainHoldExpired``; a manual
        release says who released it, when the Node recorded it (``released-by``). The message
        ends with what the hold was for (its reasons and detail, as last written): the hold's
        one Event on the Node, which the Node's annotations no longer show once it ended."""
        took = format_duration(held_for)
        held_drain = record.held_drain
        held = f"; held for {_held_for(record)}"
        if str(outcome) == "expired":
            await self.emit(
                DRAIN_HOLD_EXPIRED,
                f"Hold of drain request {held_drain} expired after {took} (max-hold): "
                f"the drain goes ahead although a guard still blocked{held}",
                type=WARNING,
                key=held_drain,
            )
            return
        by = "" if released_by is None else f", released by {printable(released_by)}"
        because = f": {why}" if why else ""
        await self.emit(
            DRAIN_RELEASED,
            f"Released drain request {held_drain} after {took} (outcome {outcome}{by})"
            f"{because}{held}",
            key=f"{held_drain} {outcome}",
        )

    async def pool_held(
        self,
        pool: str,
        held_drain: str,
        reasons: Sequence[str],
        detail: str,
        since: datetime,
        expires: datetime,
    ) -> None:
        """The hold stalls ``pool``'s rollout: the pool waits on this node until it ends. One
        Event per hold: a change of its reasons or detail (or the MCD asking again) refreshes
        it (its count, the newest message), as client-go's aggregation does a repeat."""
        why = ", ".join(str(r) for r in reasons)
        details = split_hold_detail(detail)
        clears = releases_when([(str(r), details.get(str(r), "")) for r in reasons], None)
        whens = " and ".join(line.partition(": ")[2] or line for line in clears) or "when released"
        await self.emit(
            POOL_ROLLOUT_HELD,
            f"{pool} pool waiting: {self.node_name} held ({why}, since {format_rfc3339(since)},"
            f" ends {whens} or at {format_rfc3339(expires)})",
            key=held_drain,
            pool=pool,
        )

    async def pool_released(
        self, pool: str, held_drain: str, outcome: str, held_for: timedelta
    ) -> None:
        """The hold ended: the pool's rollout goes on past this node."""
        await self.emit(
            POOL_ROLLOUT_RELEASED,
            f"{pool} pool goes on: {self.node_name} released after {format_duration(held_for)}"
            f" (outcome {outcome})",
            key=f"{held_drain} {outcome}",
            pool=pool,
        )

    async def hold_request_invalid(self, what: str, why: str) -> None:
        """An operator's hold request cannot be read: it holds nothing, which the operator
        must learn where they look (``oc describe node``), not only in the agent's log."""
        await self.emit(
            HOLD_REQUEST_INVALID,
            f"Ignoring {what}: {why}; it holds nothing until fixed"
            " (drain-guard hold writes a valid one)",
            type=WARNING,
            key=what,
        )

    async def emit(
        self,
        reason: str,
        message: str,
        type: str = NORMAL,
        key: str | None = None,
        pool: str | None = None,
    ) -> None:
        """Write an Event about the Node (or ``pool``, related to the Node), or bump the one
        with the same type, reason, key (default: the message) and pool written within the
        window. Never raises."""
        cache_key = (type, reason, message if key is None else key, pool or "")
        message = truncate_utf8(message, MAX_MESSAGE)
        async with self._lock:
            now = self.clock()
            seen = self._written.get(cache_key)
            if seen is not None and now - seen.last <= self.window:
                try:
                    await self._patch(seen, message, now)
                except KubeError as exc:
                    if exc.status != 404:
                        self._failed(reason, exc)
                        return
                    # The Event is gone (TTL, deleted): write a new one below.
                    del self._written[cache_key]
                else:
                    self._written.move_to_end(cache_key)
                    self._emitted(reason)
                    return
            try:
                name = await self._create(reason, message, type, now, pool)
            except KubeError as exc:
                self._failed(reason, exc)
                return
            self._written[cache_key] = _Written(name=name, count=1, last=now)
            self._written.move_to_end(cache_key)
            while len(self._written) > CACHE_SIZE:
                self._written.popitem(last=False)
            self._emitted(reason)

    def _emitted(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.count_event(reason)

    def _failed(self, reason: str, exc: KubeError) -> None:
        log.warning("could not write %s event on node %s: %s", reason, self.node_name, exc)

    def _event_name(self, now: datetime) -> str:
        """``<node>.<hex nanoseconds>`` like client-go; strictly increasing per recorder."""
        ns = max(int(now.timestamp() * 1e9), self._last_name_ns + 1)
        self._last_name_ns = ns
        return f"{self.node_name}.{ns:x}"

    async def _create(
        self, reason: str, message: str, type: str, now: datetime, pool: str | None
    ) -> str:
        name = self._event_name(now)
        node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "name": self.node_name}
        if self.node_uid:
            node["uid"] = self.node_uid
        involved = node
        if pool is not None:
            involved = {"apiVersion": POOL_API_VERSION, "kind": POOL_KIND, "name": pool}
            uid = await self._uid_of(pool)
            if uid:
                involved["uid"] = uid
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": EVENT_NAMESPACE},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type,
            "count": 1,
            "firstTimestamp": format_rfc3339(now),
            "lastTimestamp": format_rfc3339(now),
            "source": {"component": self.component, "host": self.node_name},
            "reportingComponent": self.component,
            "reportingInstance": f"{self.component}-{self.node_name}",
        }
        if pool is not None:
            body["related"] = node
        core = self.kube.core
        await self.kube.call(
            Operation.EVENT_CREATE, core.create_namespaced_event, EVENT_NAMESPACE, body
        )
        return name

    async def _uid_of(self, pool: str) -> str | None:
        """``pool``'s uid, from its watch, else looked up once (None: not looked up, absent,
        or not readable; a failed lookup is tried again at the pool's next Event)."""
        if not self.pool_uids:
            return None
        watched = self.watched_pool_uid(pool)
        if watched is not None:
            return watched
        if pool not in self._pool_uid:
            try:
                self._pool_uid[pool] = await self.kube.pool_uid(pool)
            except KubeError as exc:
                log.info("pool %s: uid not read (%s); its Event carries none", pool, exc)
                return None
        return self._pool_uid[pool]

    async def _patch(self, seen: _Written, message: str, now: datetime) -> None:
        body = {"count": seen.count + 1, "lastTimestamp": format_rfc3339(now), "message": message}
        core = self.kube.core
        # A 404 (the Event expired or was deleted) is an answer: emit() writes a new one.
        await self.kube.call(
            Operation.EVENT_PATCH,
            core.patch_namespaced_event,
            seen.name,
            EVENT_NAMESPACE,
            body,
            _content_type="application/merge-patch+json",
        )
        seen.count += 1
        seen.last = now


def _held_for(record: HoldRecord) -> str:
    """What a hold was for, as its record says: the detail (which names each reason), or the
    reasons alone when it has none."""
    return printable(record.detail) if record.detail else ", ".join(record.reason_names)


class EventQueue:
    """Writes a recorder's Events in order from a background task.

    A hold must land before the drain controller acts (5 s after the request); an Event
    write can take up to its request timeout. Queueing keeps Event writes off that path:
    the controller posts and moves on, and ``run()`` writes them one by one, in order.
    """

    def __init__(self, recorder: EventRecorder, maxsize: int = QUEUE_SIZE) -> None:
        self.recorder = recorder
        self._queue: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue(maxsize)

    @property
    def node_uid(self) -> str | None:
        return self.recorder.node_uid

    @node_uid.setter
    def node_uid(self, uid: str | None) -> None:
        self.recorder.node_uid = uid

    def drain_held(self, held_drain: str, reasons: Sequence[str], detail: str) -> None:
        """Queue ``EventRecorder.drain_held``."""
        self._post(partial(self.recorder.drain_held, held_drain, list(reasons), detail))

    def drain_released(
        self,
        record: HoldRecord,
        outcome: str,
        held_for: timedelta,
        released_by: str | None = None,
        why: str = "",
    ) -> None:
        """Queue ``EventRecorder.drain_released``."""
        write = partial(self.recorder.drain_released, record, outcome, held_for, released_by, why)
        self._post(write)

    def pool_held(
        self,
        pool: str,
        held_drain: str,
        reasons: Sequence[str],
        detail: str,
        since: datetime,
        expires: datetime,
    ) -> None:
        """Queue ``EventRecorder.pool_held``."""
        held = self.recorder.pool_held
        self._post(partial(held, pool, held_drain, list(reasons), detail, since, expires))

    def pool_released(self, pool: str, held_drain: str, outcome: str, held_for: timedelta) -> None:
        """Queue ``EventRecorder.pool_released``."""
        self._post(partial(self.recorder.pool_released, pool, held_drain, outcome, held_for))

    def hold_request_invalid(self, what: str, why: str) -> None:
        """Queue ``EventRecorder.hold_request_invalid``."""
        self._post(partial(self.recorder.hold_request_invalid, what, why))

    def _post(self, write: Callable[[], Awaitable[None]]) -> None:
        try:
            self._queue.put_nowait(write)
        except asyncio.QueueFull:
            # The API has been unreachable for a long while: Events are informative, the
            # hold protocol is not; drop this one rather than grow without bound.
            log.warning("event queue full on node %s: Event dropped", self.recorder.node_name)
            if self.recorder.metrics is not None:
                self.recorder.metrics.count_api_error(Operation.EVENT_CREATE)

    async def run(self) -> None:
        """Write queued Events until cancelled (``EventRecorder`` never raises)."""
        while True:
            write = await self._queue.get()
            try:
                await write()
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Wait until every queued Event is written (``run()`` must be running)."""
        await self._queue.join()
