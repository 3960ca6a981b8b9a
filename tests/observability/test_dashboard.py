"""The dashboard (daemonset/components/console-dashboard/drain-guard.json): the OpenShift
console's ConfigMap and the Grafana JSON in one file; every query parses with promtool and
returns series from a real Prometheus scraping an agent that holds a drain (issue 25)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from tests.deploy.tools import REPO, one, render_dir
from tests.helpers import (
    CONFIG_B,
    IMAGE_B,
    NODE,
    StartAgent,
    add_build_pod,
    mcd_request,
    require_tool,
    wait_annotation,
)
from tests.observability.dashboard_page import page
from tests.observability.prometheus import prometheus

COMPONENT = REPO / "daemonset" / "components" / "console-dashboard"
DASHBOARD = COMPONENT / "drain-guard.json"
#: Prometheus discovers static targets within ~5 s and then scrapes every second.
SCRAPE_WAIT = 30.0


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def queries() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p["targets"]]


def test_the_dashboard_is_grafana_json_with_the_panels_operators_ask_for() -> None:
    doc = _dashboard()
    assert doc["uid"] == "drain-guard"
    titles = [p["title"] for p in doc["panels"]]
    for wanted in (
        "Held nodes",
        "Pools waiting",
        "Holds by reason",
        "Hold age against --max-hold",
        "Would-holds (observe-only, 1h)",
        "Not confined",
        "API errors",
    ):
        assert wanted in titles
    ids = [p["id"] for p in doc["panels"]]
    assert len(set(ids)) == len(ids)
    for panel in doc["panels"]:
        assert panel["type"] in ("graph", "singlestat")  # what the console renders
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"]
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource"]


#: The panels counting agents in trouble: red from one, green at zero (issue 37: "Not
#: confined 1" was drawn in the console's calm default blue).
PROBLEM_COUNTS = ("Not confined", "Agents not synced", "Agents with a stale view")
GREEN, RED = "#3e8635", "#c9190b"  # PatternFly's success and danger


def test_problem_counts_are_red_from_one() -> None:
    panels = {p["title"]: p for p in _dashboard()["panels"]}
    for title in PROBLEM_COUNTS:
        panel = panels[title]
        assert panel["type"] == "singlestat", title
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["color"] == {"mode": "thresholds"}, title
        assert defaults["thresholds"]["steps"] == [
            {"color": GREEN, "value": None},
            {"color": RED, "value": 1},
        ], title
        # The same for renderers of the legacy singlestat fields.
        assert (panel["colorValue"], panel["thresholds"]) == (True, "1,1"), title
        assert panel["colors"] == [GREEN, RED, RED], title


def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:q{i}", "expr": q} for i, q in enumerate(queries())
                ],
            }
        ]
    }
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump(rules))
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_console_configmap_carries_the_same_json(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    overlay = os.path.relpath(REPO / "daemonset" / "overlays" / "openshift", mine)
    (mine / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [overlay], "components": [os.path.relpath(COMPONENT, mine)]})
    )
    configmap = one(render_dir(mine), "ConfigMap", "drain-guard-dashboard")
    assert configmap["metadata"]["namespace"] == "openshift-config-managed"
    assert configmap["metadata"]["labels"]["console.openshift.io/dashboard"] == "true"
    assert json.loads(configmap["data"]["drain-guard.json"]) == _dashboard()


@pytest.mark.prometheus
async def test_every_panel_is_flat_on_a_healthy_idle_agent(
    start_agent: StartAgent, tmp_path: Path
) -> None:
    """Issue 37: "seconds since the API last answered" rose between an idle agent's API
    contacts. Every query, evaluated at two scrapes 5 s apart while the agent holds nothing and
    nothing happens, answers the same."""
    require_tool("prometheus")
    agent = await start_agent()
    async with prometheus(tmp_path, [f"127.0.0.1:{agent.port}"], {"node": NODE}) as prom:
        async with asyncio.timeout(SCRAPE_WAIT):
            await prom.wait_for("count_over_time(up[1m]) >= 8")
        [last] = await prom.query("timestamp(up)")
        later = float(last["value"][1])

        async def answer(expr: str, at: float) -> dict[str, float]:
            data = await prom.api("query", query=expr, time=str(at))
            return {json.dumps(r["metric"]): float(r["value"][1]) for r in data["result"]}

        for expr in queries():
            assert await answer(expr, later - 5) == await answer(expr, later), expr
    assert await agent.stop() == 0


@pytest.mark.prometheus
async def test_every_query_returns_series_from_an_agent_holding_a_drain(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    require_tool("prometheus")
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, f"drain-{CONFIG_B}", **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == f"hold-drain-{CONFIG_B}")
    async with prometheus(tmp_path, [f"127.0.0.1:{agent.port}"], {"node": NODE}) as prom:
        async with asyncio.timeout(SCRAPE_WAIT):
            await prom.wait_for('drain_guard_hold_active{reason="build-pod"} == 1')
            for query in queries():
                assert await prom.wait_for(query), query
        [held] = await prom.query(queries()[0])
        assert float(held["value"][1]) == 1
        [pool] = await prom.query("sum by (pool) (drain_guard_pool_rollout_held)")
        assert (pool["metric"], float(pool["value"][1])) == ({"pool": "worker"}, 1)
        snapshot = os.environ.get("DRAIN_GUARD_DASHBOARD_PAGE")
        if snapshot:  # scripts/dashboard-screenshot.sh: the page behind docs/dashboard.png
            await asyncio.sleep(float(os.environ.get("DRAIN_GUARD_DASHBOARD_SECONDS", "0")))
            end = time.time()
            ranges = [
                [
                    (
                        await prom.api(
                            "query_range",
                            query=t["expr"],
                            start=str(end - 120),
                            end=str(end),
                            step="2",
                        )
                    )["result"]
                    for t in panel["targets"]
                ]
                for panel in _dashboard()["panels"]
            ]
            Path(snapshot).write_text(page(_dashboard(), ranges))  # noqa: ASYNC240 (once)
    assert await agent.stop() == 0
