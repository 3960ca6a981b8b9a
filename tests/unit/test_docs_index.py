"""The README stays a five-minute read, docs/README.md indexes every page as a guide or as
reference, and the relative links of the README, the index and the quickstarts lead to files
that exist (issue 37: docs that fit in a head)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
INDEX = DOCS / "README.md"
README_MAX_LINES = 200
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _links(page: Path) -> list[str]:
    """The relative links of ``page``, without their anchors."""
    return [
        link.split("#", 1)[0]
        for link in LINK.findall(page.read_text())
        if not link.startswith(("http://", "https://", "#"))
    ]


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < README_MAX_LINES
    first_block = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands[:2] == ["make demo", "make test"]


def test_every_page_is_indexed_once_as_a_guide_or_as_reference() -> None:
    text = INDEX.read_text()
    guides, reference = (set(_links_in(_section(text, t))) for t in ("Guides", "Reference"))
    assert not guides & reference
    pages = {
        str(p.relative_to(DOCS))
        for p in DOCS.rglob("*.md")
        if p != INDEX and p.parent.name != "runbooks"
    }
    assert pages | {"runbooks/README.md"} == guides | reference


def _links_in(text: str) -> list[str]:
    return [link.split("#", 1)[0] for link in LINK.findall(text)]


def test_the_links_of_the_readme_the_index_and_the_quickstarts_lead_somewhere() -> None:
    pages = [REPO / "README.md", INDEX, *sorted((DOCS / "quickstart").glob("*.md"))]
    broken = [
        f"{page.relative_to(REPO)}: {link}"
        for page in pages
        for link in _links(page)
        if link and not (page.parent / link).exists()
    ]
    assert not broken
