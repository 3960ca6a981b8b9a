"""docs/architecture.md's map stays true to the package (issue 33): every package of
drain_guard is in the layers drawing and in the import contract's layers, every module has its
row in the modules table and every row names a file that exists, and no module of the agent,
the simulator or the benchmarks grows past 500 lines (split it by concern, as the big ones
were)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "agent" / "drain_guard"
#: Where the 500-line limit holds: the agent, the simulator, the benchmarks.
SIZED = (PACKAGE, REPO / "simulator" / "drain_guard_sim", REPO / "benchmarks")
ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text()
MAX_LINES = 500
ROW = re.compile(r"^\| `(agent/drain_guard/[^`]*)` \|", re.MULTILINE)


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))


def _packages() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def _layout_drawing() -> str:
    section = ARCHITECTURE.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    drawings: list[str] = re.findall(r"```\n(.*?)```", section, re.DOTALL)
    return next(d for d in drawings if d.startswith("cli "))


def _contract_layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c.get("containers") == ["drain_guard"]
    )
    return [name.strip() for layer in contract["layers"] for name in layer.split("|")]


def test_every_package_is_drawn_and_layered() -> None:
    drawing = _layout_drawing()
    layers = _contract_layers()
    for package in _packages():
        assert re.search(rf"(^|\s){package}/", drawing), f"{package}/ not in the layout drawing"
        assert package in layers, f"{package} not in pyproject.toml's layers"


def test_every_module_has_its_row_and_every_row_a_file() -> None:
    rows = ROW.findall(ARCHITECTURE)
    for module in _modules():
        path = module.relative_to(REPO).as_posix()
        folder = module.parent.relative_to(REPO).as_posix() + "/"
        assert path in rows or folder in rows, f"{path} has no row in docs/architecture.md"
    for row in rows:
        assert (REPO / row).exists(), f"docs/architecture.md names {row}, which does not exist"


def test_no_module_is_over_500_lines() -> None:
    for root in SIZED:
        sizes = {
            m.relative_to(REPO).as_posix(): len(m.read_text().splitlines())
            for m in root.rglob("*.py")
        }
        assert sizes, f"no module found under {root}"
        assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
