"""What the controller does with a hold's transitions (``holds.py``): metrics, Events, log lines.

``holds.observe()`` and ``holds.applied()`` derive what happened to a hold; this tells it,
and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from drain_guard.decision import holds
from drain_guard.protocol import HoldRecord
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.logs import hold_fields

#: The controller's logger: these lines are the loop's, as they were before this module.
log = logging.getLogger("drain_guard.node.controller")


class EventSink(Protocol):
    """Where the loop posts the Node's Events (``events.EventQueue``)."""

    node_uid: str | None

    def drain_held(self, held_drain: str, reasons: Sequence[str], detail: str) -> None: ...

    def drain_released(
        self,
        record: HoldRecord,
        outcome: str,
        held_for: timedelta,
        released_by: str | None = None,
        why: str = "",
    ) -> None: ...

    def pool_held(
        self,
        pool: str,
        held_drain: str,
        reasons: Sequence[str],
        detail: str,
        since: datetime,
        expires: datetime,
    ) -> None: ...

    def pool_released(
        self, pool: str, held_drain: str, outcome: str, held_for: timedelta
    ) -> None: ...

    def hold_request_invalid(self, what: str, why: str) -> None: ...


class HoldReport:
    """Tells a node's hold transitions; an observe-only agent posts no Event (a write too).

    Each Event is an API write, so a hold costs three (docs/protocol.md, Events). Its start is
    told where nothing else says it: a hold stalls the rollout of the node's MachineConfigPool,
    so a ``PoolRolloutHeld`` on the pool (the Node's own annotations say the hold on the Node
    while it lasts; a ``DrainHeld`` on the Node stands in only when the pool cannot be told). A
    change of the hold refreshes that Event. Its end: ``DrainReleased`` (or ``DrainHoldExpired``)
    on the Node, with what the hold was for, and ``PoolRolloutReleased`` on the pool (its
    Events would otherwise say "waiting" for the Event TTL after the rollout went on). Found
    (a restart) posts nothing. The release goes to the pool the hold was posted on, should the
    node have moved to another pool meanwhile (its new pool's request supersedes the hold).
    """

    def __init__(
        self, metrics: Metrics, events: EventSink, max_hold: timedelta, observe_only: bool
    ) -> None:
        self.metrics = metrics
        self.events = events
        self.max_hold = max_hold
        self.observe_only = observe_only
        #: The pool this agent last posted a PoolRolloutHeld on, until the hold ends.
        self._held_pool: str | None = None

    def tell(
        self, transitions: Iterable[holds.Transition], node: str, pool: str | None = None
    ) -> None:
        """Each transition as its metrics, Events and log line, in order; ``pool``: the node's
        MachineConfigPool (``protocol.pool_of``), None when it cannot be told (no pool Event)."""
        for t in transitions:
            if isinstance(t, holds.Requested):
                self.metrics.count_drain_request(t.verb.value)
            elif isinstance(t, holds.Began | holds.Resumed | holds.Updated):
                if isinstance(t, holds.Began):
                    self.metrics.hold_committed(t.reasons, t.since, t.reaction_seconds)
                else:
                    self.metrics.count_hold_reasons(t.gained)
                    self.metrics.set_hold(t.reasons, t.since)
                if not self.observe_only:  # an Event is a write too
                    self._held(t, pool)
            elif isinstance(t, holds.Found):
                if t.record.reasons:  # else only reasons this agent does not know: no series
                    self.metrics.set_hold([r.value for r in t.record.reasons], t.record.since)
                log.info(
                    "resuming hold found on the node",
                    extra={"fields": hold_fields(node, t.record, self.max_hold)},
                )
            elif isinstance(t, holds.RaceLost):
                # The MCC began the drain before the hold took effect. Held anyway: an eviction
                # already running is not stopped, but a failed or retried drain attempt will
                # see the hold verb and stop, and the MCD cannot proceed
                # (docs/troubleshooting.md).
                self.metrics.race_lost()
                log.warning(
                    "%s (race lost)",
                    t.evidence.value,
                    extra={"fields": {"node": node, "request": t.request}},
                )
            else:
                self._ended(t, node, pool)

    def _held(self, held: holds.Began | holds.Resumed | holds.Updated, pool: str | None) -> None:
        """The hold's start Event, or its refresh: on the pool, on the Node without one."""
        if pool is None:
            self.events.drain_held(held.request, held.reasons, held.detail)
            return
        expires = held.since + self.max_hold
        self.events.pool_held(pool, held.request, held.reasons, held.detail, held.since, expires)
        self._held_pool = pool

    def _ended(self, ended: holds.Ended, node: str, pool: str | None) -> None:
        record = ended.record
        outcome = ended.outcome.value
        self.metrics.hold_released(outcome, ended.held_for.total_seconds())
        if not self.observe_only:  # an Event is a write too
            self.events.drain_released(
                record, outcome, ended.held_for, ended.released_by, ended.why
            )
            held_on = self._held_pool or pool
            if held_on is not None:
                self.events.pool_released(held_on, record.held_drain, outcome, ended.held_for)
        self._held_pool = None
        fields = {
            "node": node,
            "request": record.held_drain,
            "reasons": list(record.reason_names),
            "outcome": ended.outcome.value,
            "desiredDrain": ended.desired or "",
            "heldSeconds": round(ended.held_for.total_seconds(), 3),
        }
        if ended.released_by is not None:
            fields["releasedBy"] = ended.released_by
        log.info("hold ended", extra={"fields": fields})
