"""Kubernetes Events on the agent's Node: ``DrainHeld``, ``DrainReleased``, ``DrainHoldExpired``.

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
    await events.drain_held(held_drain, reasons, detail)
    await events.drain_released(held_drain, outcome, held_for)   # outcome "expired" →
                                                                 # DrainHoldExpired (Warning)
    await events.emit(reason, message, type="Normal", key=None)  # the general form
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

from drain_guard.health import format_duration
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Kube
from drain_guard.kube.operations import Operation
from drain_guard.metrics import Metrics
from drain_guard.protocol import format_rfc3339, truncate_utf8

log = logging.getLogger(__name__)

DRAIN_HELD = "DrainHeld"
DRAIN_RELEASED = "DrainReleased"
DRAIN_HOLD_EXPIRED = "DrainHoldExpired"
HOLD_REQUEST_INVALID = "HoldRequestInvalid"
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
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.component = component
        self.clock = clock
        self.metrics = metrics
        #: The Node's uid, once the controller knows it (involvedObject.uid).
        self.node_uid = node_uid
        self.window = window
        self._written: OrderedDict[tuple[str, str, str], _Written] = OrderedDict()
        self._lock = asyncio.Lock()
        self._last_name_ns = 0

    async def drain_held(self, held_drain: str, reasons: Sequence[str], detail: str) -> None:
        """A drain request is held (new hold or changed reasons); ``detail``: pods, digests."""
        why = ", ".join(str(r) for r in reasons)
        await self.emit(
            DRAIN_HELD,
            f"Holding drain request {held_drain} ({why}): {detail}",
            key=f"{held_drain} {why}",
        )

    async def drain_released(self, held_drain: str, outcome: str, held_for: timedelta) -> None:
        """A hold ended; an ``expired`` hold is a Warning ``DrainHoldExpired``."""
        took = format_duration(held_for)
        if str(outcome) == "expired":
            await self.emit(
                DRAIN_HOLD_EXPIRED,
                f"Hold of drain request {held_drain} expired after {took} (max-hold): "
                "the drain goes ahead although a guard still blocked",
                type=WARNING,
                key=held_drain,
            )
            return
        await self.emit(
            DRAIN_RELEASED,
            f"Released drain request {held_drain} after {took} (outcome {outcome})",
            key=f"{held_drain} {outcome}",
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
        self, reason: str, message: str, type: str = NORMAL, key: str | None = None
    ) -> None:
        """Write an Event, or bump the one with the same type, reason and key (default: the
        message) written within the window. Never raises."""
        cache_key = (type, reason, message if key is None else key)
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
                name = await self._create(reason, message, type, now)
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

    async def _create(self, reason: str, message: str, type: str, now: datetime) -> str:
        name = self._event_name(now)
        involved: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "name": self.node_name}
        if self.node_uid:
            involved["uid"] = self.node_uid
        body = {
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
        core = self.kube.core
        await self.kube.call(
            Operation.EVENT_CREATE, core.create_namespaced_event, EVENT_NAMESPACE, body
        )
        return name

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

    def drain_released(self, held_drain: str, outcome: str, held_for: timedelta) -> None:
        """Queue ``EventRecorder.drain_released``."""
        self._post(partial(self.recorder.drain_released, held_drain, outcome, held_for))

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
