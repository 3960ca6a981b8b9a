"""Every program's and subcommand's ``--help`` renders, as a user types it (issue 39 item 5,
issue 37): exit 0, no traceback, the program's own name, and an optional flag shown optional.

The subcommands come from the parsers themselves, so a new one is covered without a change
here; the programs run as installed (the console scripts), in a process of their own.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from drain_guard.cli import build_parser
from drain_guard_sim.__main__ import build_drain_guard_demo_parser
from drain_guard_sim.__main__ import build_parser as build_sim_parser
from tests.helpers import require_tool


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _cases() -> list[tuple[str, ...]]:
    cases: list[tuple[str, ...]] = [("drain-guard",), ("drain-guard-sim",)]
    cases += [("drain-guard", name) for name in _subcommands(build_parser())]
    cases += [("drain-guard-sim", name) for name in _subcommands(build_sim_parser())]
    return cases


def _parser_of(command: tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser that ``command --help`` renders. ``drain-guard demo`` hands over to the
    simulator's demo, named as drain-guard's and with the agent's max hold filled in."""
    if command == ("drain-guard", "demo"):
        return build_drain_guard_demo_parser(1.0)
    top = build_parser() if command[0] == "drain-guard" else build_sim_parser()
    return top if len(command) == 1 else _subcommands(top)[command[1]]


def _help(command: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    program = require_tool(command[0])
    return subprocess.run(
        [program, *command[1:], "--help"], capture_output=True, text=True, timeout=120, check=False
    )


def _usage_flags(usage: str) -> tuple[set[str], set[str]]:
    """The (required, optional) flags of a usage text: an optional one is in brackets."""
    optional = set(re.findall(r"\[(--?[\w-]+)", usage))
    every = set(re.findall(r"(?<![\w-])(--?[\w-]+)", usage))
    return every - optional, optional


@pytest.mark.parametrize("command", _cases(), ids=" ".join)
def test_help_renders_under_the_programs_own_name(command: tuple[str, ...]) -> None:
    proc = _help(command)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "Traceback" not in proc.stdout
    usage, _, rest = proc.stdout.partition("\n\n")
    assert usage.startswith(f"usage: {' '.join(command)} ["), usage
    assert rest.strip(), "help without a description or options"
    parser = _parser_of(command)
    required_shown, optional_shown = _usage_flags(usage)
    in_required_group = {
        action
        for group in parser._mutually_exclusive_groups
        if group.required
        for action in group._group_actions
    }
    required = {
        action.option_strings[0]
        for action in parser._actions
        if action.option_strings and (action.required or action in in_required_group)
    }
    assert required_shown == required
    assert not required_shown & optional_shown


def test_drain_guard_demo_shows_the_agents_max_hold_as_a_default() -> None:
    """``drain-guard demo`` passes the agent's own --max-hold: the user need not give it."""
    proc = _help(("drain-guard", "demo"))
    assert "[--agent-max-hold SECONDS]" in proc.stdout
    assert re.search(r"\(default: the agent's own, \d+\)", " ".join(proc.stdout.split()))


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["run", "--node", "n"], "drain-guard run: error: unrecognized arguments: --node n"),
        (["status", "--node", "n"], "drain-guard status: error: unrecognized arguments: --node n"),
        (["hold", "--node-name", "n", "--for", "1h", "--reas", "x"], "drain-guard hold: error:"),
        (["--vers", "run"], "drain-guard: error: unrecognized arguments: --vers"),
    ],
)
def test_a_flag_is_never_abbreviated_and_an_error_names_its_subcommand(
    argv: list[str], error: str
) -> None:
    """``--node`` is not ``--node-name``: argparse's abbreviations are off, and the error line
    names the subcommand whose flags were mistyped."""
    proc = subprocess.run(
        [require_tool("drain-guard"), *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(error), proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["demo", "--node", "2"], "drain-guard demo: error: unrecognized arguments: --node 2"),
        (["demo", "--api", "sim", "--time", "1"], "drain-guard demo: error:"),
    ],
)
def test_the_demo_takes_no_abbreviation_and_names_itself(argv: list[str], error: str) -> None:
    proc = subprocess.run(
        [require_tool("drain-guard"), *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(error), proc.stderr


def test_every_parser_refuses_abbreviations() -> None:
    """Every parser of both programs, so a subcommand added later cannot bring them back."""
    parsers = [build_parser(), build_sim_parser(), build_drain_guard_demo_parser(1.0)]
    parsers += list(_subcommands(parsers[0]).values()) + list(_subcommands(parsers[1]).values())
    assert [p.prog for p in parsers if p.allow_abbrev] == []


def test_the_help_test_covers_every_console_script() -> None:
    """A new program in pyproject.toml's [project.scripts] must join the cases above."""
    root = Path(__file__).resolve().parents[2]
    scripts = set()
    for pyproject in (root / "pyproject.toml", root / "simulator" / "pyproject.toml"):
        section = pyproject.read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
        scripts |= set(re.findall(r"^([\w-]+)\s*=", section, flags=re.MULTILINE))
    assert scripts == {case[0] for case in _cases()}


@pytest.mark.parametrize(
    "command", [("drain-guard", "demo"), ("drain-guard-sim", "demo", "--agent-max-hold", "5")]
)
def test_the_demos_own_errors_name_the_command_typed(command: tuple[str, ...]) -> None:
    proc = subprocess.run(
        [require_tool(command[0]), *command[1:], "--nodes", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"{command[0]} demo: --nodes must be at least 2\n"
