"""--observe-only: what the agent would have held, and what it saw since it started.

Nothing is written, so the Node keeps the request and every pass decides the same hold again:
a request is counted once under each of its reasons, the first time it would have been held
for it. What it saw (requests, holds it would have made, build pods a drain evicted) is in
``/status`` (``ObservedStatus``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from drain_guard import guards, protocol
from drain_guard.core.pods import Pod
from drain_guard.decision import decisions, holds
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.status.parts import ObservedStatus


class ObserveOnly:
    """What an agent that writes nothing counts and shows, kept between passes."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        #: What it saw since it started (/status).
        self.observed = ObservedStatus()
        # The last request that would have been held, and the reasons it was counted under
        # (each once, one it gained later too).
        self._would_hold: str | None = None
        self._would_counted: frozenset[str] = frozenset()
        # The build pods that ran on the node at the last pass (one gone from the cordoned
        # node was evicted).
        self._running_builds: frozenset[str] = frozenset()

    def seen(self, transitions: Iterable[holds.Transition]) -> None:
        """Count the drain requests among a pass's transitions."""
        for t in transitions:
            if isinstance(t, holds.Requested) and t.verb is protocol.Verb.DRAIN:
                self.observed = self.observed.requested()

    def would_hold(self, decision: decisions.Decision) -> decisions.HoldWritten | None:
        """The hold ``decision`` would begin, if any, counted under the reasons it gained."""
        written = decision.hold_written
        hold = written if written is not None and written.starts else None
        if hold is not None:
            reasons = tuple(b.reason.value for b in hold.blocks)
            if hold.request != self._would_hold:
                self._would_hold, self._would_counted = hold.request, frozenset()
            gained = [r for r in reasons if r not in self._would_counted]
            self._would_counted |= set(gained)
            self.metrics.count_would_hold(gained)
            self.observed = self.observed.would_hold(gained)
        return hold

    def watch_evictions(self, running: Sequence[Pod], view: guards.NodeView) -> None:
        """A build pod that ran at the last pass and is going (being deleted) or gone from the
        node, now cordoned, was evicted by a drain; one that ended is still there, Succeeded
        or Failed, and is not counted."""
        if view.pods is None:
            return
        if view.unschedulable:
            staying = {p.key for p in view.pods if not p.deleting}
            for gone in sorted(self._running_builds - staying):
                self.observed = self.observed.evicted(gone)
        self._running_builds = frozenset(p.key for p in running)
