"""docs/configuration.md lists exactly the flags (and environment variables) of the parser."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from drain_guard.cli import build_parser
from drain_guard.settings.agent import RUN_OPTIONS
from drain_guard.settings.shield import SHIELD_OPTIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
DOCUMENTED_COMMANDS = (
    "run",
    "shield",
    "webhook",
    "node-proxy",
    "copy-booted-origin",
    "status",
    "hold",
    "release",
    "preflight",
)
#: The demo's flags are its own parser's (``drain-guard demo --help``), not a table's.
UNTABLED = {"demo"}


def _doc_tables() -> dict[str, dict[str, str]]:
    """command → {flag: environment cell} from the tables under ``## `drain-guard CMD```."""
    tables: dict[str, dict[str, str]] = {}
    command: str | None = None
    in_flag_table = False
    for line in DOC.read_text().splitlines():
        heading = re.match(r"^## `drain-guard ([\w-]+)`", line)
        if heading:
            command = heading.group(1)
            tables[command] = {}
            continue
        if line.startswith("## "):
            command = None
        if line.startswith("| flag | environment |"):
            in_flag_table = True
        elif not line.startswith("|"):
            in_flag_table = False
        if command is None or not in_flag_table or not line.startswith("| `-"):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for flag in re.findall(r"`(-[^`]+)`", cells[0]):
            tables[command][flag] = cells[1].strip("`")
    return tables


def _parser_flags() -> dict[str, set[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags: dict[str, set[str]] = {}
    for name, subparser in sub.choices.items():
        flags[name] = {
            opt
            for action in subparser._actions
            if not isinstance(action, argparse._HelpAction)
            for opt in action.option_strings
        }
    return flags


@pytest.mark.parametrize("command", DOCUMENTED_COMMANDS)
def test_every_flag_is_documented_and_every_documented_flag_exists(command: str) -> None:
    assert set(_doc_tables()[command]) == _parser_flags()[command]


@pytest.mark.parametrize(("command", "options"), [("run", RUN_OPTIONS), ("shield", SHIELD_OPTIONS)])
def test_environment_variables_match(command: str, options: tuple[Any, ...]) -> None:
    documented = _doc_tables()[command]
    assert {opt.flag: opt.env for opt in options} == documented


def test_every_command_has_its_table() -> None:
    """A new subcommand (``hold`` had a table no test read) is checked like the others."""
    assert set(_parser_flags()) - UNTABLED == set(DOCUMENTED_COMMANDS)
    assert set(_doc_tables()) - UNTABLED == set(DOCUMENTED_COMMANDS)
