"""The noop-image rule on every modelled MCO and both values of the cordon-skip z-stream switch
(D3: before July 2024, PRs 4495 and 4483, a cordoned node still gets new targets;
``NodeController.skips_unready``), with agents on the simulated MCO.

An admin cordons worker-0 before the change that brings a same-image target (4.15: the seed's
race; 4.16+: a revert to a config built before, D1, a real update on 4.18), and uncordons it
once the rest of the pool has moved. Whatever the switch: no hold is kept on the cordoned node
for its image (the node controller of the z-streams with the skip never retargets it, and the
rule cannot tell the z-stream), no hold ends only at --max-hold, and the pool finishes. Without
the skip the cordoned node is targeted, and its same-image drain is let go saying why (what MCO
alone does; mco-versions.md, "What ends a noop-image hold"). maxUnavailable is 2: with 1 the
cordoned node fills the pool's room and nothing is targeted in either z-stream. 4.17 is
``4.16`` here and 4.19 ``4.18`` (docs/mco-versions.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drain_guard_sim.actors.mco import (
    CURRENT_CONFIG,
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    STATE,
    McoVersion,
    annotations_of,
)
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.demoagents import HOLDING, Agents

MAX_HOLD = 2700.0
FACTOR = 0.01
CORDONED = "worker-0"


def _node_done(cluster: SimCluster, node: str, config: str) -> bool:
    ann = annotations_of(cluster.api.get("nodes", node))
    return (
        ann.get(CURRENT_CONFIG) == config
        and ann.get(STATE) == "Done"
        and ann.get(DESIRED_DRAIN) == ann.get(LAST_APPLIED_DRAIN) == f"uncordon-{config}"
    )


def _done(cluster: SimCluster, config: str) -> bool:
    return all(_node_done(cluster, n, config) for n in cluster.node_names)


def _cordon(cluster: SimCluster, cordoned: bool) -> None:
    """The admin's cordon (or its end), as ``oc adm cordon`` writes it."""
    spec = {"unschedulable": True if cordoned else None}
    cluster.api.patch("nodes", CORDONED, {"spec": spec})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("skips_unready", [True, False], ids=["skip", "no-skip"])
@pytest.mark.parametrize("version", list(McoVersion))
async def test_the_noop_rule_with_and_without_the_cordon_skip(
    tmp_path: Path, version: McoVersion, skips_unready: bool
) -> None:
    async with SimCluster(tmp_path, nodes=2, time_factor=FACTOR, version=version) as cluster:
        assert cluster.node_controller is not None
        cluster.node_controller.skips_unready = skips_unready
        # The switch shows only where maxUnavailable exceeds the cordoned nodes (PR 4475's
        # description): a cordoned node counts as unavailable, and with 1 it fills the pool's
        # room in both z-streams, which then waits for the admin.
        cluster.node_controller.max_unavailable = 2
        agents = Agents(cluster, tmp_path, MAX_HOLD)
        try:
            for node in cluster.node_names:
                await agents.start(node)
            cluster.reboot_hooks.append(agents.restart)
            other = [n for n in cluster.node_names if n != CORDONED]
            if version is McoVersion.V4_15:
                _cordon(cluster, True)
                seen = len(agents.decisions)
                target = await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
                await cluster.wait_build_done(timeout=120)
            else:
                first = await cluster.create_machine_config("99-worker-first")
                await cluster.wait_for(lambda: _done(cluster, first), timeout=120)
                second = await cluster.create_machine_config("99-worker-second")
                await cluster.wait_for(lambda: _done(cluster, second), timeout=120)
                _cordon(cluster, True)
                seen = len(agents.decisions)
                cluster.api.delete("machineconfigs", "99-worker-second")
                target = first
                await cluster.wait_for(
                    lambda: all(_node_done(cluster, n, first) for n in other), timeout=120
                )
            while_cordoned = agents.decisions[seen:]
            _cordon(cluster, False)
            await cluster.wait_for(lambda: _done(cluster, target), timeout=180)
        except TimeoutError as exc:
            raise AssertionError(cluster.timeline.format()) from exc
        finally:
            story = cluster.timeline.format()
            cluster.reboot_hooks.clear()
            await agents.stop_all()

    request = f"drain-{target}"
    on_cordoned = [d for d in while_cordoned if d.node == CORDONED and d.request == request]
    # No hold for the image on the cordoned node: only --max-hold would end it where the
    # z-stream has the skip.
    kept = [d for d in on_cordoned if d.outcome in HOLDING and "noop-image" in d.reasons]
    assert kept == [], on_cordoned
    # Without the skip the cordoned node is targeted while cordoned (on 4.15 and 4.16 with the
    # image it runs; on 4.18 with the old build's image); with it, not before the uncordon.
    assert bool(on_cordoned) == (not skips_unready), story
    # A same-image drain let go there says why (the cordon: the rule's "none").
    passes = [d for d in on_cordoned if d.outcome == "pass"]
    if version in (McoVersion.V4_15, McoVersion.V4_16_EARLY, McoVersion.V4_16):
        assert all("not held: the node is cordoned" in d.why for d in passes), passes
    assert [d for d in agents.decisions if d.outcome == "release:expired"] == []
