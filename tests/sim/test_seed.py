"""The seed bug report, reproduced with no agent: a MachineConfig leads to a pointless drain of
the node running the build pod, whose eviction fails the build with ``BuildPodDeleted``.

Every step is read from the simulator (the write log, the stored objects) and the shared
timeline, not from the actors' own bookkeeping.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from drain_guard_sim.actors.mco import (
    BUILDER_USER,
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    LAST_APPLIED_DRAIN,
    MCC_USER,
    MCD_USER,
    MCO_NAMESPACE,
    annotations_of,
    condition_true,
)
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.harness.cluster import SimCluster


async def test_seed_drain_evicts_build_pod_and_fails_build(tmp_path: Path) -> None:
    # The race lost as in the seed (create_machine_config's lose_build_race: a slow build start
    # and a node-controller sync queued by another controller's label write); 0.05: each end
    # of the race is 2 MCO seconds (0.1 s) away from the node controller's sync.
    async with SimCluster(tmp_path, time_factor=0.05) as cluster:
        api = cluster.api
        x = cluster.initial_image
        start_rv = api.resource_version
        rendered = await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
        build = await cluster.wait_build_done(timeout=60)

        # The build ran on worker-0 (the seed's node) and ended Error (BuildPodDeleted).
        stored = api.get("builds", build.name, MCO_NAMESPACE)
        assert stored["status"]["phase"] == "Error"
        assert stored["status"]["reason"] == "BuildPodDeleted"
        assert build.name == f"build-{rendered}"
        [pod_create] = [
            r
            for r in api.writes("pods", name=f"{build.name}-build", verb="create")
            if not r.subresource
        ]
        assert pod_create.after is not None
        assert pod_create.after["spec"]["nodeName"] == "worker-0"

        # The node controller gave worker-0 the new config while desiredImage still named X:
        # after the render's write, before the build controller marked the build pending.
        targeted = [
            r
            for r in api.writes("nodes", name="worker-0", user=MCC_USER, since=start_rv)
            if annotations_of(r.after or {}).get(DESIRED_CONFIG) == rendered
        ]
        assert targeted
        assert annotations_of(targeted[0].after or {})[DESIRED_IMAGE] == x
        [render] = [
            r
            for r in api.writes("machineconfigpools", name="worker", user=MCC_USER, since=start_rv)
            if (r.after or {}).get("spec", {}).get("configuration", {}).get("name") == rendered
            and (r.before or {}).get("spec", {}).get("configuration", {}).get("name") != rendered
        ]
        pending = next(
            r
            for r in api.writes("machineconfigpools", name="worker", user=BUILDER_USER)
            if condition_true(r.after or {}, "BuildPending")
        )
        assert render.rv < targeted[0].rv < pending.rv

        # The MCD planned a transition from X to the same X and requested a drain.
        transition = cluster.timeline.select(
            actor="machine-config-daemon", node="worker-0", contains="Starting transition"
        )
        assert [e.message for e in transition] == [f'Starting transition from "{x}" to "{x}"']
        [request] = [
            r
            for r in api.writes("nodes", name="worker-0", user=MCD_USER, since=start_rv)
            if annotations_of(r.after or {}).get(DESIRED_DRAIN) == f"drain-{rendered}"
            and annotations_of(r.before or {}).get(DESIRED_DRAIN) != f"drain-{rendered}"
        ]
        assert request.verb == "patch"

        # The MCC cordoned worker-0 while the build pod was there (Pending or Running: its
        # start races the cordon, by about a second of MCO time), then evicted it.
        [cordon] = cluster.cordons()
        assert cordon.node == "worker-0"
        assert cordon.unchanged_image
        cordon_rv = next(
            r.rv
            for r in api.writes("nodes", name="worker-0", user=MCC_USER)
            if (r.after or {}).get("spec", {}).get("unschedulable")
        )
        assert request.rv < cordon_rv
        assert pod_create.rv < cordon_rv
        [eviction] = [
            r
            for r in api.writes("pods", name=f"{build.name}-build", user=MCC_USER)
            if r.subresource == "eviction"
        ]
        assert eviction.rv > cordon_rv
        assert api.try_get("pods", f"{build.name}-build", MCO_NAMESPACE) is None
        evicted = {p for _, node, p in cluster.evictions() if node == "worker-0"}
        assert f"{MCO_NAMESPACE}/{build.name}-build" in evicted
        assert any(p.startswith(f"{MCO_NAMESPACE}/machine-os-builder-") for p in evicted)
        assert any(p.startswith("openshift-image-registry/image-registry-") for p in evicted)
        assert not any("/node-exporter-" in p for p in evicted)  # DaemonSet pods stay

        # The MCC completed the drain it was asked for: lastAppliedDrain = drain-<rendered>.
        assert await api.wait_for(
            lambda: (
                annotations_of(api.get("nodes", "worker-0")).get(LAST_APPLIED_DRAIN)
                == f"drain-{rendered}"
            ),
            timeout=10,
        )

        # The build controller logs the failure after its status write returns, which the
        # wait for the build above already saw: on a loaded machine the line comes later.
        async with asyncio.timeout(10):
            await cluster.timeline.wait_for(
                lambda e: e.actor == "build-controller" and "Error (BuildPodDeleted)" in e.message
            )

        # The seed's log lines, in the seed's order.
        wanted = [
            ("machine-config-daemon", "Performing layered OS update"),
            ("machine-config-daemon", "Starting transition from"),
            ("machine-config-daemon", "Update prepared; requesting cordon and drain"),
            ("machine-config-controller", "cordoning"),
            ("machine-config-controller", "initiating cordon (currently schedulable: true)"),
            ("machine-config-controller", "cordon succeeded (currently schedulable: false)"),
            ("machine-config-controller", "initiating drain"),
            ("machine-config-controller", "WARNING: ignoring DaemonSet-managed Pods: "),
            ("machine-config-controller", f"evicting pod {MCO_NAMESPACE}/{build.name}-build"),
            ("build-controller", "Error (BuildPodDeleted)"),
        ]
        assert_in_order(cluster.timeline, wanted)


def assert_in_order(timeline: Timeline, wanted: list[tuple[str, str]]) -> None:
    """Each (actor, text) appears in the timeline after the previous one."""
    entries = timeline.entries
    position = 0
    for actor, text in wanted:
        found = [
            i
            for i in range(position, len(entries))
            if entries[i].actor == actor and text in entries[i].message
        ]
        assert found, f"{actor}: {text!r} not found after entry {position}:\n{timeline.format()}"
        position = found[0] + 1
