"""The agent's loop: watch state in, ``decide()``, compare-and-swap patch out.

The loop wakes on a change of the Node or of its pods (the watch cache's event) and at the
few instants the decision itself names (a hold's expiry, a manual hold request's expiry);
it never polls the API. It does nothing until both watches have listed (invariant 7).
Every write is a JSON Patch whose ``test`` operations pin the values it was decided on; a
lost race (409/422) is answered by reading the Node again and deciding again (invariant 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from drain_guard import __version__, guards, protocol
from drain_guard.core.alerts import AlertsSeen
from drain_guard.core.nodes import NodeObj
from drain_guard.core.operations import Watched
from drain_guard.core.pods import ALL_NAMESPACES
from drain_guard.decision import decisions, holds
from drain_guard.decision.decide import NothingHeldError, decide, force_release
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Applied, PatchResult
from drain_guard.kube.listwatch import NamedCache, WatchCache
from drain_guard.kube.retry import Backoff, Outage
from drain_guard.node import host
from drain_guard.node.holdreport import EventSink, HoldReport
from drain_guard.node.interfaces import Clock, NodeApi, SystemClock
from drain_guard.node.loop_settings import LoopSettings
from drain_guard.node.mcowatch import McoWatches
from drain_guard.node.observeonly import ObserveOnly
from drain_guard.node.releasing import ReleaseEscalation
from drain_guard.node.watches import blocking_pods
from drain_guard.runtime import selfcheck
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.health import Health, watch_unready
from drain_guard.runtime.logs import decision_fields, log_key
from drain_guard.shield.loop import Shield
from drain_guard.status.agent import AgentStatus
from drain_guard.status.parts import AlertsStatus, WouldHoldStatus
from drain_guard.status.snapshot import decided, nothing_decided

log = logging.getLogger("drain_guard.node.controller")

#: Re-decisions after a lost compare-and-swap before backing off: a write refused this many
#: times in a row (a webhook, the annotation size limit) is retried on the backoff's timer,
#: with no event needed.
CAS_ATTEMPTS = 5
#: The loop counts as stuck (``/healthz`` fails) when one pass takes longer than this.
STUCK_AFTER = 120.0


class RefusedError(KubeError):
    """The Node write was refused (409/422) on every attempt of one pass: retried with backoff
    (a competing writer wakes the loop sooner; a webhook or the size limit does not)."""


# --- the controller -------------------------------------------------------------------------


class Controller:
    """One node's loop; also the server's StatusSource."""

    def __init__(
        self,
        settings: LoopSettings,
        kube: NodeApi,
        metrics: Metrics,
        counters: Health,
        events: EventSink,
        cache: WatchCache,
        shield: Shield | None = None,
        clock: Clock | None = None,
        mco: Mapping[Watched, str] | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.settings = settings
        self.shield = shield
        self.kube = kube
        self.metrics = metrics
        self.counters = counters
        self.events = events
        self.hold_report = HoldReport(metrics, events, settings.max_hold, settings.observe_only)
        self.cache = cache
        self.booted = host.BootedImageReader(
            settings.host, metrics, self.clock.now, self.clock.monotonic
        )
        self.guards = settings.guards
        #: The node's pods in each blocking-pod namespace the pod watch does not cover, each
        #: from a watch of its own (``runner``) that wakes the loop as the pod watch does.
        self.blocking_caches = {
            ns: WatchCache(changed=cache.changed) for ns in settings.blocking_watch_namespaces
        }
        #: The named objects the guards read (``Guard.reads``), each from a watch of its own
        #: (``runner``) that wakes the loop as the pod watch does.
        self.named_caches = {
            ref: NamedCache(changed=cache.changed) for guard in self.guards for ref in guard.reads
        }
        #: MCO's objects the noop-image guard reads (``mco``: the resources served and their
        #: versions), each from a watch of its own (``runner``); none through the node proxy.
        self.mco = McoWatches(mco or {}, cache.changed)
        #: The alert query's latest answer (``alertsource.AlertSource``), with alert gating on.
        self.alerts: AlertsSeen | None = None if settings.alert_url is None else AlertsSeen()
        self.started_at = self.clock.now()
        # What the agent knows of holds between passes (holds.py derives what happened).
        self._memory = holds.Memory()
        self._status = AgentStatus(
            node=settings.node_name,
            decision="starting",
            explanation="waiting for the Node and pod watches to list",
            version=__version__,
            started_at=self.started_at,
            generated_at=self.started_at,
            observe_only=settings.observe_only,
        )
        self._pass_started: float | None = None
        # Set by the start-up self-check, in the background.
        self.confinement: selfcheck.Confinement = selfcheck.NOT_CHECKED
        self._synced_logged: set[str] = set()
        self._running = False
        self._last_logged: tuple[str, ...] | None = None
        # Malformed inputs of the last decision: each is logged and counted once, when it
        # appears, however many passes see it.
        self._invalid: frozenset[guards.InvalidInput] = frozenset()
        # The watch lags behind our own patches (and GETs after a lost compare-and-swap):
        # (the watch's resourceVersion then, the Node as the API returned it), used until
        # the watch delivers something newer.
        self._written: tuple[str, NodeObj] | None = None
        # --observe-only: what it would have held, and what it saw since it started.
        self._observe_only = ObserveOnly(metrics) if settings.observe_only else None
        # The release this pass is writing, and the one that has failed since.
        self._release = ReleaseEscalation(metrics, settings.node_name, self.clock.now)
        # Since when, and why, the Node writes fail without an answer or with a 5xx: the API
        # server reads (watches, the cache) but does not commit; /readyz says so.
        self._writes_failing: tuple[datetime, str] | None = None

    # StatusSource -------------------------------------------------------------------------

    def status(self) -> AgentStatus:
        return replace(
            self._status,
            generated_at=self.clock.now(),
            watches={
                **{str(r): self.counters.watch(r) for r in (Watched.NODE, Watched.POD)},
                **{ref.watch_name: c.watch for ref, c in self.named_caches.items()},
            },
            last_api_contact=self.counters.last_contact,
            release_failing=self._release.failing,
            observed=None if self._observe_only is None else self._observe_only.observed,
            shield=None if self.shield is None else self.shield.status(),
            build_pod_namespaces=self.settings.build_pod_namespaces,
            pod_watch_namespace=self.settings.pod_watch_namespace or ALL_NAMESPACES,
            blocking_pod_namespaces=self.settings.blocking_pod_namespaces,
            blocking_watch_namespaces=tuple(self.blocking_caches),
            confinement=self.confinement.to_json(),
            alerts=None
            if self.alerts is None or self.settings.alert_url is None
            else AlertsStatus(self.settings.alert_url, self.alerts),
        )

    def alerts_changed(self, seen: AlertsSeen) -> None:
        """The alert query's answer changed: decide again on it."""
        self.alerts = seen
        self.metrics.set_alerts(seen.error is None if seen.checked_at else None, len(seen.firing))
        self.cache.changed.set()

    def alive(self) -> bool:
        if not self._running:
            return False
        started = self._pass_started
        return started is None or self.clock.monotonic() - started < STUCK_AFTER

    def ready(self) -> tuple[bool, str]:
        """health's rule on the Node and pod watches, the Node found, its writes committed (a
        write that failed without an answer or with a 5xx, until a pass succeeds), and the
        guards' named watches (a guard deciding on an object it can no longer read)."""
        return self.counters.ready(
            (Watched.NODE, Watched.POD),
            self.clock.now(),
            self.settings.api_stale_after,
            also=self._unready(),
        )

    def _unready(self) -> str | None:
        if self.cache.node is None:
            return f"node {self.settings.node_name} not found"
        if self._writes_failing is not None:
            since, why = self._writes_failing
            return f"node writes failing since {protocol.format_rfc3339(since)} ({why})"
        now, stale_after = self.clock.now(), self.settings.api_stale_after
        for ref, named in self.named_caches.items():
            unready = watch_unready(ref.watch_name, named.watch, now, stale_after)
            if unready is not None:
                return unready
        return None

    # The loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Decide on every change and at the decision's own recheck time, until cancelled."""
        self._running = True
        recheck: datetime | None = None
        retry = Backoff()
        outage = Outage(
            f"decisions on node {self.settings.node_name}",
            log,
            lambda: self.metrics.count_retry("controller"),
        )
        try:
            while True:
                await self._wait(recheck)
                self._report_synced()
                if not self.cache.synced:
                    continue  # invariant 7: no decision before both watches listed
                self._pass_started = self.clock.monotonic()
                self._release.releasing = None
                try:
                    recheck = self.wake_at(await self.step())
                    retry.reset()
                    outage.ended()
                    self._writes_failing = None
                    self._release.landed()
                except Exception as exc:  # one failed pass never ends the loop
                    self._memory = self._release.failed(exc, self._memory)
                    # An API error, refused writes, or ours (an OSError out of descriptors):
                    # logged once per run, counted, and retried on a timer of its own, so that
                    # every timer (retry, max-hold, hold-request expiry) outlives the failure.
                    throttled = (
                        exc.retry_after
                        if isinstance(exc, KubeError) and exc.status == 429
                        else None
                    )
                    delay = retry.next_delay(throttled)
                    action = (
                        "node write"
                        if isinstance(exc, RefusedError)
                        else "API call"
                        if isinstance(exc, KubeError)
                        else "decision"
                    )
                    outage.failed(action, exc, delay)
                    recheck = self.clock.now() + timedelta(seconds=delay)
                finally:
                    self._pass_started = None
        finally:
            self._running = False

    def wake_at(self, recheck: datetime | None) -> datetime | None:
        """The decision's own time to decide again, or the booted image's next read if that
        comes first (a read that failed is tried again without waiting for an event)."""
        delay = self.booted.retry_in()
        if delay is None:
            return recheck
        read_at = self.clock.now() + timedelta(seconds=delay)
        return read_at if recheck is None else min(recheck, read_at)

    def _report_synced(self) -> None:
        for resource, synced in (("node", self.cache.node_synced), ("pod", self.cache.pods_synced)):
            if synced and resource not in self._synced_logged:
                self._synced_logged.add(resource)
                log.info("%s watch synced", resource)

    async def _wait(self, recheck: datetime | None) -> None:
        if recheck is None:
            await self.cache.changed.wait()
        else:
            timeout = max(0.0, (recheck - self.clock.now()).total_seconds())
            # asyncio.timeout, not wait_for: in Python 3.11 wait_for can swallow a cancellation
            # that lands as the event fires, and the loop would then never stop (SIGTERM hung).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.cache.changed.wait()
        self.cache.changed.clear()

    def _current_node(self) -> NodeObj | None:
        """The newest Node known: the watch's, or the one our last patch returned."""
        node = self.cache.node
        if self._written is None or node is None:
            return node
        based_on, written = self._written
        if node.resource_version == based_on or _older(node, written):
            return written
        self._written = None
        return node

    async def step(self) -> datetime | None:
        """One pass: decide and apply, re-deciding on fresh state after a lost
        compare-and-swap; returns when to decide again without a watch event, if ever."""
        node = self._current_node()
        for _ in range(CAS_ATTEMPTS):
            if node is None:
                why = f"node {self.settings.node_name} not found"
                self._status = nothing_decided(self._status, why, self.clock.now())
                return None
            self._observe(node)
            view = guards.NodeView(
                name=node.name,
                annotations=node.annotations,
                pods=tuple(self.cache.pods.values()),
                booted=await self.booted.get(),
                now=self.clock.now(),
                resource_version=node.resource_version,
                alerts=self.alerts,
                labels=node.labels,
                blocking_pods=blocking_pods(self.blocking_caches),
                known_hold=holds.known_hold(self._memory, self.clock.now(), self.clock.monotonic()),
                ended_hold=self._memory.pending_end,
                unschedulable=node.unschedulable,
                objects={ref: c.obj for ref, c in self.named_caches.items() if c.listed},
                mco=self.mco.objects(node.annotations),
            )
            decision = decide(view, self.guards, self.settings.max_hold)
            if not decision.patch:
                self._settle(decision, node, view)
                return decision.recheck_at
            if self._observe_only is not None:
                # The one place that chooses between writing and reporting a decision.
                self._report(self._observe_only, decision, node, view)
                return decision.recheck_at
            self._release.releasing = decision if isinstance(decision, decisions.Release) else None
            result = await self._write(node.name, decision.patch)
            if isinstance(result, Applied):
                self._written = (node.resource_version, result.node)
                self._applied(decision, node, result.node)
                self._settle(decision, result.node, view)
                return decision.recheck_at
            log.info(
                "compare-and-swap lost (%s %s); deciding again on the current Node",
                result.status,
                result.message,
            )
            refused = RefusedError(
                result.status, f"{CAS_ATTEMPTS} times in a row: {result.message}"
            )
            node = await self.kube.get_node(self.settings.node_name)
            if node is not None and self.cache.node is not None:
                # Newer than the watch for now, like our own writes: use it until caught up.
                self._written = (self.cache.node.resource_version, node)
        raise refused

    async def _write(self, name: str, patch: Sequence[Mapping[str, Any]]) -> PatchResult:
        """The Node write, and whether writes fail: reads alone do not make the agent ready
        (an etcd freeze answered every read from the watch cache and no write)."""
        try:
            result = await self.kube.patch_node_json(name, patch)
        except KubeError as exc:
            if exc.status in (0, 429) or exc.status >= 500:
                since = self._writes_failing
                self._writes_failing = (self.clock.now() if since is None else since[0], str(exc))
            raise
        self._writes_failing = None
        return result

    # Holds: what happened, derived by holds.py, applied here ---------------------------------

    def _observe(self, node: NodeObj) -> None:
        """What someone else's writes did: new requests, holds ended or found on the Node."""
        if self.shield is not None:
            self.shield.node_seen(node.unschedulable)
        self.events.node_uid = node.uid or None
        seen_at = self.cache.node_seen_at or self.clock.monotonic()
        now, monotonic = self.clock.now(), self.clock.monotonic()
        change = holds.observe(
            self._memory,
            node.annotations,
            now=now,
            monotonic=monotonic,
            seen_at=seen_at,
            cordoned=node.unschedulable,
        )
        self._apply(change, node)

    def _applied(self, decision: decisions.Decision, before: NodeObj, after: NodeObj) -> None:
        """What our own write of ``decision`` did."""
        change = holds.applied(
            self._memory,
            decision,
            cordoned=before.unschedulable,
            after=after.annotations,
            now=self.clock.now(),
            monotonic=self.clock.monotonic(),
        )
        self._apply(change, after)

    def _apply(self, change: holds.Change, node: NodeObj) -> None:
        """Keep the new memory; tell each transition (metrics, Events, log lines)."""
        self._memory = change.memory
        self.hold_report.tell(change.transitions, node.name, protocol.pool_of(node.annotations))
        if self._observe_only is not None:
            self._observe_only.seen(change.transitions)

    # Observe-only -------------------------------------------------------------------------

    def _report(
        self,
        observe_only: ObserveOnly,
        decision: decisions.Decision,
        node: NodeObj,
        view: guards.NodeView,
    ) -> None:
        """--observe-only: what would have been written, in the log, /status and metrics."""
        hold = observe_only.would_hold(decision)
        self._settle(decision, node, view)
        last = self._status.last_would_hold
        if hold is not None and (last is None or last.request != hold.request):
            # Kept after the drain went ahead: the log's "would hold" also stays in /status.
            reasons = tuple(b.reason.value for b in hold.blocks)
            detail = decisions.hold_detail(hold.blocks)
            would = WouldHoldStatus(view.now, hold.request, reasons, detail)
            self._status = replace(self._status, last_would_hold=would)

    # Status and the decision log ---------------------------------------------------------

    def _settle(self, decision: decisions.Decision, node: NodeObj, view: guards.NodeView) -> None:
        self._report_invalid(decision, node.name)
        self._status = decided(
            self._status,
            decision,
            annotations=node.annotations,
            hold=holds.known_hold(self._memory, self.clock.now(), self.clock.monotonic()),
            booted=view.booted,
            max_hold=self.settings.max_hold,
            now=self.clock.now(),
        )
        pods = guards.evidence(decision.verdicts, guards.BuildPodsSeen)
        if pods is not None:
            self.metrics.set_build_pods(len(pods.pods))
            if self._observe_only is not None:
                self._observe_only.watch_evictions(pods.pods, view)
        image = guards.evidence(decision.verdicts, guards.ImageCompared)
        self.metrics.set_image_match(None if image is None else image.equal)
        replacement = None if image is None else image.replacement
        self.metrics.set_image_replacement(None if replacement is None else replacement.foresight)
        self.metrics.set_pool_held(self._status.pool, self._status.held_request is not None)
        fields = decision_fields(node.name, decision)
        observed = self.settings.observe_only and bool(decision.patch)
        if observed:
            fields["observeOnly"] = True
            fields["why"] = self._status.explanation
        key = log_key(decision)
        if (decision.patch and not observed) or key != self._last_logged:
            self._last_logged = key
            log.info("decision", extra={"fields": fields})

    def _report_invalid(self, decision: decisions.Decision, node: str) -> None:
        invalid = decisions.invalid_inputs(decision)
        for bad in invalid:
            if bad not in self._invalid:
                self.metrics.count_invalid_input(bad.kind)
                log.warning(
                    "invalid input ignored: %s: %s",
                    bad.what,
                    bad.why,
                    extra={"fields": {"node": node, "kind": bad.kind, "what": bad.what}},
                )
                if bad.kind == "hold_request" and not self.settings.observe_only:
                    self.events.hold_request_invalid(bad.what, bad.why)
        self._invalid = frozenset(invalid)

    # Shutdown -----------------------------------------------------------------------------

    async def release_on_exit(self) -> None:
        """Release this node's hold with outcome ``uninstall`` (CAS, re-read on conflict)."""
        for _ in range(CAS_ATTEMPTS):
            node = await self.kube.get_node(self.settings.node_name)
            if node is None:
                return
            try:
                decision = force_release(
                    node.annotations, node.resource_version, protocol.Outcome.UNINSTALL
                )
            except NothingHeldError as exc:
                log.info("nothing to release on exit: %s", exc)
                return
            except protocol.ProtocolError as exc:
                log.warning("not releasing on exit: %s", exc)
                return
            result = await self.kube.patch_node_json(node.name, decision.patch)
            if isinstance(result, Applied):
                self._applied(decision, node, result.node)
                log.info(
                    "decision",
                    extra={"fields": decision_fields(result.node.name, decision)},
                )
                return
        log.warning("could not release on exit: the node kept changing")


def _older(node: NodeObj, than: NodeObj) -> bool:
    """Whether ``node`` is an older version than ``than`` (resourceVersions as integers when
    they are; Kubernetes calls them opaque, so otherwise assume the watch is newer)."""
    try:
        return int(node.resource_version) < int(than.resource_version)
    except ValueError:
        return False
