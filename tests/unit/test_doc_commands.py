"""The README's and docs' commands are true to the repository (issue 34): every file of the
repository a page names, in a command or in prose, exists, and every ``drain-guard`` command
line of a shell block parses with the CLI's own parser. (What the quickstarts' commands do on
a cluster is tests/controlplane/test_quickstarts.py's; the install's kustomizations are
rendered by tests/deploy.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from drain_guard.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [REPO / "README.md", *(REPO / "docs").rglob("*.md")],
    key=lambda p: str(p.relative_to(REPO)),
)
#: The repository's top folders whose files the pages name; a name is one when it starts so
#: (after a user's ``../drain-guard/`` or ``<path>/`` clone prefix).
TOPS = ("daemonset", "systemd", "docs", "scripts", "agent", "tests", "benchmarks", "simulator")
REPO_PATH = re.compile(
    r"(?:\.\./drain-guard/|<path>/|(?<![\w/.-]))((?:"
    + "|".join(TOPS)
    + r")/[A-Za-z0-9_./-]*[A-Za-z0-9_/])"
)
#: kubectl's TYPE/NAME, not a file: the agents' DaemonSet.
KUBECTL_NAMES = {"daemonset/drain-guard"}
SHELL_BLOCK = re.compile(r"```(?:sh|bash)\n(.*?)```", re.S)
FENCED = re.compile(r"```[a-z]*\n(.*?)```", re.S)


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def named_paths(text: str) -> set[str]:
    """The repository paths ``text`` names: in code blocks and in inline code."""
    spans = FENCED.findall(text) + re.findall(r"`([^`\n]+)`", FENCED.sub("", text))
    found = set()
    for span in spans:
        for match in REPO_PATH.finditer(span):
            path = match.group(1)
            placeholder = re.search(r"/[A-Z][A-Z_]*$", path)  # daemonset/overlays/NAME
            if any(c in path for c in "*{}") or placeholder or path in KUBECTL_NAMES:
                continue  # a pattern, a placeholder or a kubectl object, not a file
            found.add(path)
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_file_a_page_names_exists(page: Path) -> None:
    missing = sorted(p for p in named_paths(page.read_text()) if not (REPO / p).exists())
    assert not missing, f"{page_id(page)} names files that do not exist: {missing}"


def command_lines(block: str) -> list[list[str]]:
    """The block's command lines as words, continuations joined, comments and output left
    out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = []
    for line in joined.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # a line of a multi-line string (a heredoc's, a quoted script's)
            continue
        if words:
            lines.append(words)
    return lines


SEPARATORS = {"|", "||", "&&", ";", "&", "--"}


def drain_guard_invocations(words: list[str]) -> list[list[str]]:
    """The arguments of each ``drain-guard`` command of a line: at its start, or after a
    separator (a pipe, ``&&``, an ``exec ... --``)."""
    found = []
    for i, word in enumerate(words):
        first = i == 0 or words[i - 1] in SEPARATORS
        if first and word.rpartition("/")[2] == "drain-guard":
            args = []
            for arg in words[i + 1 :]:
                if arg in SEPARATORS:
                    break
                if not re.match(r"\d*[<>]", arg):  # a redirection is the shell's
                    args.append(arg.strip("[]"))
            found.append(args)
    return found


INVOCATIONS = [
    (page_id(page), args)
    for page in PAGES
    for block in SHELL_BLOCK.findall(page.read_text())
    for line in command_lines(block)
    for args in drain_guard_invocations(line)
]


def test_the_pages_have_drain_guard_commands() -> None:
    """The extraction finds what is there: README's status and release, install.md's
    preflight, the quickstarts' status."""
    pages = {page for page, _ in INVOCATIONS}
    assert {"README.md", "docs/install.md", "docs/quickstart/openshift.md"} <= pages, pages


@pytest.mark.parametrize(
    ("page", "args"), INVOCATIONS, ids=[f"{p}: {' '.join(a)}" for p, a in INVOCATIONS]
)
def test_every_drain_guard_command_parses(page: str, args: list[str]) -> None:
    parser = build_parser()
    try:
        parser.parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"{page}: drain-guard {' '.join(args)}: does not parse (exit {exc.code})")
