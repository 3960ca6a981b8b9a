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


def _doc_defaults(command: str) -> dict[str, str]:
    """flag → the default cell of ``command``'s table, unescaped, backticks dropped."""
    text = DOC.read_text()
    section = text.split(f"## `drain-guard {command}`", 1)[1].split("\n## ", 1)[0]
    defaults = {}
    in_flag_table = False
    for line in section.splitlines():
        if line.startswith("| flag | environment | default |"):
            in_flag_table = True
        elif not line.startswith("|"):
            in_flag_table = False
        elif in_flag_table and line.startswith("| `-"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))]
            for flag in re.findall(r"`(-[^`]+)`", cells[0]):
                defaults[flag] = cells[2].replace("\\|", "|").replace("`", "")
    return defaults


@pytest.mark.parametrize(("command", "options"), [("run", RUN_OPTIONS), ("shield", SHIELD_OPTIONS)])
def test_documented_defaults_are_the_code_s(command: str, options: tuple[Any, ...]) -> None:
    """Each flag's default cell names the default the parser applies (a list's items joined
    by commas, as its variable takes them)."""
    documented = _doc_defaults(command)
    wrong = {}
    for opt in options:
        if opt.default is None:
            continue
        default = opt.default if isinstance(opt.default, str) else ",".join(opt.default)
        if default not in documented[opt.flag]:
            wrong[opt.flag] = (default, documented[opt.flag])
    assert not wrong, f"{command}: flag: (the code's default, the documented cell): {wrong}"
