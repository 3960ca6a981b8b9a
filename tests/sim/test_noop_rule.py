"""The noop-image rule with agents on the simulated MCO (issue 38 item 1): a same-image drain is
held only while MCO's objects say a new image will come, on each modelled version; where
nothing will, it goes at once and the decision says why, and no hold runs to --max-hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from drain_guard_sim.actors.mco import (
    CURRENT_CONFIG,
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    REASON,
    STATE,
    McoVersion,
    Timings,
    annotations_of,
    condition_true,
)
from drain_guard_sim.harness.cluster import AGENT_USER, SimCluster
from drain_guard_sim.harness.demoagents import AgentDecision, Agents

#: MCO's --max-hold default, in MCO seconds (the agents' is scaled from it).
MAX_HOLD = 2700.0
FACTOR = 0.01


def _done(cluster: SimCluster, config: str) -> bool:
    for name in cluster.node_names:
        ann = annotations_of(cluster.api.get("nodes", name))
        if not (
            ann.get(CURRENT_CONFIG) == config
            and ann.get(STATE) == "Done"
            and ann.get(DESIRED_DRAIN) == ann.get(LAST_APPLIED_DRAIN) == f"uncordon-{config}"
        ):
            return False
    return True


def _expired(agents: Agents) -> list[AgentDecision]:
    return [d for d in agents.decisions if d.outcome == "release:expired"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("version", [McoVersion.V4_16_EARLY, McoVersion.V4_16])
async def test_a_revert_to_a_built_config_is_let_go_at_once(
    tmp_path: Path, version: McoVersion
) -> None:
    """D1: the pool goes back to a config whose MachineOSBuild succeeded before; MCO targets
    every node with it and the image it runs, and nothing will retarget it. Each agent lets
    its node's same-image drain go at once, saying why; none holds it to --max-hold."""
    async with SimCluster(tmp_path, nodes=2, time_factor=FACTOR, version=version) as cluster:
        agents = Agents(cluster, tmp_path, MAX_HOLD)
        try:
            for node in cluster.node_names:
                await agents.start(node)
            cluster.reboot_hooks.append(agents.restart)
            first = await cluster.create_machine_config("99-worker-first")
            await cluster.wait_for(lambda: _done(cluster, first), timeout=120)
            second = await cluster.create_machine_config("99-worker-second")
            await cluster.wait_for(lambda: _done(cluster, second), timeout=120)
            seen = len(agents.decisions)
            cluster.api.delete("machineconfigs", "99-worker-second")
            await cluster.wait_for(lambda: _done(cluster, first), timeout=120)
            revert = [d for d in agents.decisions[seen:] if d.request == f"drain-{first}"]
            let_go = [d for d in revert if d.outcome == "pass" and "not held" in d.why]
            assert sorted({d.node for d in let_go}) == cluster.node_names, revert
            # Each node's first word says why; once the MCC has cordoned for the drain let go,
            # the agent's next look says the node is cordoned.
            firsts = {d.node: d for d in reversed(let_go)}
            assert all("succeeded before" in d.why for d in firsts.values()), let_go
            assert not [d for d in revert if d.outcome == "hold"], revert
            assert _expired(agents) == []
        finally:
            cluster.reboot_hooks.clear()
            await agents.stop_all()


@pytest.mark.timeout(300)
async def test_4_15_a_build_stuck_by_a_newer_config_ends_its_hold_at_once(tmp_path: Path) -> None:
    """The seed's race on 4.15: the build node's same-image drain is held while its build
    runs; a second MachineConfig during the build leaves the pool Building for good (D6), and
    noop-image stops holding it then, not at --max-hold."""
    async with SimCluster(tmp_path, nodes=2, time_factor=FACTOR) as cluster:
        agents = Agents(cluster, tmp_path, MAX_HOLD)
        try:
            for node in cluster.node_names:
                await agents.start(node)
            cluster.reboot_hooks.append(agents.restart)
            first = await cluster.create_machine_config("99-worker-first", lose_build_race=True)
            held = await cluster.wait_for(
                lambda: [
                    d
                    for d in agents.decisions
                    if d.outcome == "hold" and d.request == f"drain-{first}"
                ],
                timeout=120,
            )
            assert "noop-image" in held[0].reasons, held
            await cluster.create_machine_config("99-worker-second")
            # The hold keeps only what still blocks (the build pod, until its build ends):
            # noop-image goes at once, however long the pool stays Building.
            dropped = await cluster.wait_for(
                lambda: [
                    d
                    for d in agents.decisions
                    if d.request == f"drain-{first}"
                    and d.outcome in ("update-hold", "release:safe")
                    and "noop-image" not in d.reasons
                ],
                timeout=120,
            )
            assert dropped, agents.decisions
            assert _expired(agents) == []
        finally:
            cluster.reboot_hooks.clear()
            await agents.stop_all()


@pytest.mark.timeout(300)
async def test_a_pool_read_behind_the_nodes_target_is_waited_for(tmp_path: Path) -> None:
    """The race bc05fe9's branch guards: the agents' pool watches have not delivered the
    pool's move (frozen here, half-open: their streams separate from the Node's) when the seed's
    race targets a node with the new config and the image it runs. The pool as read names the
    old config, built with that image; rather than let the drain go on that older view, the
    agent waits ('as last read'); once its pool watch is renewed it sees the build and holds
    until the image comes: no drain for nothing, no hold to --max-hold."""
    pools = "machineconfigpools.machineconfiguration.openshift.io"
    # The agent's race with the MCC's cordon is not this test's (test_short_window's): played
    # as test_agent_seed plays it, the cordon 0.8 to 0.9 s of real time after the request.
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.05, timings=Timings(mcc_update_delay=20.0)
    ) as cluster:
        agents = Agents(cluster, tmp_path, MAX_HOLD)
        # The window outlasts the test's own reaction to the hold (renewing the watch) on a
        # loaded machine; its length is not what is tested here.
        agents.expect_within_ms = 60_000
        api = cluster.api
        try:
            for node in cluster.node_names:
                await agents.start(node)
            cluster.reboot_hooks.append(agents.restart)
            await cluster.wait_for(
                lambda: api.request_count(user=AGENT_USER, verb="watch", resource=pools) >= 2,
                timeout=60,
            )
            assert api.freeze_watches(resource=pools, user=AGENT_USER) == 2
            first = await cluster.create_machine_config("99-worker-first", lose_build_race=True)
            decided = await cluster.wait_for(
                lambda: [
                    d
                    for d in agents.decisions
                    if d.outcome in ("hold", "pass") and d.request == f"drain-{first}"
                ],
                timeout=120,
            )
            held = decided[0]  # the agent's first word on the same-image request
            assert held.outcome == "hold", decided
            assert "noop-image" in held.reasons, decided
            assert "as last read" in held.why, decided
            api.cut_watches(resource=pools, user=AGENT_USER)
            await cluster.wait_for(lambda: _done(cluster, first), timeout=120)
            assert not [c for c in cluster.cordons() if c.unchanged_image]
            assert _expired(agents) == []
        finally:
            cluster.reboot_hooks.clear()
            await agents.stop_all()


@pytest.mark.timeout(300)
async def test_4_15_a_build_refused_while_the_pool_was_degraded_is_not_waited_for(
    tmp_path: Path,
) -> None:
    """D4 after the repair: the pool moved to the new config while a node was Degraded, so
    4.15's build controller started no build, and starts none once the node is repaired; the
    node controller then targets every node with the new config and the image it runs. Each
    agent saw the pool degraded at that config with no build of it, and lets its node's
    same-image drain go at once, saying why, rather than hold it for the expected window.
    (worker-1's daemon is down meanwhile, so that it does not repair its node itself.)"""
    async with SimCluster(tmp_path, nodes=2, time_factor=FACTOR) as cluster:
        api = cluster.api
        agents = Agents(cluster, tmp_path, MAX_HOLD)
        try:
            for node in cluster.node_names:
                await agents.start(node)
            cluster.reboot_hooks.append(agents.restart)
            await cluster.machines["worker-1"].stop()
            broken = {STATE: "Degraded", REASON: "failed to drain node: timed out"}
            api.patch("nodes", "worker-1", {"metadata": {"annotations": broken}})
            await api.wait_for(
                lambda: condition_true(api.get("machineconfigpools", "worker"), "Degraded"), 30
            )
            config = await cluster.create_machine_config("99-worker-files")
            await cluster.timeline.wait_for(
                lambda e: f"No build for MachineConfigPool worker, config {config}" in e.message
            )
            repaired = {STATE: "Done", REASON: ""}
            api.patch("nodes", "worker-1", {"metadata": {"annotations": repaired}})
            await cluster.machines["worker-1"].start()
            await cluster.wait_for(lambda: _done(cluster, config), timeout=120)
            asked = [d for d in agents.decisions if d.request == f"drain-{config}"]
            first = {d.node: d for d in reversed(asked)}
            assert sorted(first) == cluster.node_names, asked
            for decision in first.values():
                assert decision.outcome == "pass", asked
                assert "not held: pool worker was Degraded at" in decision.why, asked
            assert not [d for d in asked if d.outcome == "hold"], asked
        finally:
            cluster.reboot_hooks.clear()
            await agents.stop_all()
