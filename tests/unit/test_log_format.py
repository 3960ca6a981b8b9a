"""Text logs stamp UTC with its zone (issue 25: local time without a zone, beside the UTC
times of the messages), and show the start-up line's groups as JSON, not Python's repr."""

from __future__ import annotations

import argparse
import json
import logging

from drain_guard.runtime.logs import _TextFormatter
from drain_guard.settings.agent import add_run_arguments, settings_from


def test_text_log_times_are_utc_with_a_zone() -> None:
    record = logging.LogRecord("drain_guard.x", logging.INFO, __file__, 1, "hello", None, None)
    record.created, record.msecs = 1772366400.25, 250.0  # 2026-03-01T12:00:00.250Z
    assert _TextFormatter().format(record) == ("2026-03-01T12:00:00.250Z INFO drain_guard.x: hello")


def test_the_text_settings_line_shows_each_group_as_json() -> None:
    """Settings typed per group printed ``install="{'kind': <InstallKind.STANDALONE:
    'standalone'>, ...}"``: an enum's repr, Python's ``False``, unreadable to a JSON tool."""
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    fields = settings_from(parser.parse_args(["--node-name", "worker-0"]), {}).effective()
    record = logging.LogRecord("drain_guard.x", logging.INFO, __file__, 1, "settings", None, None)
    record.fields = fields
    line = _TextFormatter().format(record)
    groups = dict(part.split("=", 1) for part in line.split(" ")[4:])
    assert json.loads(groups["hold"]) == {"maxHold": "45m", "observeOnly": False}
    assert json.loads(groups["install"])["kind"] == "standalone"
    assert json.loads(groups["reporting"])["logFormat"] == "text"
