"""Alert gating, the pure half: which firing alerts an answer of Prometheus (or Thanos
querier) or Alertmanager names, and what the agent last knew of them (no I/O).

The alert guard reads an :class:`AlertsSeen`; ``drain_guard.node.alertsource`` fills it by querying
the API once per ``--alert-interval``. Only firing alerts count: a Prometheus alert that is
``pending`` has not fired yet, and an Alertmanager alert that is silenced or inhibited
(``suppressed``) is one an operator chose to ignore, which is also how they let drains go on
while it fires.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

__all__ = [
    "MAX_NAMED_ALERTS",
    "PLATFORM_NAMESPACES",
    "AlertApi",
    "AlertFilter",
    "AlertsSeen",
    "MalformedAlertsError",
    "OnUnreachable",
    "firing_alerts",
]

#: How many matching alerts ``/status`` and the hold detail name (the count is always exact).
MAX_NAMED_ALERTS = 10


class AlertApi(enum.StrEnum):
    """Which API ``--alert-url`` serves: Prometheus' (Thanos querier's too) or Alertmanager's."""

    PROMETHEUS = "prometheus"
    ALERTMANAGER = "alertmanager"

    @property
    def path(self) -> str:
        """The request, relative to ``--alert-url``: every active alert, in one answer."""
        if self is AlertApi.PROMETHEUS:
            return "api/v1/alerts"
        return "api/v2/alerts?active=true&silenced=false&inhibited=false&unprocessed=false"


class OnUnreachable(enum.StrEnum):
    """What an unanswered query means (``--alert-unreachable``): hold while it lasts, or let
    drains go on; either way it is reported (``/status``, ``drain_guard_alert_query_up``)."""

    HOLD = "hold"
    PASS = "pass"


class MalformedAlertsError(ValueError):
    """The answer is not what the API documents: treated as an unanswered query."""


#: The namespaces whose alerts may hold a drain by default (``--alert-namespaces``): the
#: platform's. OpenShift's user-workload monitoring sets every tenant alert's ``namespace``
#: label to its PrometheusRule's namespace, which no tenant can make one of these (projects
#: named ``openshift-*``, ``kube-*`` and ``default`` are refused to them): a tenant's rule named
#: like a platform alert cannot hold every drain. An alert without the label (none of a
#: tenant's) counts.
PLATFORM_NAMESPACES = "openshift|openshift-.*|kube-.*|default"


def _compile(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as err:
        raise ValueError(f"invalid regular expression {text!r}: {err}") from None


@dataclass(frozen=True)
class AlertFilter:
    """Which alerts hold a drain: those whose ``alertname`` the regular expression matches
    (``re.search``; anchor it with ``^…$`` for whole names) and whose ``namespace`` label, if
    they have one, ``namespaces`` matches whole (the platform's by default)."""

    pattern: re.Pattern[str]
    namespaces: re.Pattern[str] = re.compile(PLATFORM_NAMESPACES)

    @classmethod
    def parse(cls, text: str) -> AlertFilter:
        """ValueError (one line) for an empty or invalid expression."""
        if not text.strip():
            raise ValueError("the alert filter is empty: name the alerts that hold drains")
        return cls(_compile(text))

    def within(self, namespaces: str) -> AlertFilter:
        """This filter for alerts of the ``namespaces`` (matched whole) or of none; ValueError
        (one line) for an empty or invalid expression."""
        if not namespaces.strip():
            raise ValueError("empty: name the namespaces whose alerts hold drains")
        return replace(self, namespaces=_compile(namespaces))

    def matches(self, labels: Mapping[str, object]) -> bool:
        """Whether an alert of these labels (its ``alertname`` a string) holds a drain."""
        namespace = labels.get("namespace")
        return self.pattern.search(str(labels["alertname"])) is not None and (
            namespace is None or self.namespaces.fullmatch(str(namespace)) is not None
        )

    def __str__(self) -> str:
        return self.pattern.pattern


def firing_alerts(api: AlertApi, body: Any, alert_filter: AlertFilter) -> tuple[str, ...]:
    """The sorted, distinct names of the firing alerts in ``body`` (the decoded JSON answer)
    that the filter matches; :class:`MalformedAlertsError` when it is not such an answer."""
    if api is AlertApi.PROMETHEUS:
        if not isinstance(body, Mapping) or body.get("status") != "success":
            raise MalformedAlertsError("not a successful Prometheus API answer")
        data = body.get("data")
        alerts = data.get("alerts") if isinstance(data, Mapping) else None
        wanted = "firing"
    else:
        alerts = body
        wanted = "active"
    if not isinstance(alerts, list):
        raise MalformedAlertsError("the answer holds no list of alerts")
    names: set[str] = set()
    for alert in alerts:
        if not isinstance(alert, Mapping):
            raise MalformedAlertsError("an alert is not an object")
        labels = alert.get("labels")
        state = alert.get("state") if api is AlertApi.PROMETHEUS else _am_state(alert)
        if not isinstance(labels, Mapping) or not isinstance(labels.get("alertname"), str):
            raise MalformedAlertsError("an alert has no alertname label")
        name = labels["alertname"]
        if state == wanted and alert_filter.matches(labels):
            names.add(name)
    return tuple(sorted(names))


def _am_state(alert: Mapping[str, Any]) -> object:
    status = alert.get("status")
    return status.get("state") if isinstance(status, Mapping) else None


@dataclass(frozen=True)
class AlertsSeen:
    """The last query's answer: the matching firing alerts, or why there was none.

    ``checked_at`` None: no query has been answered or failed yet (the guard waits).
    ``error`` set: the last query failed (``since``: when the failures began).
    """

    firing: tuple[str, ...] = ()
    checked_at: datetime | None = None
    error: str | None = None
    since: datetime | None = None

    @property
    def state(self) -> str:
        """``unknown``, ``unreachable``, ``firing`` or ``clear``: for ``/status``."""
        if self.checked_at is None:
            return "unknown"
        if self.error is not None:
            return "unreachable"
        return "firing" if self.firing else "clear"

    def named(self) -> str:
        """The firing alerts in one short line (the first ``MAX_NAMED_ALERTS``)."""
        shown = ", ".join(self.firing[:MAX_NAMED_ALERTS])
        more = len(self.firing) - MAX_NAMED_ALERTS
        return f"{shown} and {more} more" if more > 0 else shown
