"""Every output line the docs quote from ``status`` and ``release`` is what the command prints.

Issue 37: install.md quoted ``status``'s "nothing held" line after the code had changed it.
Here the real commands run against the simulated cluster with nothing held, and every quote
in README.md and docs/ that starts like one of their lines must be that line, or a prefix of
it cut at a word and ended with "..." or "…".
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from drain_guard.status.parts import ObservedStatus
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
OPERATOR = "kube:admin"
# A quote: an inline code span, or a double-quoted string (as in a shell comment).
QUOTE = re.compile(r"`([^`\n]+)`|\"([^\"\n]+)\"")
START_WORDS = 4  # a quote is taken for a command's line when its first words are the line's


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _quotes_like(line: str) -> list[tuple[str, str]]:
    """(document, quote) for every quote in the docs that starts as ``line`` starts."""
    start = " ".join(line.split()[:START_WORDS])
    found = []
    for doc in _documents():
        for match in QUOTE.finditer(doc.read_text()):
            quote = match.group(1) or match.group(2)
            if quote.startswith(start):
                found.append((str(doc.relative_to(REPO)), quote))
    return found


def _agrees(quote: str, line: str) -> bool:
    for ellipsis in ("...", "…"):
        if quote.endswith(ellipsis):
            cut = quote.removesuffix(ellipsis).rstrip(" ,")
            return line.startswith(cut) and line[len(cut) : len(cut) + 1] in (",", " ", "")
    return quote == line


async def test_quoted_nothing_held_lines_are_the_real_output(
    api: SimApiServer, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    lines = []
    for argv in (("status",), ("release", "--all")):
        code, out, err = await run_cli(*argv, "--kubeconfig", kubeconfig)
        assert (code, err) == (0, ""), argv
        lines.append(out.rstrip("\n"))
    assert _quotes_like(lines[0]), "the docs no longer quote status's line: update this test"
    for line in lines:
        drifted = [(doc, q) for doc, q in _quotes_like(line) if not _agrees(q, line)]
        assert not drifted, f"the command prints {line!r}; the docs quote {drifted}"


OBSERVED = re.compile(r"observed: +(since (\S+): (\d+) drain requests; .*)$", re.MULTILINE)


def test_quoted_observed_lines_are_what_the_status_text_renders() -> None:
    """The text view's ``observed:`` line, as quoted, rendered by the code from the numbers
    the quote gives."""
    quoted = [
        (str(doc.relative_to(REPO)), match)
        for doc in _documents()
        for match in OBSERVED.finditer(doc.read_text())
    ]
    assert quoted, "the docs no longer quote the observed line: update this test"
    for doc, match in quoted:
        line = match.group(1)
        held = re.search(r"by reason: (.*?);", line)
        evicted = re.search(r"evicts them\): (\d+)(?: \(latest (\S+)\))?$", line)
        assert held, f"{doc}: {line}"
        assert evicted, f"{doc}: {line}"
        reasons = tuple(
            (r, int(n)) for r, n in (p.split() for p in held.group(1).split(", ") if p != "none")
        )
        observed = ObservedStatus(
            int(match.group(3)), reasons, int(evicted.group(1)), evicted.group(2)
        )
        since = datetime.fromisoformat(match.group(2))
        assert observed.text(since) == line, doc
