"""A second rollout is done only once every node runs its own config and image: right after
its MachineConfig is created, the pool may still name the first rollout's render, which
every node already runs (the chaos settle once passed on that)."""

from __future__ import annotations

from pathlib import Path

from drain_guard_sim.actors.build import built_image
from drain_guard_sim.actors.mco import CURRENT_CONFIG, CURRENT_IMAGE, McoVersion, annotations_of
from drain_guard_sim.harness.cluster import SimCluster


async def test_a_second_rollout_is_not_done_on_the_first_rollouts_target(tmp_path: Path) -> None:
    async with SimCluster(tmp_path, nodes=2, time_factor=0.002, version=McoVersion.V4_16) as c:
        first = await c.create_machine_config("99-worker-first")
        await c.wait_rollout_done(timeout=60, config=first)
        second = await c.create_machine_config("99-worker-second")
        assert second != first
        assert not c.rollout_done(second)
        await c.wait_rollout_done(timeout=60, config=second)
        for node in c.node_names:
            ann = annotations_of(c.api.get("nodes", node))
            assert (ann[CURRENT_CONFIG], ann[CURRENT_IMAGE]) == (second, built_image(second))
