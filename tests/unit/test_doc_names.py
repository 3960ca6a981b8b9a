"""The names the README and docs give a user to look for exist: every Event reason they name
is one the agent writes, every alert one the PrometheusRule defines, every group of the
start-up ``settings`` line one the line has, every dotted module name one that exists. A
renamed Event (the hold's start moved from ``DrainHeld`` to the pool's ``PoolRolloutHeld``)
or alert otherwise leaves a user searching ``oc get events`` for what never comes."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest
import yaml

from drain_guard.runtime.agent_metrics import EVENT_REASONS
from drain_guard.settings.agent import add_run_arguments, settings_from
from drain_guard.settings.shield import add_shield_arguments, shield_settings_from

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [REPO / "README.md", *(REPO / "docs").rglob("*.md")],
    key=lambda p: str(p.relative_to(REPO)),
)
#: A backticked name of the agent's Event reasons' form (``DrainReleased``,
#: ``PoolRolloutHeld``, ``HoldRequestInvalid``); ``DrainGuard…`` names are alerts.
EVENT_LIKE = re.compile(r"`((?:Drain(?!Guard)|PoolRollout|HoldRequest)[A-Z][A-Za-z]*)`")
ALERT_LIKE = re.compile(r"`(DrainGuard[A-Z][A-Za-z]*)`")


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def code_names() -> set[str]:
    """Classes of the agent and the simulator: a page may name one (``HoldRequestStatus``,
    the simulator's ``DrainController``) where it describes the code, not an Event."""
    names = set()
    for root in ("agent", "simulator"):
        for source in (REPO / root).rglob("*.py"):
            tree = ast.parse(source.read_text())
            names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    return names


def alert_names() -> set[str]:
    rule = yaml.safe_load((REPO / "daemonset/base/prometheusrule.yaml").read_text())
    return {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


CODE_NAMES = code_names()


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_event_reason_a_page_names_is_written(page: Path) -> None:
    named = set(EVENT_LIKE.findall(page.read_text())) - CODE_NAMES
    unknown = sorted(named - set(EVENT_REASONS))
    assert not unknown, f"{page_id(page)} names Event reasons the agent never writes: {unknown}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_alert_a_page_names_is_defined(page: Path) -> None:
    unknown = sorted(set(ALERT_LIKE.findall(page.read_text())) - alert_names())
    assert not unknown, f"{page_id(page)} names alerts the PrometheusRule lacks: {unknown}"


def test_the_protocol_names_every_event_reason() -> None:
    """docs/protocol.md's Events table is where each reason is defined: none undocumented."""
    protocol = (REPO / "docs/protocol.md").read_text()
    missing = [r for r in EVENT_REASONS if f"`{r}`" not in protocol]
    assert not missing, f"docs/protocol.md does not name the Event reasons {missing}"


def documented_groups(heading: str) -> list[str]:
    """The keys configuration.md's paragraph starting with ``heading`` lists for the start-up
    line: in backticks after ``settings line:`` to the sentence's end, asides in parentheses
    left out."""
    text = (REPO / "docs/configuration.md").read_text()
    paragraph = text[text.index(heading) :].split("\n\n", 1)[0]
    listed = re.sub(r"\([^()]*\)", "", paragraph.split("settings line:", 1)[1])
    return re.findall(r"`(\w+)`", re.split(r"\.\s", listed, maxsplit=1)[0])


def test_the_run_settings_line_groups_are_documented() -> None:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    line = settings_from(parser.parse_args(["--node-name", "worker-0"]), {}).effective()
    assert documented_groups("At start the agent logs") == list(line)


def test_the_shield_settings_line_groups_are_documented() -> None:
    parser = argparse.ArgumentParser()
    add_shield_arguments(parser)
    line = shield_settings_from(parser.parse_args([]), {}).effective()
    assert documented_groups("The central shield") == list(line)


#: A backticked dotted name of the agent's or the simulator's code (``drain_guard_sim.harness.
#: chaos.run_soak``): a module, or a name defined in one (and that name's attribute).
DOTTED = re.compile(r"`((?:drain_guard|drain_guard_sim)(?:\.[A-Za-z_]\w*)+)`")
PACKAGES = {"drain_guard": REPO / "agent", "drain_guard_sim": REPO / "simulator"}


def top_level_names(source: Path) -> set[str]:
    names = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
    return names


def names_code(dotted: str) -> bool:
    parts = dotted.split(".")
    base = PACKAGES[parts[0]]
    for depth in range(len(parts), 0, -1):
        path = base.joinpath(*parts[:depth])
        source = (
            path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
        )
        if source.exists():
            rest = parts[depth:]
            return not rest or (len(rest) <= 2 and rest[0] in top_level_names(source))
    return False


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_module_a_page_names_exists(page: Path) -> None:
    """Modules moved (the simulator's split into harness/, apiserver/, actors/) leave no old
    dotted name behind."""
    missing = sorted(d for d in set(DOTTED.findall(page.read_text())) if not names_code(d))
    assert not missing, f"{page_id(page)} names modules that do not exist: {missing}"
