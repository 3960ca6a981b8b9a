"""The agent's log: JSON or text lines, and the structured fields of its decision lines.

One decision line per change of decision (``decision``), and one line when a hold ends
(``hold ended``) or is resumed; the demo, the chaos harness and the tests read these fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from drain_guard import protocol
from drain_guard.config.values import LogFormat
from drain_guard.decision import decisions


class _JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            doc.update(fields)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class _TextFormatter(logging.Formatter):
    """``TIME LEVEL logger: message key=value ...``; values with spaces are quoted, a group
    of values (the start-up line's ``hold``) is JSON, as the JSON log and the docs show it."""

    default_time_format = "%Y-%m-%dT%H:%M:%S"

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """UTC with its zone, as every time in the messages and the JSON logs is (it was local
        time without a zone)."""
        stamp = time.strftime(datefmt or self.default_time_format, time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            parts = []
            for key, value in fields.items():
                if isinstance(value, Mapping):
                    text = json.dumps(value, separators=(",", ":"), default=str)
                elif isinstance(value, list | tuple):
                    text = ",".join(map(str, value))
                else:
                    text = str(value)
                parts.append(f"{key}={json.dumps(text) if ' ' in text or not text else text}")
            line += " " + " ".join(parts)
        return line


def configure_logging(fmt: LogFormat, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt is LogFormat.JSON else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kubernetes_asyncio logs request bodies at DEBUG; keep them out of the agent's log.
    logging.getLogger("kubernetes_asyncio").setLevel(max(logging.INFO, root.level))


def log_key(decision: decisions.Decision) -> tuple[str, ...]:
    """Decisions with the same key are logged once: a hold is not re-logged on every pod event."""
    if decision.blocks:
        return ("held", decision.request or "", decisions.hold_detail(decision.blocks))
    return (decision.name, decision.request or "", decision.explain())


def decision_fields(node: str, decision: decisions.Decision) -> dict[str, Any]:
    """The one structured line per decision: node, request, reasons, outcome."""
    return {
        "node": node,
        "request": decision.request or "",
        "reasons": [r.value for r in decision.reasons],
        "outcome": decision.log_outcome,
        "why": decision.explain(),
    }


def hold_fields(node: str, record: protocol.HoldRecord, max_hold: timedelta) -> dict[str, Any]:
    return {
        "node": node,
        "request": record.held_drain,
        "reasons": list(record.reason_names),
        "heldSince": protocol.format_rfc3339(record.since),
        "expiresAt": protocol.format_rfc3339(protocol.later(record.since, max_hold)),
    }
