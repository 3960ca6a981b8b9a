"""Text logs stamp UTC with its zone (issue 25: local time without a zone, beside the UTC
times of the messages)."""

from __future__ import annotations

import logging

from drain_guard.runtime.logs import _TextFormatter


def test_text_log_times_are_utc_with_a_zone() -> None:
    record = logging.LogRecord("drain_guard.x", logging.INFO, __file__, 1, "hello", None, None)
    record.created, record.msecs = 1772366400.25, 250.0  # 2026-03-01T12:00:00.250Z
    assert _TextFormatter().format(record) == ("2026-03-01T12:00:00.250Z INFO drain_guard.x: hello")
