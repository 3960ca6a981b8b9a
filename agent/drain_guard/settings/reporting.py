"""``drain-guard run``'s status and logs group: where ``/status`` and the metrics are served,
how often the confinement self-check runs again, and the log's format and level."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from drain_guard.config.options import Option, SettingsGroup, env_name
from drain_guard.config.values import (
    LOG_LEVELS,
    Listen,
    LogFormat,
    SettingsError,
    named,
    parse_duration,
    parse_listen,
)

DEFAULT_LISTEN = "127.0.0.1:9797"

REPORTING_OPTIONS: tuple[Option, ...] = (
    Option(
        "--listen",
        env_name("--listen"),
        DEFAULT_LISTEN,
        "HOST:PORT of the status/metrics endpoint (port 0: any free port)",
    ),
    Option(
        "--confinement-check-interval",
        env_name("--confinement-check-interval"),
        "1h",
        "how often the confinement self-check runs again after the start (a dry-run write to"
        " another Node and a dry-run TokenRequest for another account must be denied)",
    ),
    Option(
        "--log-format",
        env_name("--log-format"),
        LogFormat.TEXT.value,
        "log line format",
        choices=tuple(f.value for f in LogFormat),
    ),
    Option(
        "--log-level",
        env_name("--log-level"),
        "INFO",
        "log level",
        choices=LOG_LEVELS,
    ),
)


@dataclass(frozen=True)
class ReportingSettings:
    """Where ``/status`` and the metrics are served, how often the confinement self-check runs
    again after the start, and the log's format and level."""

    listen: Listen
    confinement_check_interval: timedelta
    log_format: LogFormat
    log_level: str


def reporting_settings(raw: Mapping[str, object]) -> ReportingSettings:
    interval = named(
        "--confinement-check-interval", parse_duration, str(raw["confinement_check_interval"])
    )
    if interval <= timedelta(0):
        raise SettingsError("--confinement-check-interval must be greater than 0")
    return ReportingSettings(
        listen=named("--listen", parse_listen, str(raw["listen"])),
        confinement_check_interval=interval,
        log_format=LogFormat(str(raw["log_format"])),
        log_level=str(raw["log_level"]),
    )


REPORTING = SettingsGroup("status and logs", REPORTING_OPTIONS, reporting_settings)
