"""Prometheus metrics: what every drain-guard process serves (:class:`BaseMetrics`), and the
conventions of them all.

Each ``Metrics`` owns its own ``CollectorRegistry`` (tests and the simulator run several agents
in one process, and the global registry would mix them). Names follow Prometheus conventions:
prefix ``drain_guard_``, base units, ``_total`` counters, ``_timestamp_seconds``, ``_info``.
There is no ``node`` label: the scrape adds target labels. Label values come from the bounded
tuples and enums below only (no pod names, no digests), and every series of a bounded label
exists from the start at 0, so alerts such as ``increase(...{outcome="expired"}[15m])`` have data.

The agent serves :class:`~drain_guard.runtime.agent_metrics.Metrics`: these, and the holds,
the decisions and its parts. The central shield (``drain-guard shield``) serves
:class:`BaseMetrics`: the part that means the same for it (API errors, watches, the shield's
budgets and conflicts, build info), with the label values of the calls and watches it makes
only. ``docs/metrics.md`` is the reference.

An unknown label value raises ``ValueError``: it is a programming error, and an unbounded
label would be worse than a crash in a test.
"""

from __future__ import annotations

import platform
from datetime import datetime

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from drain_guard import __version__
from drain_guard.confine import permissions
from drain_guard.core.operations import Operation, Watched

PREFIX = "drain_guard_"

# No `<name>_created` series: a third of /metrics (84 of 260 lines) that nothing here reads.
disable_created_metrics()  # type: ignore[no-untyped-call]
#: The agent's Kubernetes API calls (its rights, and the probe it expects refused), whose
#: error series exist from the start; a call of another operation is counted all the same.
API_OPERATIONS: tuple[Operation, ...] = permissions.operations(
    permissions.PERMISSIONS + permissions.REFUSED_PROBES
)
#: The loops that retry a failed pass after a backoff (the watches count theirs as restarts).
RETRY_PARTS: tuple[str, ...] = ("controller", "shield")
#: Resources the agent watches.
WATCH_RESOURCES: tuple[Watched, ...] = tuple(Watched)
#: The watches whose state ``drain_guard_synced`` shows: the programs' own (``/status``'s
#: watches). MCO's objects, read by the noop-image guard alone, show theirs in its replacement
#: (``unknown`` while unread), not here: a series made for them would stay 0 where the agent
#: does not watch them (4.15, plain Kubernetes, no noop-image guard) and alert for nothing.
SYNCED_RESOURCES: tuple[Watched, ...] = (Watched.NODE, Watched.POD, Watched.PODDISRUPTIONBUDGET)
#: What the central shield calls and watches: the pods and budgets of MCO's namespace.
SHIELD_API_OPERATIONS: tuple[Operation, ...] = permissions.operations(
    permissions.SHIELD_PERMISSIONS
)
SHIELD_WATCH_RESOURCES: tuple[Watched, ...] = (Watched.POD, Watched.PODDISRUPTIONBUDGET)
#: Whose credentials a client sends: the agent's own, or the node's (the systemd install's
#: node proxy).
IDENTITIES: tuple[str, ...] = ("agent", "node")
#: Why a watch was restarted: 410 Gone (re-list), the server closed it, or an error.
WATCH_RESTART_REASONS: tuple[str, ...] = ("expired", "closed", "error", "frozen")


def check_label(value: str, allowed: tuple[str, ...], what: str) -> str:
    value = str(value)
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")
    return value


class BaseMetrics:
    """What every drain-guard process serves (the agent, the central shield), on one registry:
    its API calls and watches (label values from ``api_operations`` and ``watch_resources``,
    every series there from the start) and the shield's budgets."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        api_operations: tuple[Operation, ...] = SHIELD_API_OPERATIONS,
        watch_resources: tuple[Watched, ...] = SHIELD_WATCH_RESOURCES,
        retry_parts: tuple[str, ...] = ("shield",),
        identities: tuple[str, ...] = ("agent",),
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.api_operations = api_operations
        self.identities = identities
        self.watch_resources = watch_resources
        self.retry_parts = retry_parts
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)

        self.api_errors_total = Counter(
            PREFIX + "api_errors",
            "Failed Kubernetes API calls, per operation.",
            ["operation"],
            registry=r,
        )
        self.watch_restarts_total = Counter(
            PREFIX + "watch_restarts",
            "Watches restarted, per resource and reason.",
            ["resource", "reason"],
            registry=r,
        )
        self.retries_total = Counter(
            PREFIX + "retries",
            "Passes of the controller or the shield that failed (an API error, writes refused,"
            " or an error of the agent's own) and were retried after a backoff, per part.",
            ["part"],
            registry=r,
        )
        self.synced = Gauge(
            PREFIX + "synced",
            "1 while the watch of this resource has listed and is watching (its last request"
            " was answered), else 0: 0 before its first list and while it fails and retries.",
            ["resource"],
            registry=r,
        )
        self.credential_reads_total = Counter(
            PREFIX + "credential_reads",
            "Times a 401 made the process read its credentials again, per identity.",
            ["identity"],
            registry=r,
        )
        self.credentials_refused = Gauge(
            PREFIX + "credentials_refused",
            "1 while the API server refuses the credentials of this identity even as read"
            " again after the refusal, else 0.",
            ["identity"],
            registry=r,
        )
        self.last_api_contact_timestamp_seconds = Gauge(
            PREFIX + "last_api_contact_timestamp_seconds",
            "Unix time of the last successful Kubernetes API response; 0 before the first.",
            registry=r,
        )
        self.shield_budgets = Gauge(
            PREFIX + "shield_budgets",
            "PodDisruptionBudgets kept on build pods (and dependencies): an agent's, of its node;"
            " the central shield's, of every node.",
            registry=r,
        )
        self.shield_conflicts = Gauge(
            PREFIX + "shield_conflicts",
            "Pods to shield that another PodDisruptionBudget already selects (left alone).",
            registry=r,
        )
        self.build_info = Info(
            PREFIX + "build",
            "Agent version and Python version; the value is always 1.",
            registry=r,
        )

        self.build_info.info({"version": __version__, "python_version": platform.python_version()})
        for operation in api_operations:
            self.api_errors_total.labels(operation=operation)
        for resource in watch_resources:
            if resource in SYNCED_RESOURCES:
                self.synced.labels(resource=resource).set(0)
            for why in WATCH_RESTART_REASONS:
                self.watch_restarts_total.labels(resource=resource, reason=why)
        for part in retry_parts:
            self.retries_total.labels(part=part)
        for identity in identities:
            self.credential_reads_total.labels(identity=identity)
            self.credentials_refused.labels(identity=identity).set(0)

    def set_synced(self, resource: Watched, synced: bool) -> None:
        """Whether the watch of ``resource`` has listed and is watching now."""
        self.synced.labels(resource=resource).set(int(synced))

    def count_watch_restart(self, resource: Watched, reason: str) -> None:
        """A watch was restarted (and ``reason`` says why)."""
        self.watch_restarts_total.labels(
            resource=resource,
            reason=check_label(reason, WATCH_RESTART_REASONS, "watch restart reason"),
        ).inc()

    def count_retry(self, part: str) -> None:
        """A pass of ``part`` failed on an API error and will be retried."""
        self.retries_total.labels(part=check_label(part, self.retry_parts, "retrying part")).inc()

    def count_api_error(self, operation: Operation) -> None:
        """A Kubernetes API call failed (its series is made if it is not one of this
        program's: the enum bounds the label)."""
        self.api_errors_total.labels(operation=operation).inc()

    def api_contact(self, when: datetime) -> None:
        """The Kubernetes API answered successfully at ``when``."""
        self.last_api_contact_timestamp_seconds.set(when.timestamp())

    def count_credentials_read(self, identity: str) -> None:
        """A 401 made the process read the credentials of ``identity`` again."""
        self.credential_reads_total.labels(
            identity=check_label(identity, self.identities, "identity")
        ).inc()

    def set_credentials_refused(self, identity: str, refused: bool) -> None:
        """Whether the API server refuses the credentials of ``identity``, read again."""
        checked = check_label(identity, self.identities, "identity")
        self.credentials_refused.labels(identity=checked).set(int(refused))

    def set_shield_budgets(self, count: int) -> None:
        """Budgets the shield holds now."""
        self.shield_budgets.set(count)

    def set_shield_conflicts(self, count: int) -> None:
        """Pods the shield leaves alone because another budget selects them."""
        self.shield_conflicts.set(count)
