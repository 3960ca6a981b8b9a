"""Alert rules: valid, unit-tested with promtool, the PrometheusRule in sync, runbooks present."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import require_tool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "daemonset" / "rules" / "drain-guard.rules.yml"
PROMETHEUS_RULE = ROOT / "daemonset" / "base" / "prometheusrule.yaml"
RULES_TEST = Path(__file__).with_name("rules_test.yml")
RUNBOOKS = ROOT / "docs" / "runbooks"
RUNBOOK_BASE = (ROOT / "daemonset" / "rules" / "runbook-base-url").read_text().strip()
GENERATOR = ROOT / "scripts" / "gen-prometheusrule.py"


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_prometheusrule", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert [g["name"] for g in groups] == ["drain-guard"]
    return [rule for g in groups for rule in g["rules"]]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.prometheus
def test_promtool_check_rules(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    spec = tmp_path / "from-prometheusrule.yml"
    spec.write_text(yaml.safe_dump(yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]))
    for path in (RULES, spec):
        result = run(promtool, "check", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


@pytest.mark.prometheus
def test_promtool_rule_unit_tests() -> None:
    promtool = require_tool("promtool")
    result = run(promtool, "test", "rules", str(RULES_TEST))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert firing == names
    assert silent == names


def test_prometheusrule_matches_the_rules_file() -> None:
    manifest = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["spec"] == yaml.safe_load(RULES.read_text())
    result = run(sys.executable, str(GENERATOR), "--check")
    assert result.returncode == 0, result.stderr


def test_the_runbook_base_url_file_sets_every_runbook_url() -> None:
    """A fork or a mirror edits daemonset/rules/runbook-base-url only: the generator carries it
    into every alert of the rules file, the PrometheusRule and the promtool expectations."""
    gen = generator()
    fork = "https://git.example.com/ops/drain-guard/-/blob/v1/docs/runbooks/"
    assert fork != RUNBOOK_BASE
    rules = yaml.safe_load(gen.with_runbook_base(RULES.read_text(), fork))
    manifest = yaml.safe_load(gen.render(rules))
    for groups in (rules["groups"], manifest["spec"]["groups"]):
        urls = {r["alert"]: r["annotations"]["runbook_url"] for g in groups for r in g["rules"]}
        assert urls == {rule["alert"]: f"{fork}{rule['alert']}.md" for rule in alerts()}
    expected = yaml.safe_load(gen.with_runbook_base(RULES_TEST.read_text(), fork))["tests"]
    expected_urls = {
        (check["alertname"], alert["exp_annotations"]["runbook_url"])
        for case in expected
        for check in case.get("alert_rule_test", [])
        for alert in check["exp_alerts"]
    }
    assert expected_urls == {(name, f"{fork}{name}.md") for name, _ in expected_urls}
    assert {name for name, _ in expected_urls} == {rule["alert"] for rule in alerts()}


@pytest.mark.parametrize("rule", alerts(), ids=lambda r: str(r["alert"]))
def test_alert_has_severity_annotations_and_runbook(rule: dict[str, Any]) -> None:
    name = rule["alert"]
    assert name.startswith("DrainGuard")
    assert rule["labels"]["severity"] in {"info", "warning", "critical"}
    assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
    assert rule["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}{name}.md"
    runbook = RUNBOOKS / f"{name}.md"
    assert runbook.is_file(), runbook
    text = runbook.read_text()
    assert text.startswith(f"# {name}\n")
    for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
        assert section in text, (name, section)


def test_the_runbook_index_lists_every_alert_in_the_rules_order() -> None:
    """Issue 25: the index listed 8 of 10 alerts."""
    index = (RUNBOOKS / "README.md").read_text()
    listed = re.findall(r"^\| \[(DrainGuard\w+)\]\(\1\.md\) \| (\w+) \|", index, re.M)
    assert listed == [(rule["alert"], rule["labels"]["severity"]) for rule in alerts()]


def test_no_runbook_without_an_alert() -> None:
    names = {rule["alert"] for rule in alerts()}
    assert {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"} == names
