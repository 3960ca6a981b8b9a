"""What ``pip install .`` (and so the image) installs: the agent, and nothing of the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from benchmarks.deployed import ROOT, build_context
from drain_guard.confine.rights import table_rows


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    # From a copy: setuptools writes build/ and *.egg-info beside the source it builds.
    context = build_context(ROOT, tmp_path_factory.mktemp("build") / "context")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(out),
            str(context),
        ],
        check=True,
        timeout=300,
        cwd=context,
    )
    (path,) = out.glob("drain_guard-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_holds_the_drain_guard_package_only(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert tops == {"drain_guard"}
    assert "drain_guard/cli.py" in names


def test_the_wheel_ships_the_rights_table(wheel: zipfile.ZipFile) -> None:
    """The package's rights.md is a link to docs/rights.md (one table, no copy to keep): the
    wheel holds the table's text, resolved by the build from a context that keeps the link,
    as the image's COPY does."""
    assert (ROOT / "agent" / "drain_guard" / "rights.md").is_symlink()
    assert wheel.read("drain_guard/rights.md").decode() == (ROOT / "docs" / "rights.md").read_text()


def test_the_installed_package_finds_its_rights_table(
    wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    """drain-guard preflight's default --rights, in the wheel installed with no checkout near
    it, is a table with the page's rows."""
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q"]
    subprocess.run([*install, "--target", str(target), str(wheel.filename)], check=True)
    program = (
        "from drain_guard.commands.preflight.run import DEFAULT_RIGHTS\n"
        "from drain_guard.confine.rights import table_rows\n"
        "print(DEFAULT_RIGHTS)\n"
        "print(len(list(table_rows(DEFAULT_RIGHTS.read_text()))))\n"
    )
    # The installed package before this checkout's editable one; run away from the checkout.
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", program], env=env, cwd=tmp_path, check=True, capture_output=True
    ).stdout.decode()
    path, rows = out.split()
    assert Path(path) == target / "drain_guard" / "rights.md"
    assert not Path(path).is_symlink()
    assert int(rows) == len(list(table_rows((ROOT / "docs" / "rights.md").read_text()))) > 0


def test_the_wheel_needs_no_simulator_dependency(wheel: zipfile.ZipFile) -> None:
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    fields = Parser().parsestr(wheel.read(metadata).decode())
    required = [r for r in fields.get_all("Requires-Dist") or [] if "extra ==" not in r]
    names = {r.split(">")[0].split("=")[0].split(";")[0].strip().lower() for r in required}
    assert names == {"aiohttp", "kubernetes_asyncio", "psutil", "prometheus_client"}


@pytest.mark.parametrize("project", [".", "simulator"])
def test_an_editable_install_is_a_plain_path_entry(project: str) -> None:
    """make's ``pip install -e`` of each distribution prints no setuptools
    BuildBackendWarning (issue 37): setuptools installs an editable project as a plain path
    entry only when the package root ("") is mapped, by ``package-dir`` or by
    ``packages.find.where``; otherwise it installs an import finder of its own and warns
    that folders in the working directory may shadow the package."""
    config = tomllib.loads((ROOT / project / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = set(config.get("package-dir", {})) | (
        {""} if config.get("packages", {}).get("find", {}).get("where") else set()
    )
    assert mapped == {""}
