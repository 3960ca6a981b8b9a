"""Finding the Prometheus tools: skip locally when missing, fail in CI (CI=true)."""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str) -> str:
    """Path of ``name`` on PATH; a missing tool fails the test in CI and skips it elsewhere."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name} not found (Debian package prometheus; scripts/system-deps.sh installs it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)
