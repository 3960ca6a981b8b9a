"""The repository stands alone: no file cites the design notes it grew from or a path outside it.

docs/protocol.md is the normative text; a citation of an outside document is one a user of
this repository cannot follow.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Spelt in pieces so that this file does not find itself.
FORBIDDEN = ("shared" + "/", "DESIGN" + ".md")
SKIP_DIRS = {
    ".git",
    ".venv",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    ".import_linter_cache",
    "build",
    "dist",
    "demo-out",
}


def _repository_files() -> list[Path]:
    files: list[Path] = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        files.extend(Path(folder, name) for name in names)
    return files


def test_no_file_cites_a_path_outside_the_repository() -> None:
    hits = []
    for path in _repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files cite nothing
        for number, line in enumerate(text.splitlines(), 1):
            if any(word in line for word in FORBIDDEN):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "\n".join(hits)
