"""Each benchmark runs end to end with minimal parameters and writes its result file.

These keep the benchmarks from rotting as the agent and the simulator change. They check
what was counted (requests, trials, samples), never how long anything took.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import __main__ as bench_main
from benchmarks import (
    alertload,
    apiload,
    fleet,
    footprint,
    interleave,
    mcofanout,
    pool,
    reaction,
    scrapeflood,
    shieldscale,
    startup_profile,
)
from drain_guard_sim.actors.mco import McoVersion
from tests.helpers import require_tool


def _result(out: Path, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / f"{name}.json").read_text())
    assert doc["benchmark"] == name
    assert doc["machine"]["nproc"] >= 1
    assert doc["machine"]["load_avg_1m_at_start"] >= 0
    assert doc["machine"]["load_avg_1m_at_end"] >= 0
    return doc


def test_reaction(tmp_path: Path) -> None:
    argv = ["--requests", "3", "--runs", "1", "--race-trials", "2", "--race-delays", "0.1"]
    argv += ["--baseline-trials", "1", "--poll-interval", "0.1", "--supersede-trials", "2"]
    argv += ["--event-latency", "0.05", "--variant", "development", "--out", str(tmp_path)]
    assert reaction.main(argv) == 0
    doc = _result(tmp_path, "reaction")
    assert doc["latency"]["pooled"]["n"] == 3
    (race,) = doc["races"]
    assert race["won"] + race["lost"] == 2
    assert race["reaction"]["n"] == 2
    assert [x["reaction"]["n"] for x in doc["supersede"]] == [2, 2]
    assert doc["baseline"]["agent"]["reaction"]["n"] == 1
    assert doc["baseline"]["poller"]["reaction"]["n"] == 1
    # The agent watches: it never reads the Node while waiting for a request; the script polls.
    assert "get nodes" not in doc["baseline"]["agent"]["requests"]
    assert doc["baseline"]["poller"]["requests"]["get nodes"] >= 1


def test_footprint(tmp_path: Path) -> None:
    argv = ["--starts", "1", "--rest-seconds", "0.2", "--rest-runs", "1", "--rounds", "1"]
    argv += ["--pod-changes", "8", "--node-updates", "8", "--imports", "1", "--out", str(tmp_path)]
    argv += ["--compare", "deployed-eager", "development", "--compare-starts", "1"]
    assert footprint.main(argv) == 0
    doc = _result(tmp_path, "footprint")
    assert doc["params"]["variant"] == "deployed"
    assert len(doc["start_to_ready_s"]["runs"]) == 1
    assert [w["mode"] for w in doc["rest"]] == ["bare", "deployed"]
    assert doc["churn"][0]["changes"] == 16
    cost = doc["import_cost"]
    assert cost["agent_rss_mib"] >= cost["aiohttp_rss_mib"] > 0
    # The deferred import leaves most of kubernetes_asyncio out of the agent.
    assert cost["rest_of_kubernetes_asyncio_adds_mib"] > 0
    assert [v["variant"] for v in doc["variants"]] == ["deployed-eager", "development"]
    assert doc["variants"][0]["rss_mib"] > doc["after_start"]["rss_mib"]


def test_apiload(tmp_path: Path) -> None:
    # A very short "hour": bookmarks do not fit into 5 s watches, so only counts are checked.
    argv = ["--time-scale", "1200", "--poll-interval", "0.5", "--sizes", "3", "--processes", "1"]
    assert apiload.main([*argv, "--out", str(tmp_path)]) == 0
    doc = _result(tmp_path, "apiload")
    (size,) = doc["sizes"]
    assert (size["nodes"], size["processes"]) == (3, 1)
    start = size["start_requests_per_node"]
    # The real process: one list per watch (pods once: the build-pod guard and the shield
    # share them), and the self-check's one-Node list, dry-run patch and TokenRequest.
    assert start["list nodes"] == 2.0
    assert start["list pods"] == 1.0
    assert start["list poddisruptionbudgets.policy"] == 1.0
    assert start["create serviceaccounts/token"] >= 1
    # The forced 410: each watch lists again.
    assert size["after_410_requests_per_node"]["list nodes"] >= 1
    # One update of the node: the hold and the release, each one PATCH, and their Events;
    # a self-check in the 3 s "hour" adds a dry-run PATCH with its TokenRequest.
    rollout = size["rollout_requests_per_node"]
    assert rollout["patch nodes"] - rollout.get("create serviceaccounts/token", 0) == 2
    assert size["rollout_event_writes_per_hold"] == rollout.get("create events", 0) + rollout.get(
        "patch events", 0
    )
    assert size["rollout_event_writes_per_hold"] >= 2
    # Told by reason: the hold's start once, on its pool (the node's rendered config names
    # "worker"), none on the Node (its annotations say it); the end's follow the release.
    by_reason = size["rollout_event_writes_per_hold_by_reason"]
    assert sum(by_reason.values()) == size["rollout_event_writes_per_hold"]
    assert by_reason["create PoolRolloutHeld"] == 1.0
    assert "create DrainHeld" not in by_reason
    assert size["poller"]["requests_per_hour"]["get nodes"] > 0


def test_apiload_with_the_build_objects_served(tmp_path: Path) -> None:
    """With MachineOSBuilds and MachineOSConfigs served (4.18+), each is listed at start."""
    argv = ["--time-scale", "1200", "--poll-interval", "0.5", "--sizes", "3", "--processes", "1"]
    assert apiload.main([*argv, "--machine-os", "--out", str(tmp_path)]) == 0
    (size,) = _result(tmp_path, "apiload")["sizes"]
    start = size["start_requests_per_node"]
    for resource in ("machineconfigpools", "machineosbuilds", "machineosconfigs"):
        assert start[f"list {resource}.machineconfiguration.openshift.io"] == 1.0


def test_mcofanout(tmp_path: Path) -> None:
    """Counts only: a pool's write is sent to its own nodes' agents (before: every agent's),
    a build object's to every agent, and each sampled real agent gets its own pool's alone."""
    argv = ["--nodes", "6", "--masters", "2", "--writes", "2", "--out", str(tmp_path)]
    assert mcofanout.main(argv) == 0
    rows = _result(tmp_path, "mcofanout")["writes"]
    assert rows["master pool"]["events_per_write"] == 2
    assert rows["worker pool"]["events_per_write"] == 4
    assert rows["master pool"]["before_events_per_write"] == 6
    assert rows["MachineOSBuild"]["events_per_write"] == 6
    assert rows["master pool"]["sampled_agents"]["worker-0000"]["objects"] == 0
    assert rows["worker pool"]["sampled_agents"]["worker-0000"]["objects"] == 1


def test_fleet(tmp_path: Path) -> None:
    argv = ["--sizes", "6", "--agents", "2", "--holds", "1", "--settle-seconds", "0.2"]
    assert fleet.main([*argv, "--variant", "development", "--out", str(tmp_path)]) == 0
    doc = _result(tmp_path, "fleet")
    (size,) = doc["sizes"]
    assert (size["nodes"], size["sampled_agents"]) == (6, 2)
    assert size["hold_reaction"]["n"] == 2
    # Nodes without an agent process: the simulator holds their three watches each.
    assert size["phantom_watches"] == 12
    per_agent = size["per_agent"]
    # One pod list and one pod watch per agent (shared by the guard and the shield).
    assert (
        size["start_requests_detail"]["list pods"],
        size["start_requests_detail"]["watch pods"],
    ) == (1, 1)
    # Pods sent at start: worker-0000 its daemon and crio proxy pods and MCO's singletons
    # placed there, worker-0003 its daemon and crio proxy pods; in the rollout, each agent
    # its daemon pod's three events (deleted, added, running).
    assert per_agent["start_pods"] == [6, 2]
    assert per_agent["rollout_objects"] == [3, 3]


def test_runner_rejects_unknown_names() -> None:
    assert bench_main.main(["no-such-benchmark"]) == 2


def test_scrapeflood(tmp_path: Path) -> None:
    argv = [
        "--requests",
        "3",
        "--concurrency",
        "20",
        "--flood-seconds",
        "5",
        "--variant",
        "development",
    ]
    assert scrapeflood.main([*argv, "--flood-requests", "500", "--out", str(tmp_path)]) == 0
    doc = _result(tmp_path, "scrapeflood")
    assert doc["idle"]["n"] == 3
    assert 1 <= doc["flood"]["n"] <= 3
    assert sum(doc["flood_answers"].values()) <= 500
    assert doc["probes"]["sent"] >= 1
    assert doc["agent_fds"]["peak_during_flood"] >= doc["agent_fds"]["idle"]


def test_shieldscale(tmp_path: Path) -> None:
    argv = ["--sizes", "5", "10", "--builds", "2", "--build-cycles", "1", "--settle-seconds", "0.1"]
    argv += ["--variant", "development", "--out", str(tmp_path)]
    assert shieldscale.main(argv) == 0
    doc = _result(tmp_path, "shieldscale")
    (run,) = doc["runs"].values()
    assert [s["nodes"] for s in run["sizes"]] == [5, 10]
    # Only build pods are sent to it: the two at start, whatever the number of nodes.
    assert run["slopes"]["start_pods_sent"]["values"] == [2, 2]
    assert all(s["start_requests"]["list pods"] >= 1 for s in run["sizes"])


def test_startup_profile(tmp_path: Path) -> None:
    assert startup_profile.main(["--variant", "development", "--out", str(tmp_path)]) == 0
    doc = _result(tmp_path, "startup_profile")
    # The agent's own modules are among the imports it reports (it once filtered on "agent.").
    assert any(name.startswith("drain_guard.") for name in doc["top_imports_ms"])
    assert doc["agent_import_ms"] > 0


def test_alertload(tmp_path: Path) -> None:
    require_tool("prometheus")
    argv = ["--nodes", "20", "--interval", "10", "--alerts", "3", "--seconds", "1"]
    assert alertload.main([*argv, "--out", str(tmp_path)]) == 0
    doc = _result(tmp_path, "alertload")
    assert doc["errors"] == 0
    assert doc["queries"] == 2  # 20 agents, one query each per 10 s, for 1 s
    assert doc["answer_bytes_median"] > 3 * 200  # three alerts with their annotations


def test_interleave(tmp_path: Path) -> None:
    agents = ["--agent", "plain=development", "--agent", "env=development,+MALLOC_ARENA_MAX=2"]
    argv = ["--rounds", "2", "--block", "2", "--warmup", "1", *agents, "--out", str(tmp_path)]
    assert interleave.main(argv) == 0
    doc = _result(tmp_path, "interleave")
    assert doc["agents"]["plain"]["n"] == doc["agents"]["env"]["n"] == 4
    assert doc["agents"]["plain"]["ratio_of_round_medians"] == 1.0
    assert doc["agents"]["env"]["ratio_of_round_medians"] > 0


def test_interleave_refuses_an_unknown_variant_or_edit() -> None:
    with pytest.raises(ValueError, match="LABEL=VARIANT"):
        interleave.parse_agent("x=nonesuch", None)
    with pytest.raises(ValueError, match="neither"):
        interleave.parse_agent("x=development,MALLOC_ARENA_MAX", None)


def test_pool(tmp_path: Path) -> None:
    """The 4.18 seed, MCO alone and with agents: nothing pointless, nothing evicted, finished."""
    argv = ["--versions", "4.18", "--scenarios", "seed", "--time-factor", "0.005"]
    assert pool.main([*argv, "--out", str(tmp_path)]) == 0
    doc = _result(tmp_path, "pool")
    runs = {run["agents"]: run for run in doc["runs"]}
    assert set(runs) == {False, True}
    for run in runs.values():
        assert (run["version"], run["scenario"]) == ("4.18", "seed")
        assert (run["pointless"], run["evicted"]) == (0, 0), run  # which run: with agents or not
        assert run["finished"] is not None, run
    assert runs[True]["max_hold_ends"] == 0
    assert "| 4.18 | seed | 0 / 0 | 0 / 0 |" in doc["table"]
    assert runs[False]["agent_restarts"] == 0


def test_pool_plays_each_scenario_where_its_version_has_it() -> None:
    assert pool.applies(McoVersion.V4_15, "stuck-build")
    assert not pool.applies(McoVersion.V4_16, "stuck-build")
    assert not pool.applies(McoVersion.V4_15, "revert")
    assert pool.applies(McoVersion.V4_18, "revert")
