"""Alert gating's settings (``--alert-url`` and its companions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from drain_guard.config.options import Option, SettingsGroup, env_name
from drain_guard.config.values import SettingsError, format_duration, named, parse_duration
from drain_guard.core.alerts import PLATFORM_NAMESPACES, AlertApi, AlertFilter, OnUnreachable


@dataclass(frozen=True)
class AlertSettings:
    """Alert gating (``--alert-url`` and its companions): where to ask, what counts, and what
    an unanswered query means."""

    url: str
    api: AlertApi
    filter: AlertFilter
    interval: timedelta
    on_unreachable: OnUnreachable
    token_file: str | None = None
    ca_file: str | None = None

    @property
    def timeout(self) -> timedelta:
        """How long one query may take: the interval, at most ``MAX_ALERT_TIMEOUT``."""
        return min(self.interval, MAX_ALERT_TIMEOUT)


#: The longest an alert query may take before it counts as unanswered.
MAX_ALERT_TIMEOUT = timedelta(seconds=10)


#: The shortest --alert-interval (docs/benchmarks.md has the load of an interval per node).
MIN_ALERT_INTERVAL = timedelta(seconds=1)

#: ``drain-guard run``'s alert-gating flags.
ALERT_OPTIONS: tuple[Option, ...] = (
    Option(
        "--alert-url",
        env_name("--alert-url"),
        None,
        "hold drains while alerts matching --alert-filter fire: base URL of Prometheus, the"
        " Thanos querier (OpenShift: https://thanos-querier.openshift-monitoring.svc:9091) or"
        " Alertmanager (--alert-api alertmanager); queried once per --alert-interval",
    ),
    Option(
        "--alert-api",
        env_name("--alert-api"),
        AlertApi.PROMETHEUS.value,
        "the API of --alert-url: prometheus (GET api/v1/alerts; Thanos querier too) or"
        " alertmanager (GET api/v2/alerts, silenced and inhibited alerts left out)",
        choices=tuple(a.value for a in AlertApi),
    ),
    Option(
        "--alert-filter",
        env_name("--alert-filter"),
        None,
        "regular expression (Python re, searched) on the alertname of the firing alerts that"
        " hold drains; required with --alert-url (anchor it, ^(A|B)$, for whole names)",
    ),
    Option(
        "--alert-namespaces",
        env_name("--alert-namespaces"),
        PLATFORM_NAMESPACES,
        "regular expression (whole) on the namespace label of the alerts that hold drains;"
        " alerts without one count. The platform's by default: a tenant's alert named like"
        " the filter's (user-workload monitoring sets its namespace) never holds",
    ),
    Option(
        "--alert-token-file",
        env_name("--alert-token-file"),
        None,
        "file holding the bearer token of the alert queries, read before each (a projected"
        " service-account token rotates); https only",
    ),
    Option(
        "--alert-ca-file",
        env_name("--alert-ca-file"),
        None,
        "CA bundle (PEM) that signs --alert-url's certificate, read before each query"
        " (OpenShift: the service CA); without it the system's CAs",
    ),
    Option(
        "--alert-interval",
        env_name("--alert-interval"),
        "30s",
        "how often the alerts are queried (one GET per interval per agent; at least 1s)",
    ),
    Option(
        "--alert-unreachable",
        env_name("--alert-unreachable"),
        OnUnreachable.HOLD.value,
        "what a failed alert query means while it lasts: hold (drains wait, within"
        " --max-hold) or pass (drains go on); either way /status and"
        " drain_guard_alert_query_up report it",
        choices=tuple(o.value for o in OnUnreachable),
    ),
)


_ALERT_COMPANIONS = ("alert_filter", "alert_token_file", "alert_ca_file")


def alert_settings(raw: Mapping[str, object]) -> AlertSettings | None:
    url = str(raw["alert_url"] or "").strip()
    if not url:
        given = [name for name in _ALERT_COMPANIONS if raw[name] is not None]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise SettingsError(f"{flag} needs --alert-url (where to query the alerts)")
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https") or not rest.split("/")[0]:
        raise SettingsError(f"invalid --alert-url {url!r} (expected http(s)://HOST[:PORT][/PATH])")
    token_file = None if raw["alert_token_file"] is None else str(raw["alert_token_file"])
    if token_file is not None and scheme != "https":
        raise SettingsError(
            f"--alert-token-file with --alert-url {url!r}: the token would cross the network in"
            " clear text; use https"
        )
    if raw["alert_filter"] is None:
        raise SettingsError(
            "--alert-url needs --alert-filter: which alerts hold drains (every alert would"
            " include those that always fire, such as Watchdog)"
        )
    try:
        alert_filter = AlertFilter.parse(str(raw["alert_filter"]))
    except ValueError as err:
        raise SettingsError(f"--alert-filter: {err}") from None
    try:
        alert_filter = alert_filter.within(str(raw["alert_namespaces"]))
    except ValueError as err:
        raise SettingsError(f"--alert-namespaces: {err}") from None
    interval = named("--alert-interval", parse_duration, str(raw["alert_interval"]))
    if interval < MIN_ALERT_INTERVAL:
        least = format_duration(MIN_ALERT_INTERVAL)
        raise SettingsError(f"--alert-interval must be at least {least}")
    return AlertSettings(
        url=url,
        api=AlertApi(str(raw["alert_api"])),
        filter=alert_filter,
        interval=interval,
        on_unreachable=OnUnreachable(str(raw["alert_unreachable"])),
        token_file=token_file,
        ca_file=None if raw["alert_ca_file"] is None else str(raw["alert_ca_file"]),
    )


ALERTS = SettingsGroup("alerts", ALERT_OPTIONS, alert_settings)
