"""The seed scenario, whole, on either server with the same code: a MachineConfig starts a build,
MCO 4.15's node controller gives the build's node the new config with the old image, its daemon
asks for a drain for the same image, the drain controller drains.

Without drain-guard the eviction API takes the build pod and the build ends in Error
(BuildPodDeleted); with an agent per node the drain is held while the build runs, the build
completes, and no node is drained while its desired image is its booted one. ``[real]`` plays
it on kube-apiserver and kube-controller-manager (``RealCluster``), ``[sim]`` on the simulator
(``SimCluster``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from drain_guard.settings.hold import default_max_hold
from drain_guard_sim.actors.mco import MCO_NAMESPACE, McoVersion, Timings
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.demoagents import Agents
from drain_guard_sim.harness.realcluster import RealCluster
from tests.controlplane.helpers import unique

#: MCO seconds are a tenth of a second: the race's two margins (2 MCO s) are 0.2 s of real time
#: on a real API server; a 10 s reboot and a 30 s build keep the run short.
TIME_FACTOR = 0.1
TIMINGS = Timings(reboot=10.0, build_duration=30.0)
WAIT = 120.0  # seconds: the whole scenario, on a loaded machine

Harness = Callable[..., contextlib.AbstractAsyncContextManager[Any]]


@pytest.fixture(params=["sim", pytest.param("real", marks=pytest.mark.controlplane)])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    """The cluster the scenario plays on: ``SimCluster`` or ``RealCluster``, same arguments."""
    if request.param == "sim":
        return lambda **kw: SimCluster(tmp_path, **kw)
    plane = request.getfixturevalue("control_plane")
    return lambda **kw: RealCluster(plane, tmp_path, pool=unique("seed"), **kw)


@contextlib.asynccontextmanager
async def agents_on(cluster: Any, logdir: Path) -> AsyncIterator[Agents]:
    """One drain-guard agent per node, restarted by its node's reboot."""
    agents = Agents(cluster, logdir, default_max_hold().total_seconds())
    try:
        for node in cluster.node_names:
            await agents.start(node)
        cluster.reboot_hooks.append(agents.restart)
        yield agents
    finally:
        cluster.reboot_hooks.clear()
        await agents.stop_all()


async def test_without_drain_guard_the_drain_evicts_the_build_pod(
    harness: Harness, tmp_path: Path
) -> None:
    async with harness(nodes=2, time_factor=TIME_FACTOR, timings=TIMINGS) as cluster:
        rendered = await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
        build = await cluster.wait_build_done(timeout=WAIT)
        assert build.name == f"build-{rendered}"
        story = f"{build}\n{cluster.timeline.format()}"
        assert (build.phase, build.reason) == ("Error", "BuildPodDeleted"), story
        outcome = cluster.outcome()
        # The build's node was cordoned during the build, for its booted image.
        [cordon] = outcome.during_build()
        assert cordon.node == cluster.build_node
        assert cordon.unchanged_image
        assert cordon.update is not None
        assert cordon.update.same_image
        # The build pod went through the eviction API (the drain controller records it once
        # it is gone, which may be after the build controller saw it go).
        build_pod = f"{MCO_NAMESPACE}/{build.name}-build"
        async with asyncio.timeout(WAIT):
            await cluster.timeline.wait_for(lambda e: e.message == f"Evicted pod {build_pod}")
        evicted = {pod for _, node, pod in cluster.evictions() if node == cluster.build_node}
        assert build_pod in evicted


# On the simulator, the same run is the demo's second (tests/integration/test_demo.py).
@pytest.mark.parametrize(
    "harness", [pytest.param("real", marks=pytest.mark.controlplane)], indirect=True
)
async def test_with_drain_guard_the_build_completes_and_no_pointless_drain(
    harness: Harness, tmp_path: Path
) -> None:
    async with harness(nodes=2, time_factor=TIME_FACTOR, timings=TIMINGS) as cluster:
        async with agents_on(cluster, tmp_path) as agents:
            await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
            build = await cluster.wait_build_done(timeout=WAIT)
            assert (build.phase, build.reason) == ("Complete", "")
            await cluster.wait_rollout_done(timeout=WAIT)
        outcome = cluster.outcome()
        assert outcome.during_build() == []
        assert outcome.unchanged_image_cordons() == []
        assert not outcome.build_pod_evicted()
        # The agent on the build's node held the same-image drain while the build ran.
        assert "build-pod" in agents.holds()[cluster.build_node]


@pytest.mark.parametrize(
    "harness", [pytest.param("real", marks=pytest.mark.controlplane)], indirect=True
)
@pytest.mark.parametrize("version", [McoVersion.V4_16, McoVersion.V4_18], ids=str)
async def test_a_later_mco_targets_no_node_before_its_build_succeeds(
    harness: Harness, version: McoVersion
) -> None:
    """4.16's build pod and 4.18's build Job (a valid Job: the real server validates it) on the
    real server: the build completes, and the first drain comes after it, for the new image."""
    async with harness(nodes=2, time_factor=TIME_FACTOR, timings=TIMINGS, version=version) as c:
        await c.create_machine_config("99-worker-seed")
        build = await c.wait_build_done(timeout=WAIT)
        assert (build.phase, build.reason) == ("Complete", "")
        [first, *_] = await c.wait_for(c.cordons, timeout=WAIT)
        assert first.t > build.finished
        assert not first.unchanged_image
