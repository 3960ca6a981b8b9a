"""``drain-guard run``'s status and logs group: where ``/status`` and the metrics are served,
how often the confinement self-check runs again, and the log's format and level."""

from __future__ import annotations

from drain_guard.config.options import Option, env_name
from drain_guard.config.values import LOG_LEVELS, LogFormat

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
