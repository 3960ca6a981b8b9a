"""The test suite's own helpers that decide whether a test runs at all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import require_tool

MISSING = "no-such-tool-drain-guard"


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_a_missing_tool_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="is not installed"):
        require_tool(MISSING)


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_a_missing_tool_skips_elsewhere(monkeypatch: pytest.MonkeyPatch, ci: str | None) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception):
        require_tool(MISSING)


def test_the_venv_comes_before_path() -> None:
    # The interpreter itself is in the venv's bin directory.
    name = Path(sys.executable).name
    assert require_tool(name) == str(Path(sys.executable).parent / name)
