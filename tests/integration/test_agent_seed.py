"""The seed report's scenario in the simulated cluster, with one agent process per node, against
each simulated MCO version.

Without agents (the demo shows it), MCO 4.15 drains the build node for a layered update from
image X to the same X while the build pod runs there, and the build fails (BuildPodDeleted).
With agents: the build succeeds, the build node is not cordoned while the build runs, and no
node is drained for a desired image equal to its booted one. MCO 4.16+ never target a node
before the build is done: the agents hold nothing there, and must not get in the way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drain_guard_sim.actors.mco import (
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    LAST_APPLIED_DRAIN,
    MCC_USER,
    MCD_USER,
    REGISTRY_NAMESPACE,
    McoVersion,
    Timings,
    annotations_of,
)
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.outcome import BuildResult
from tests.helpers import reap, spawn
from tests.sim.helpers import CFG, REGISTRY_BUDGET

# MCO's seconds → simulated seconds (a 120 s build takes 6 s). The 4.15 MCC may cordon 2 to
# 3.5 s (here 0.1 to 0.18 s) after a request; the agent answers in milliseconds, and this keeps
# a margin on a loaded CI machine (the demo runs faster, at 0.04).
TIME_FACTOR = 0.05
#: MCO 4.15's drain controller syncs a node 5 MCO seconds after a Node update, which puts its
#: cordon 2 to 3.5 MCO seconds after the daemon's request: 0.1 to 0.18 s here, less than a
#: loaded machine (four test workers, load 10) gives the agent's process to read the request
#: and write its hold (measured: 2 of 4 runs lost, the build node cordoned, the build evicted
#: or the cordoned node never targeted again). At 20 MCO seconds the cordon comes 0.8 to 0.9 s
#: after the request, still less than half the real window; the short window itself is
#: test_short_window's.
SEED_TIMINGS = Timings(mcc_update_delay=20.0)


def _story(build: BuildResult, cluster: SimCluster, agents: list[AgentProcess]) -> str:
    """The build, the MCO actors' timeline and the agents' decisions."""
    decisions = [
        f"{r.get('time')} {r.get('node')} {r.get('outcome')} {r.get('reasons')}"
        for a in agents
        for r in a.records
        if "outcome" in r
    ]
    return "\n".join([str(build), cluster.timeline.format(), *decisions])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", list(McoVersion))
async def test_seed_scenario_with_agents(tmp_path: Path, version: McoVersion) -> None:
    agents: list[AgentProcess] = []
    async with SimCluster(
        tmp_path / "cluster",
        nodes=2,
        time_factor=TIME_FACTOR,
        timings=SEED_TIMINGS,
        version=version,
    ) as cluster:
        try:
            for node in cluster.node_names:
                await spawn(
                    node, cluster.agent_kubeconfig(node), cluster.hosts[node], started=agents
                )
            await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
            build = await cluster.wait_build_done(timeout=120)
            # A failed build can never roll out: say so now, with what happened, rather than
            # wait out the rollout's timeout (a CI run did, and said nothing more). (A node
            # the MCC cordoned for its X→X drain before the agent's hold is let go at once:
            # a cordoned node is never targeted again.)
            so_far = cluster.outcome()
            assert build.succeeded, _story(build, cluster, agents)
            assert [c for c in so_far.during_build() if c.node == build.node] == [], _story(
                build, cluster, agents
            )
            assert so_far.unchanged_image_cordons() == [], _story(build, cluster, agents)
            await cluster.wait_rollout_done(timeout=180)
        finally:
            for agent in agents:
                if agent.running:
                    assert await agent.stop() == 0
            await reap(agents)
        outcome = cluster.outcome()

    assert not outcome.build_pod_evicted()
    assert [c for c in outcome.during_build() if c.node == build.node] == []
    assert outcome.unchanged_image_cordons() == []
    holds = [r for a in agents for r in a.records if r.get("outcome") == "hold"]
    if version is McoVersion.V4_15:
        # What was held, and why: the stale X→X update on the build node, while the build ran.
        assert holds
        assert all("noop-image" in r["reasons"] for r in holds)
        # The build pod joins the build node's hold when it appears: at the first hold, or
        # by an update of it (whichever the scheduling of the build pod allowed).
        held = [r for a in agents for r in a.records if r.get("outcome") in ("hold", "update-hold")]
        assert any("build-pod" in r["reasons"] and r["node"] == build.node for r in held)
    else:
        assert holds == []
    # The drains that did happen came after the build, each for a new image.
    assert outcome.cordons
    assert all(c.t > build.finished for c in outcome.cordons)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", [McoVersion.V4_18_EARLY, McoVersion.V4_18])
async def test_the_4_18_daemon_asks_to_drain_for_its_image_and_the_agent_holds(
    tmp_path: Path, version: McoVersion
) -> None:
    """4.18's daemon drains for an equal image whenever such a target reaches it; only the
    node controller's MachineOSBuildIsCurrent (the latest z-stream's) keeps it away. Passed
    by (the target written as an earlier z-stream's node controller could, while the pool's
    new config is still to be built), drain-guard holds the request (noop-image: a new image
    will come) and the node is not cordoned."""
    agents: list[AgentProcess] = []
    async with SimCluster(
        tmp_path / "cluster",
        nodes=2,
        time_factor=TIME_FACTOR,
        node_controller=False,
        version=version,
    ) as cluster:
        api = cluster.api
        try:
            agent = await spawn(
                "worker-1",
                cluster.agent_kubeconfig("worker-1"),
                cluster.hosts["worker-1"],
                started=agents,
            )
            rv = api.resource_version
            # The pool moves to the new config, whose build is to come.
            pool = {"spec": {"configuration": {"name": CFG}}}
            api.patch("machineconfigpools", "worker", pool, patch_type="merge")
            api.patch("nodes", "worker-1", {"metadata": {"annotations": {DESIRED_CONFIG: CFG}}})
            request = await api.wait_for_write(
                lambda r: (
                    r.user == MCD_USER
                    and annotations_of(r.after or {}).get(DESIRED_DRAIN) == f"drain-{CFG}"
                ),
                since=rv,
                timeout=30,
            )
            assert annotations_of(request.after or {})[DESIRED_IMAGE] == cluster.initial_image
            record = await agent.wait_log(lambda r: r.get("outcome") == "hold", timeout=30)
            assert record["reasons"] == ["noop-image"]
            await api.wait_for(
                lambda: (
                    annotations_of(api.get("nodes", "worker-1"))[DESIRED_DRAIN] != f"drain-{CFG}"
                ),
                timeout=10,
            )
            # The MCC has read the held request (it refuses its verb) and not cordoned.
            async with asyncio.timeout(30):
                await cluster.timeline.wait_for(
                    lambda e: e.node == "worker-1" and "non-recognized drain verb" in e.message
                )
            assert not api.get("nodes", "worker-1")["spec"].get("unschedulable")
            assert cluster.cordons() == []
            assert await agent.stop() == 0
        finally:
            await reap(agents)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("version", list(McoVersion))
async def test_a_same_image_drain_the_mcc_cordoned_first_is_let_go(
    tmp_path: Path, version: McoVersion
) -> None:
    """The MCC cordoned the node for an X→X request before the agent saw it (the race lost),
    and its first drain attempt failed (the registry's budget). MCO's node controller gives a
    cordoned node no new target, in every version, so a noop-image hold could end only at
    --max-hold, the node cordoned, its pool waiting and the same drain after it: the agent
    does not hold, and the MCC's next attempt drains the node, which reboots."""
    agents: list[AgentProcess] = []
    async with SimCluster(
        tmp_path / "cluster",
        nodes=2,
        time_factor=TIME_FACTOR,
        node_controller=False,
        version=version,
    ) as cluster:
        api = cluster.api
        try:
            api.create("poddisruptionbudgets", REGISTRY_BUDGET)
            rv = api.resource_version
            # The node controller's target: a new config, the image the node runs (X→X).
            api.patch("nodes", "worker-0", {"metadata": {"annotations": {DESIRED_CONFIG: CFG}}})
            await api.wait_for_write(
                lambda r: (
                    r.user == MCC_USER
                    and r.name == "worker-0"
                    and bool(((r.after or {}).get("spec") or {}).get("unschedulable"))
                ),
                since=rv,
                timeout=30,
            )
            assert annotations_of(api.get("nodes", "worker-0"))[DESIRED_DRAIN] == f"drain-{CFG}"
            agent = await spawn(
                "worker-0",
                cluster.agent_kubeconfig("worker-0"),
                cluster.hosts["worker-0"],
                started=agents,
            )
            record = await agent.wait_log(lambda r: r.get("request") == f"drain-{CFG}")
            assert record["outcome"] == "pass", record
            async with asyncio.timeout(60):
                await cluster.timeline.wait_for(
                    lambda e: e.node == "worker-0" and "Drain failed" in e.message
                )
            api.delete("poddisruptionbudgets", "image-registry", REGISTRY_NAMESPACE)
            await api.wait_for(
                lambda: (
                    annotations_of(api.get("nodes", "worker-0")).get(LAST_APPLIED_DRAIN)
                    == f"drain-{CFG}"
                ),
                timeout=60,
            )
            await api.wait_for(lambda: cluster.machines["worker-0"].reboots == 1, timeout=60)
            assert not [
                r
                for r in api.writes("nodes", name="worker-0")
                if annotations_of(r.after or {}).get(DESIRED_DRAIN, "").startswith("hold-")
            ]
            assert await agent.stop() == 0
        finally:
            await reap(agents)
