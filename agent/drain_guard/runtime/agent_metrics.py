"""The agent's Prometheus metrics (``drain-guard run``): :class:`Metrics`, the holds, the
decisions and the agent's parts on top of :class:`~drain_guard.runtime.metrics.BaseMetrics`
(their conventions are there).

The controller records through the methods (one way to do each thing); the metric objects are
attributes so tests and the docs check can read them. ``docs/metrics.md`` is the reference.

API (used by ``controller``, ``events`` and ``server``)::

    m = Metrics()                                   # own registry; Metrics(registry) to share
    m.registry                                      # CollectorRegistry served at /metrics
    m.count_drain_request(verb)                     # VERBS
    m.hold_committed(reasons, since, reaction_seconds)  # a new hold written; None if unknown
    m.count_hold_reasons(reasons)                   # reasons a hold gained (each once)
    m.race_lost()                                   # the node was cordoned before the hold
    m.set_hold(reasons, since)                      # gauges: resumed hold or changed reasons
    m.hold_released(outcome, held_for_seconds)      # OUTCOMES; also clears the hold gauges
    m.clear_hold()                                  # gauges only: no hold (e.g. start-up)
    m.set_build_pods(n); m.set_image_match(True | False | None)
    m.set_alerts(up: True | False | None, firing)   # --alert-url
    m.set_synced(resource, bool); m.count_watch_restart(resource, reason)
    m.count_api_error(operation); m.api_contact(when); m.count_retry(part)
    m.count_credentials_read(identity); m.set_credentials_refused(identity, bool)
    m.count_invalid_input(kind); m.count_event(reason)
    m.set_shield_budgets(n); m.set_shield_conflicts(n); m.count_shield_blocked_drain()
    m.set_observe_only(bool); m.count_would_hold(reasons)   # --observe-only
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

from drain_guard.core.replacement import Foresight
from drain_guard.protocol import NODE_EVENT_REASONS, POOL_EVENT_REASONS, Outcome, Reason, Verb
from drain_guard.runtime.metrics import (
    API_OPERATIONS,
    IDENTITIES,
    PREFIX,
    RETRY_PARTS,
    WATCH_RESOURCES,
    BaseMetrics,
    check_label,
)

#: Hold reasons, outcomes and request verbs: the protocol's enums, so they cannot drift.
REASONS: tuple[str, ...] = tuple(Reason)
OUTCOMES: tuple[str, ...] = tuple(Outcome)
VERBS: tuple[str, ...] = tuple(Verb)
#: Input the agent rejected: drain-guard/MCO annotations on the Node, an operator's
#: hold request, an image reference, a host file (kernel cmdline, ostree origin, rpm-ostree).
INVALID_INPUT_KINDS: tuple[str, ...] = ("annotation", "hold_request", "image_ref", "host_file")
#: Event reasons written on the Node, then on its MachineConfigPool (``drain_guard.node.events``).
EVENT_REASONS: tuple[str, ...] = NODE_EVENT_REASONS + POOL_EVENT_REASONS

#: Hold durations: seconds to beyond the MCD's 1 h drain timeout (max-hold defaults to 45 min).
HOLD_DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200)
#: Request seen → hold committed: the MCC may cordon ~2 s after the request, so milliseconds.
REACTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


def _known_reasons(reasons: Iterable[str]) -> frozenset[str]:
    return frozenset(check_label(reason, REASONS, "reason") for reason in reasons)


def _reasons(reasons: Iterable[str]) -> frozenset[str]:
    checked = _known_reasons(reasons)
    if not checked:
        raise ValueError("a hold needs at least one reason")
    return checked


class Metrics(BaseMetrics):
    """The metric objects of one agent, on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(
            registry,
            api_operations=API_OPERATIONS,
            watch_resources=WATCH_RESOURCES,
            retry_parts=RETRY_PARTS,
            identities=IDENTITIES,
        )
        r = self.registry

        self.hold_active = Gauge(
            PREFIX + "hold_active",
            "1 while a drain is held for this reason, else 0.",
            ["reason"],
            registry=r,
        )
        self.hold_started_timestamp_seconds = Gauge(
            PREFIX + "hold_started_timestamp_seconds",
            "Unix time the current hold began (held-since on the Node); 0 when no hold.",
            registry=r,
        )
        self.release_failing_since_timestamp_seconds = Gauge(
            PREFIX + "release_failing_since_timestamp_seconds",
            "Unix time the agent's first failed attempt to release the current hold was made"
            " (the release is retried until it lands); 0 while no release is failing.",
            registry=r,
        )
        self.pool_rollout_held = Gauge(
            PREFIX + "pool_rollout_held",
            "1 while this node holds a drain of its MachineConfigPool's rollout (the pool waits"
            " on it), else 0; sum by pool: the held nodes a pool waits on.",
            ["pool"],
            registry=r,
        )
        self._pool: str | None = None
        self.holds_total = Counter(
            PREFIX + "holds",
            "Holds committed by this agent, per reason (a hold with two reasons counts in both).",
            ["reason"],
            registry=r,
        )
        self.releases_total = Counter(
            PREFIX + "releases",
            "Holds ended, per outcome.",
            ["outcome"],
            registry=r,
        )
        self.hold_duration_seconds = Histogram(
            PREFIX + "hold_duration_seconds",
            "How long ended holds lasted, from held-since.",
            buckets=HOLD_DURATION_BUCKETS,
            registry=r,
        )
        self.drain_requests_total = Counter(
            PREFIX + "drain_requests",
            "New desiredDrain values seen on the Node, per verb.",
            ["verb"],
            registry=r,
        )
        self.reaction_seconds = Histogram(
            PREFIX + "reaction_seconds",
            "Time from seeing a drain request to committing its hold.",
            buckets=REACTION_BUCKETS,
            registry=r,
        )
        self.race_lost_total = Counter(
            PREFIX + "race_lost",
            "Drain requests that should have been held but the node was already cordoned.",
            registry=r,
        )
        self.build_pods = Gauge(
            PREFIX + "build_pods",
            "Non-terminal build pods (and pods builds depend on) seen on this node.",
            registry=r,
        )
        self.image_match = Gauge(
            PREFIX + "image_match",
            "Desired image digest vs booted digest: 1 equal, 0 differ, -1 unknown.",
            registry=r,
        )
        self.image_replacement = Gauge(
            PREFIX + "image_replacement",
            "For a desired image that is the booted one, what MCO's objects say will replace"
            " the target: 1 for the answer (coming, expected, none, unknown), 0 for the others;"
            " all 0 when the images differ.",
            ["replacement"],
            registry=r,
        )
        for answer in Foresight:
            self.image_replacement.labels(answer.value).set(0)
        self.invalid_input_total = Counter(
            PREFIX + "invalid_input",
            "Input rejected as malformed, per kind.",
            ["kind"],
            registry=r,
        )
        self.events_emitted_total = Counter(
            PREFIX + "events_emitted",
            "Kubernetes Events written or bumped on the Node, per reason.",
            ["reason"],
            registry=r,
        )
        self.shield_blocked_drains_total = Counter(
            PREFIX + "shield_blocked_drains",
            "Cordons of the node while shield budgets held: drains the budgets refuse.",
            registry=r,
        )
        self.confined = Gauge(
            PREFIX + "confined",
            "1 if a dry-run write to another Node was denied at start (Node writes confined to"
            " this Node), 0 if it was allowed, -1 until checked or if it could not be.",
            registry=r,
        )
        self.observe_only = Gauge(
            PREFIX + "observe_only",
            "1 when the agent runs with --observe-only (decides, writes nothing), else 0.",
            registry=r,
        )
        self.would_holds_total = Counter(
            PREFIX + "would_holds",
            "Drain requests an --observe-only agent would have held, per reason (a request"
            " with two reasons counts in both); 0 when enforcing.",
            ["reason"],
            registry=r,
        )
        self.alert_query_up = Gauge(
            PREFIX + "alert_query_up",
            "Alert gating (--alert-url): 1 when the latest alert query was answered, 0 when it"
            " failed (--alert-unreachable says whether drains wait), -1 before the first query"
            " or with alert gating off.",
            registry=r,
        )
        self.alerts_firing = Gauge(
            PREFIX + "alerts_firing",
            "Alerts matching --alert-filter that fired at the latest answered query.",
            registry=r,
        )

        for reason in REASONS:
            self.hold_active.labels(reason=reason).set(0)
            self.holds_total.labels(reason=reason)
            self.would_holds_total.labels(reason=reason)
        for outcome in OUTCOMES:
            self.releases_total.labels(outcome=outcome)
        for verb in VERBS:
            self.drain_requests_total.labels(verb=verb)
        for kind in INVALID_INPUT_KINDS:
            self.invalid_input_total.labels(kind=kind)
        for event_reason in EVENT_REASONS:
            self.events_emitted_total.labels(reason=event_reason)
        self.image_match.set(-1)
        self.confined.set(-1)
        self.alert_query_up.set(-1)

    def count_drain_request(self, verb: str) -> None:
        """A new ``desiredDrain`` value was seen."""
        self.drain_requests_total.labels(verb=check_label(verb, VERBS, "verb")).inc()

    def hold_committed(
        self, reasons: Iterable[str], since: datetime, reaction_seconds: float | None
    ) -> None:
        """A new hold was written: count it, observe the reaction time, set the gauges.

        ``reaction_seconds`` is None when the request was not seen live (e.g. found at start-up),
        so that start-up does not pollute the reaction histogram.
        """
        checked = _reasons(reasons)  # validate all before changing anything
        self.count_hold_reasons(checked)
        if reaction_seconds is not None:
            self.reaction_seconds.observe(reaction_seconds)
        self.set_hold(checked, since)

    def count_hold_reasons(self, reasons: Iterable[str]) -> None:
        """The hold is now held for these reasons too: once in each (a hold gains a reason
        when, say, a build pod starts on a node held for its image); none is no change."""
        for reason in _known_reasons(reasons):
            self.holds_total.labels(reason=reason).inc()

    def set_observe_only(self, on: bool) -> None:
        """Whether the agent reports instead of writing."""
        self.observe_only.set(int(on))

    def count_would_hold(self, reasons: Iterable[str]) -> None:
        """An --observe-only agent would have held a request for these reasons (each reason
        of a request once, a reason it gained later too); none is no change."""
        for reason in _known_reasons(reasons):
            self.would_holds_total.labels(reason=reason).inc()

    def race_lost(self) -> None:
        """The MCC cordoned the node before the hold could be written."""
        self.race_lost_total.inc()

    def set_hold(self, reasons: Iterable[str], since: datetime) -> None:
        """Make the hold gauges show a hold with these reasons since ``since``.

        Used for a hold found at start-up (its age counts from ``held-since``) and when the
        reasons of a hold change; counters are not touched.
        """
        active = _reasons(reasons)
        for reason in REASONS:
            self.hold_active.labels(reason=reason).set(1 if reason in active else 0)
        self.hold_started_timestamp_seconds.set(since.timestamp())

    def hold_released(self, outcome: str, held_for_seconds: float) -> None:
        """A hold ended (released, expired, or superseded by the MCD): count it, clear gauges."""
        self.releases_total.labels(outcome=check_label(outcome, OUTCOMES, "outcome")).inc()
        self.hold_duration_seconds.observe(max(0.0, held_for_seconds))
        self.clear_hold()

    def clear_hold(self) -> None:
        """Make the hold gauges show no hold."""
        for reason in REASONS:
            self.hold_active.labels(reason=reason).set(0)
        self.hold_started_timestamp_seconds.set(0)

    def set_release_failing(self, since: datetime | None) -> None:
        """A release the agent decided has failed since ``since`` (None: none is failing)."""
        self.release_failing_since_timestamp_seconds.set(0 if since is None else since.timestamp())

    def set_pool_held(self, pool: str | None, held: bool) -> None:
        """Whether this node's hold stalls ``pool``'s rollout; the node's series moves with its
        pool (None: the pool cannot be told, no series)."""
        if pool != self._pool and self._pool is not None:
            self.pool_rollout_held.remove(self._pool)
        self._pool = pool
        if pool is not None:
            self.pool_rollout_held.labels(pool=pool).set(int(held))

    def set_build_pods(self, count: int) -> None:
        """Build pods currently seen on the node."""
        self.build_pods.set(count)

    def set_alerts(self, up: bool | None, firing: int) -> None:
        """The alert query's latest answer: answered or not (None: not yet), and how many
        matching alerts fired."""
        self.alert_query_up.set(-1 if up is None else int(up))
        self.alerts_firing.set(firing)

    def set_image_match(self, match: bool | None) -> None:
        """Desired vs booted digest: True equal, False differ, None unknown."""
        self.image_match.set(-1 if match is None else int(match))

    def set_image_replacement(self, answer: Foresight | None) -> None:
        """What will replace a same-image target (None: not asked)."""
        for each in Foresight:
            self.image_replacement.labels(each.value).set(int(each is answer))

    def count_invalid_input(self, kind: str) -> None:
        """Some input was rejected as malformed."""
        self.invalid_input_total.labels(
            kind=check_label(kind, INVALID_INPUT_KINDS, "input kind")
        ).inc()

    def count_shield_blocked_drain(self) -> None:
        """The node was cordoned while shield budgets held."""
        self.shield_blocked_drains_total.inc()

    def set_confined(self, confined: bool | None) -> None:
        """The confinement self-check's result (None: not known)."""
        self.confined.set(-1 if confined is None else int(confined))

    def count_event(self, reason: str) -> None:
        """An Event was written (or its count bumped) on the Node or its pool."""
        self.events_emitted_total.labels(
            reason=check_label(reason, EVENT_REASONS, "event reason")
        ).inc()
