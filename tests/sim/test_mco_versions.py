"""Where MCO 4.15, 4.16/4.17 and 4.18 differ, and where the simulated MCO used to differ from
them (docs/mco-versions.md): one test per difference, read from the write log and timeline.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from drain_guard_sim.actors.build import built_image, is_build_pod
from drain_guard_sim.actors.candidates import node_changed, rollout_targets
from drain_guard_sim.actors.machineos import (
    CURRENT_BUILD_ANNOTATION,
    build_name,
    build_state,
    image_field,
)
from drain_guard_sim.actors.mco import (
    BUILDER_USER,
    CURRENT_CONFIG,
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    LAST_APPLIED_DRAIN,
    MCC_USER,
    MCD_USER,
    MCO_NAMESPACE,
    POOL_IMAGE,
    REASON,
    STATE,
    McoVersion,
    Timings,
    annotations_of,
    condition_true,
)
from drain_guard_sim.actors.nodecontroller import UPDATE_IN_PROGRESS
from drain_guard_sim.apiserver.server import WriteRecord
from drain_guard_sim.harness.cluster import SimCluster
from tests.sim.helpers import CFG, REGISTRY_BUDGET, ann, request_and_hold, set_ann, wrote_drain

MCD = "machine-config-daemon"


def cordoned(rec: WriteRecord) -> bool:
    before = ((rec.before or {}).get("spec") or {}).get("unschedulable", False)
    after = ((rec.after or {}).get("spec") or {}).get("unschedulable", False)
    return bool(after and not before)


@pytest.mark.parametrize(
    ("version", "window"),
    [
        (McoVersion.V4_15, "short"),
        (McoVersion.V4_16_EARLY, "short"),
        (McoVersion.V4_16, "5s"),
        (McoVersion.V4_18_EARLY, "5s"),
        (McoVersion.V4_18, "5s"),
    ],
)
async def test_request_to_cordon_window(tmp_path: Path, version: McoVersion, window: str) -> None:
    """4.15 and 4.16 before PR 4484: the MCC's 5 s start at the node controller's write (no
    other Node writer here) and the MCD asks 1.5-3 s later (rate limiter, drift check), so
    the cordon follows the request by 2-3.5 s; later versions queue the node only when
    desiredDrain changes: 5 s from the request.

    The short window's sync comes 2 MCO s after the request: its informer must have the
    request by then, or it finds nothing to do and the request's own event queues the cordon
    5 s later. At 0.1 that was 0.2 s real, less than a loaded machine's watch delivery at
    times (one run in about fifteen at -n 4 saw the cordon 5.0 s after the request); 0.25
    gives 0.5 s. The 5 s cases can only come later under load, never sooner."""
    factor = 0.25 if window == "short" else 0.1
    timings = Timings(mcd_drift_check=(2.0, 2.0))
    async with SimCluster(
        tmp_path,
        nodes=2,
        time_factor=factor,
        timings=timings,
        node_controller=False,
        version=version,
    ) as cluster:
        api = cluster.api
        rv = api.resource_version
        # As the node controller would (a new image: 4.18 does not drain for an equal one).
        new = {DESIRED_CONFIG: CFG, DESIRED_IMAGE: cluster.initial_image[:-4] + "beef"}
        api.patch("nodes", "worker-1", {"metadata": {"annotations": new}})
        [target] = api.writes("nodes", name="worker-1", since=rv)
        request = await api.wait_for_write(wrote_drain(f"drain-{CFG}", "worker-1"), since=rv)
        cordon = await api.wait_for_write(
            lambda r: r.user == MCC_USER and r.name == "worker-1" and cordoned(r), since=rv
        )
        assert (request.time - target.time) / factor >= 3.0  # 1 s limiter + 2 s drift check
        assert (cordon.time - target.time) / factor >= 5.0
        if window == "short":
            assert (cordon.time - request.time) / factor < 4.5
        else:
            assert (cordon.time - request.time) / factor >= 5.0
        assert cluster.timeline.select(actor=MCD, contains="Preflight config drift check")


async def test_a_failed_first_run_writes_its_drain_again_over_a_hold(tmp_path: Path) -> None:
    """booting is cleared only after checkStateOnFirstRun succeeds: after the 1 h drain
    timeout in a first run, the MCD runs it again and re-writes drain-<config> over the hold.

    The registry's budget keeps the drain from ever completing, whenever the MCC reads the
    request: the hold below is written some milliseconds after the daemon's request (several
    MCO seconds at this time factor), and the MCC, retrying the ``hold`` verb rate-limited
    every few microseconds, sometimes drained in between, wrote ``lastAppliedDrain``, and the
    daemon's second first run then skipped its drain ("already completed")."""
    timings = Timings(mcc_update_delay=100)
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.001, timings=timings, node_controller=False
    ) as cluster:
        api = cluster.api
        api.create("poddisruptionbudgets", REGISTRY_BUDGET)  # worker-0 runs the registry
        await request_and_hold(cluster, "worker-0", CFG)
        rv = api.resource_version
        cluster.restart_mcd("worker-0")  # the new daemon's first run asks again: hold it again
        await api.wait_for_write(wrote_drain(f"drain-{CFG}"), since=rv, timeout=20)
        set_ann(cluster, "worker-0", desired_drain=f"hold-drain-{CFG}")
        # From here the daemon's only drain request is the one after its failed first run.
        rv = api.resource_version
        async with asyncio.timeout(30):
            await cluster.timeline.wait_for(
                lambda e: (
                    e.node == "worker-0" and "Marking Degraded due to: failed to drain" in e.message
                )
            )
        again = await api.wait_for_write(wrote_drain(f"drain-{CFG}"), since=rv, timeout=20)
        assert annotations_of(again.before or {})[DESIRED_DRAIN] == f"hold-drain-{CFG}"
        assert ann(cluster, "worker-0").get(LAST_APPLIED_DRAIN) != f"drain-{CFG}"


async def test_an_update_starts_when_config_and_image_are_equal_but_not_done(
    tmp_path: Path,
) -> None:
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, node_controller=False) as cluster:
        api = cluster.api
        config = ann(cluster, "worker-1")[CURRENT_CONFIG]
        rv = api.resource_version
        api.patch("nodes", "worker-1", {"metadata": {"annotations": {STATE: "Degraded"}}})
        await api.wait_for_write(wrote_drain(f"drain-{config}", "worker-1"), since=rv, timeout=20)
        assert cluster.timeline.select(actor=MCD, node="worker-1", contains="but state is Degraded")


@pytest.mark.parametrize(
    ("version", "degraded"), [(McoVersion.V4_15, True), (McoVersion.V4_16, False)]
)
async def test_kernel_arguments_on_the_layered_path(
    tmp_path: Path, version: McoVersion, degraded: bool
) -> None:
    """4.15's layered update never applies kernel arguments, so the boot-time validation
    fails; 4.16 applies them."""
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.01, node_controller=False, version=version
    ) as cluster:
        api = cluster.api
        api.create(
            "machineconfigs",
            {
                "apiVersion": "machineconfiguration.openshift.io/v1",
                "kind": "MachineConfig",
                "metadata": {"name": CFG},
                "spec": {
                    "config": {"ignition": {"version": "3.4.0"}},
                    "kernelArguments": ["nosmt"],
                },
            },
        )
        set_ann(cluster, "worker-1", desired_config=CFG)
        await api.wait_for(lambda: cluster.machines["worker-1"].reboots == 1, timeout=30)
        want = "Degraded" if degraded else "Done"
        await api.wait_for(lambda: ann(cluster, "worker-1").get(STATE) == want, timeout=30)
        reason = ann(cluster, "worker-1").get("machineconfiguration.openshift.io/reason", "")
        if degraded:
            assert "missing expected kernel arguments: [nosmt]" in reason
        else:
            assert "nosmt" in cluster.hosts["worker-1"].kernel_args.split()
            assert ann(cluster, "worker-1")[CURRENT_CONFIG] == CFG


async def test_a_graceful_delete_mid_update_waits_for_the_grace_period(tmp_path: Path) -> None:
    timings = Timings(mcc_update_delay=1000)
    factor = 0.005
    async with SimCluster(
        tmp_path, nodes=2, time_factor=factor, timings=timings, node_controller=False
    ) as cluster:
        await request_and_hold(cluster, "worker-0", CFG)
        deleted = cluster.timeline.add("test", "worker-0", "oc delete pod (SIGTERM)")
        cluster.restart_mcd("worker-0", graceful=True)
        async with asyncio.timeout(30):
            restarted = await cluster.timeline.wait_for(
                lambda e: e.node == "worker-0" and "daemon pod restarted" in e.message
            )
        assert (restarted.t - deleted.t) / factor >= 600
        assert cluster.timeline.select(actor=MCD, contains="SIGTERM ignored mid-update")


def _node(name: str, *, desired: str, current: str, state: str, image: str = "x") -> Any:
    return {
        "metadata": {
            "name": name,
            "annotations": {
                DESIRED_CONFIG: desired,
                CURRENT_CONFIG: current,
                "machineconfiguration.openshift.io/desiredImage": image,
                STATE: state,
            },
        },
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_node_failing_to_reach_the_target_keeps_the_capacity_at_zero() -> None:
    nodes = [
        _node("worker-0", desired="new", current="old", state="Degraded"),
        _node("worker-1", desired="old", current="old", state="Done"),
    ]
    assert rollout_targets(nodes, "new", "x", 1) == []
    # Degraded in its desired config (current == desired): unavailable, not a candidate.
    nodes[0] = _node("worker-0", desired="old", current="old", state="Degraded")
    assert rollout_targets(nodes, "new", "x", 1) == []
    nodes[0] = _node("worker-0", desired="old", current="old", state="Done")
    assert [n["metadata"]["name"] for n in rollout_targets(nodes, "new", "x", 1)] == ["worker-0"]


def test_a_cordon_and_an_uncordon_queue_the_pool() -> None:
    """updateNode queues the pool when checkNodeReady's answer changes, and a cordoned node is
    not ready to it (every version since 2019): an uncordon (the MCC's after a reboot, an
    admin's) lets the rollout go on with no other event. The simulator missed it: a node
    repaired while the daemon rebooted it (its state already Done) stalled the pool."""
    node = _node("worker-0", desired="old", current="old", state="Done")
    cordoned = {**node, "spec": {"unschedulable": True}}
    assert node_changed(cordoned, node)
    assert node_changed(node, cordoned)
    assert not node_changed(node, {**node, "status": {"conditions": []}})


@pytest.mark.parametrize("version", [McoVersion.V4_18_EARLY, McoVersion.V4_18])
async def test_4_18_drains_and_reboots_for_an_equal_image(
    tmp_path: Path, version: McoVersion
) -> None:
    """updateOnClusterLayering drains unconditionally and always reboots; "Already in desired
    image" only skips the rebase. With the node controller's check passed by (here: no node
    controller, the target written by hand), the 4.18 daemon asks for a drain to its image."""
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.01, node_controller=False, version=version
    ) as cluster:
        api = cluster.api
        rv = api.resource_version
        set_ann(cluster, "worker-1", desired_config=CFG)
        await api.wait_for_write(wrote_drain(f"drain-{CFG}", "worker-1"), since=rv, timeout=20)
        await api.wait_for(lambda: ann(cluster, "worker-1").get(CURRENT_CONFIG) == CFG, timeout=30)
        assert cluster.machines["worker-1"].reboots == 1
        assert ann(cluster, "worker-1")[STATE] == "Done"
        assert cluster.timeline.select(actor=MCD, node="worker-1", contains="Image pullspecs equal")
        [cordon] = [c for c in cluster.cordons() if c.node == "worker-1"]
        assert cordon.unchanged_image


@pytest.mark.parametrize(
    ("version", "lose_build_race"),
    [(McoVersion.V4_15, True), (McoVersion.V4_15, False), (McoVersion.V4_16, True)],
)
async def test_targets_during_the_build(
    tmp_path: Path, version: McoVersion, lose_build_race: bool
) -> None:
    """4.15 targets the first node with the old image when the node controller syncs between
    the render and the build's BuildPending (the race lost, as in the seed), then waits;
    when the race is won, or on 4.16+, no node is targeted before the build succeeded and
    no node is drained for the image it runs."""
    # 0.05: each end of the lost race is 2 MCO seconds (0.1 s) away from the node controller.
    # The race won needs the build controller's four writes (two ConfigMaps, the Build, the
    # pool's BuildPending) before the node controller's sync, 5 MCO seconds after the render:
    # win_build_races has the node controller wait for the BuildPending (a loaded machine once
    # took longer than 1 s for the four writes).
    async with SimCluster(tmp_path, time_factor=0.05, version=version) as cluster:
        if not lose_build_race:
            cluster.win_build_races()
        api = cluster.api
        rv = api.resource_version
        rendered = await cluster.create_machine_config(
            "99-worker-files", lose_build_race=lose_build_race
        )
        build = await cluster.wait_build_done(timeout=60)

        def targeted() -> list[WriteRecord]:
            return [
                r
                for r in api.writes("nodes", user=MCC_USER, since=rv)
                if annotations_of(r.after or {}).get(DESIRED_CONFIG) == rendered
                and annotations_of(r.before or {}).get(DESIRED_CONFIG) != rendered
            ]

        during = [
            r.name for r in targeted() if cluster.timeline.since_start(r.time) <= build.finished
        ]
        if version is McoVersion.V4_15 and lose_build_race:
            assert during == ["worker-0"]
            return
        assert during == []
        assert build.succeeded
        assert cluster.cordons() == []
        await cluster.wait_rollout_done(timeout=60)
        images = {annotations_of(r.after or {})[DESIRED_IMAGE] for r in targeted()}
        assert images
        assert cluster.initial_image not in images
        assert not [c for c in cluster.cordons() if c.unchanged_image]
        # Its syncs during the build waited for it (pending, or running once its pod started).
        assert cluster.timeline.select(actor="node-controller", contains="Requeueing layered pool")


async def test_4_18_recordons_a_node_uncordoned_during_its_drain(tmp_path: Path) -> None:
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.002, node_controller=False, version=McoVersion.V4_18
    ) as cluster:
        api = cluster.api
        api.create("poddisruptionbudgets", REGISTRY_BUDGET)
        set_ann(cluster, "worker-0", desired_drain="drain-" + CFG)
        async with asyncio.timeout(20):
            await cluster.timeline.wait_for(lambda e: "Drain failed. Waiting 1 minute" in e.message)
        api.patch("nodes", "worker-0", {"spec": {"unschedulable": None}})
        async with asyncio.timeout(20):
            await cluster.timeline.wait_for(
                lambda e: "External actor has unexpectedly uncordoned node worker-0" in e.message
            )
        await api.wait_for(lambda: api.get("nodes", "worker-0")["spec"].get("unschedulable"), 10)
        assert ann(cluster, "worker-0").get(LAST_APPLIED_DRAIN) != "drain-" + CFG


async def test_4_18_retries_an_evicted_build_pod(tmp_path: Path) -> None:
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.01, node_controller=False, version=McoVersion.V4_18
    ) as cluster:
        api = cluster.api
        api.patch(
            "machineconfigpools",
            "worker",
            {"spec": {"configuration": {"name": CFG}}},
            patch_type="merge",
        )
        first = await api.wait_for(lambda: cluster.build_pods(), timeout=20)
        pod = first[0]
        job = f"build-{build_name(McoVersion.V4_18, 'worker', CFG, 'worker')}"
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == job
        assert [(o["kind"], o["name"]) for o in pod["metadata"]["ownerReferences"]] == [
            ("Job", job)
        ]
        assert api.get("jobs", job, MCO_NAMESPACE)["spec"]["backoffLimit"] == 3
        api.delete("pods", pod["metadata"]["name"], MCO_NAMESPACE)  # as an eviction would
        build = await cluster.wait_build_done(timeout=30)
        assert build.succeeded, build
        pods = {r.name for r in api.writes("pods", verb="create") if is_build_pod(r.after or {})}
        assert len(pods) == 2
        assert not [r for r in api.writes("nodes", user=MCD_USER) if cordoned(r)]


def _desired(cluster: SimCluster) -> dict[str, tuple[str | None, str | None]]:
    return {
        n: (ann(cluster, n).get(DESIRED_CONFIG), ann(cluster, n).get(DESIRED_IMAGE))
        for n in cluster.node_names
    }


def _builds_created(cluster: SimCluster, since: int) -> list[str]:
    """The builds (4.15's Builds, 4.16+'s MachineOSBuilds) created from ``since`` on."""
    return [r.name for r in cluster.api.writes(cluster.build_resource, verb="create", since=since)]


@pytest.mark.parametrize(
    "version", [McoVersion.V4_16_EARLY, McoVersion.V4_16, McoVersion.V4_18_EARLY, McoVersion.V4_18]
)
async def test_a_revert_to_a_built_config(tmp_path: Path, version: McoVersion) -> None:
    """D1: deleting the MachineConfig of the last rollout sends the pool back to a rendered
    config whose MachineOSBuild exists. 4.16/4.17 start no build (canPoolBuild) and the node
    controller goes on with that old build and the image the pool has: every node is
    targeted old config + the image it runs (X→X), drained and rebooted for it, and nothing
    retargets it. 4.18 reuses the build: the pool's image is the old build's, a real update."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, version=version) as cluster:
        api = cluster.api
        first = await cluster.create_machine_config("99-worker-first")
        await cluster.wait_rollout_done(timeout=60, config=first)
        second = await cluster.create_machine_config("99-worker-second")
        await cluster.wait_rollout_done(timeout=60, config=second)
        rv = api.resource_version
        t0 = cluster.timeline.since_start(time.monotonic())
        api.delete("machineconfigs", "99-worker-second")

        def back_on_first() -> bool:
            return all(
                ann(cluster, n).get(CURRENT_CONFIG) == first and ann(cluster, n)[STATE] == "Done"
                for n in cluster.node_names
            )

        await cluster.wait_for(back_on_first, timeout=60)
        assert _builds_created(cluster, rv) == []
        reverts = [c for c in cluster.cordons() if c.t >= t0]
        assert {c.desired_drain for c in reverts} == {f"drain-{first}"}
        assert sorted(c.node for c in reverts) == cluster.node_names
        if version.job_builds:
            reverted = (first, built_image(first))
            assert _desired(cluster) == dict.fromkeys(cluster.node_names, reverted)
            assert not [c for c in reverts if c.unchanged_image]
        else:
            assert _desired(cluster) == {
                n: (first, built_image(second)) for n in cluster.node_names
            }
            assert all(c.unchanged_image for c in reverts)
            assert all(cluster.machines[n].reboots == 3 for n in cluster.node_names)


async def test_4_15_a_machine_config_created_during_a_build_leaves_the_pool_building(
    tmp_path: Path,
) -> None:
    """D6: 4.15's canPoolBuild starts no build while one is pending or running, and when the
    running one completes, FinalPullspec looks for the build of the pool's newer config,
    which does not exist: the pool stays Building, its image the old one, for good."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01) as cluster:
        cluster.win_build_races()
        api = cluster.api
        await cluster.create_machine_config("99-worker-first")
        await api.wait_for(lambda: cluster.build_pods(), timeout=30)
        second = await cluster.create_machine_config("99-worker-second")
        await api.wait_for(
            lambda: (
                api.get("machineconfigpools", "worker")["spec"]["configuration"]["name"] == second
            ),
            timeout=30,
        )
        build = await cluster.wait_build_done(timeout=60)
        assert build.succeeded
        async with asyncio.timeout(30):
            await cluster.timeline.wait_for(
                lambda e: "could not get final image pullspec" in e.message
            )
        pool = api.get("machineconfigpools", "worker")
        assert condition_true(pool, "Building")
        assert annotations_of(pool)[POOL_IMAGE] == cluster.initial_image
        assert [r.name for r in api.writes("builds", verb="create")] == [build.name]
        assert cluster.timeline.select(
            actor="machine-os-builder",
            contains=f"No build for MachineConfigPool worker, config {second}",
        )


@pytest.mark.parametrize("version", list(McoVersion))
async def test_a_degraded_pool_starts_no_build(tmp_path: Path, version: McoVersion) -> None:
    """D4: a node Degraded (the daemon's drain timeout, say) makes the pool NodeDegraded and
    Degraded (calculateStatus), and no version starts a build while the pool is degraded."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, version=version) as cluster:
        api = cluster.api
        degraded = {STATE: "Degraded", REASON: "failed to drain node: timed out"}
        api.patch("nodes", "worker-1", {"metadata": {"annotations": degraded}})
        await api.wait_for(
            lambda: condition_true(api.get("machineconfigpools", "worker"), "Degraded"), 30
        )
        pool = api.get("machineconfigpools", "worker")
        assert condition_true(pool, "NodeDegraded")
        rv = api.resource_version
        rendered = await cluster.create_machine_config("99-worker-files")
        async with asyncio.timeout(30):
            await cluster.timeline.wait_for(
                lambda e: f"No build for MachineConfigPool worker, config {rendered}" in e.message
            )
        assert _builds_created(cluster, rv) == []
        assert (
            "the pool is degraded"
            in cluster.timeline.select(actor="machine-os-builder", contains="No build")[0].message
        )


async def test_4_15_a_failed_build_degrades_the_pool(tmp_path: Path) -> None:
    """D4: 4.15's markBuildFailed sets Degraded beside BuildFailed; the next MachineConfig
    gets no build (BuildFailed)."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01) as cluster:
        cluster.win_build_races()
        api = cluster.api
        rv = api.resource_version
        await cluster.create_machine_config("99-worker-first")
        [pod] = await api.wait_for(lambda: cluster.build_pods(), timeout=30)
        api.delete("pods", pod["metadata"]["name"], MCO_NAMESPACE)  # as an eviction would
        build = await cluster.wait_build_done(timeout=30)
        assert build.reason == "BuildPodDeleted"
        degraded = await api.wait_for_write(
            lambda r: (
                r.resource == "machineconfigpools" and condition_true(r.after or {}, "Degraded")
            ),
            since=rv,
            timeout=30,
        )
        assert condition_true(degraded.after or {}, "BuildFailed")
        second = await cluster.create_machine_config("99-worker-second")
        async with asyncio.timeout(30):
            await cluster.timeline.wait_for(
                lambda e: f"config {second}: the" in e.message and "No build" in e.message
            )
        assert len(_builds_created(cluster, rv)) == 1


@pytest.mark.parametrize("skips_unready", [True, False])
async def test_a_cordoned_node_gets_a_target_only_before_the_cordon_skip(
    tmp_path: Path, skips_unready: bool
) -> None:
    """D3: "a cordoned node gets no new target" came with PR 4495 (release-4.15) and PR 4483
    (release-4.16); a z-stream built before them (the seed's 4.15) targets a cordoned node
    like any other. An admin's cordon of worker-0 before the MachineConfig: with the skip,
    worker-1 is targeted first; without it, worker-0, the oldest node."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, version=McoVersion.V4_16) as cluster:
        assert cluster.node_controller is not None
        cluster.node_controller.skips_unready = skips_unready
        api = cluster.api
        api.patch("nodes", "worker-0", {"spec": {"unschedulable": True}})
        rendered = await cluster.create_machine_config("99-worker-files")
        first = await api.wait_for_write(
            lambda r: (
                r.resource == "nodes"
                and r.user == MCC_USER
                and annotations_of(r.after or {}).get(DESIRED_CONFIG) == rendered
            ),
            timeout=60,
        )
        assert first.name == ("worker-1" if skips_unready else "worker-0")


async def test_4_16_targets_nodes_only_once_the_image_is_written(tmp_path: Path) -> None:
    """D5: 4.16/4.17's build controller writes the MachineOSConfig's image, then marks the
    MachineOSBuild succeeded (updateConfigAndBuild), and the node controller waits for the
    success: however slow the image's write (here 50 MCO s, ten times the node controller's
    delay), no node is targeted with the new config and the image it runs."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, version=McoVersion.V4_16) as cluster:
        api = cluster.api
        api.faults.latency(
            0.5,
            user=BUILDER_USER,
            verb="patch",
            resource="machineconfigpools.machineconfiguration.openshift.io",
        )
        rendered = await cluster.create_machine_config("99-worker-files")
        await cluster.wait_rollout_done(timeout=90, config=rendered)
        assert cluster.cordons()
        assert not [c for c in cluster.cordons() if c.unchanged_image]


async def test_the_node_controller_taints_the_nodes_it_has_yet_to_update(tmp_path: Path) -> None:
    """D7: MCO's node controller keeps ``UpdateInProgress`` (PreferNoSchedule) on every node
    whose desired config or image is not the pool's and removes it once they are: Node writes
    the agent's compare-and-swap meets too. On with the other Node writers."""
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.01, version=McoVersion.V4_16, node_writers=True
    ) as cluster:
        api = cluster.api
        rv = api.resource_version
        rendered = await cluster.create_machine_config("99-worker-files")
        await cluster.wait_rollout_done(timeout=90, config=rendered)

        def tainted(node: str) -> bool:
            taints = api.get("nodes", node)["spec"].get("taints") or []
            return any(t["key"] == UPDATE_IN_PROGRESS["key"] for t in taints)

        await cluster.wait_for(lambda: not any(tainted(n) for n in cluster.node_names), timeout=30)
        taint_writes = [
            r
            for r in api.writes("nodes", user=MCC_USER, since=rv)
            if (r.after or {}).get("spec", {}).get("taints")
            != (r.before or {}).get("spec", {}).get("taints")
        ]
        assert {r.name for r in taint_writes} == set(cluster.node_names)
        assert len(taint_writes) == 2 * len(cluster.node_names)  # on, then off, per node


@pytest.mark.parametrize(
    "version", [McoVersion.V4_16, McoVersion.V4_18_EARLY, McoVersion.V4_18], ids=str
)
async def test_a_build_is_a_machine_os_build_written_in_mco_order(
    tmp_path: Path, version: McoVersion
) -> None:
    """4.16+: a new rendered config gets a MachineOSBuild (no Build object), at the API version
    and with the fields of the version; its conditions go Prepared, Building, Succeeded, five
    at a time; the MachineOSConfig's image is written before the build's success on 4.16/4.17
    (updateConfigAndBuild) and after it on 4.18 (updateMachineOSConfigStatus, after the
    clean-up, D5); 4.18's MachineOSConfig names its current build."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, version=version) as cluster:
        api = cluster.api
        rv = api.resource_version
        rendered = await cluster.create_machine_config("99-worker-files")
        await cluster.wait_rollout_done(timeout=60, config=rendered)
        assert not api.writes("builds", since=rv)
        name = build_name(version, "worker", rendered, "worker")
        [created] = api.writes("machineosbuilds", verb="create", since=rv)
        assert created.name == name
        build = api.get("machineosbuilds", name)
        group = "machineconfiguration.openshift.io"
        assert (
            build["apiVersion"] == f"{group}/{'v1' if version is McoVersion.V4_18 else 'v1alpha1'}"
        )
        config_key = "machineConfig" if version is McoVersion.V4_18 else "desiredConfig"
        assert build["spec"][config_key] == {"name": rendered}
        config_field, build_field = image_field(version)
        assert build["status"][build_field] == built_image(rendered)
        states = []
        for rec in api.writes("machineosbuilds", since=rv):
            conditions = ((rec.after or {}).get("status") or {}).get("conditions") or []
            if rec.name == name and conditions:
                assert [c["type"] for c in conditions] == [
                    "Prepared",
                    "Building",
                    "Failed",
                    "Interrupted",
                    "Succeeded",
                ]
                states.append(build_state(rec.after or {}))
        assert [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s] == [
            "Prepared",
            "Building",
            "Succeeded",
        ]
        mosc_image = next(
            r.rv
            for r in api.writes("machineosconfigs", since=rv)
            if ((r.after or {}).get("status") or {}).get(config_field) == built_image(rendered)
        )
        succeeded = next(
            r.rv
            for r in api.writes("machineosbuilds", since=rv)
            if build_state(r.after or {}) == "Succeeded"
        )
        if version.job_builds:
            assert succeeded < mosc_image
            mosc = api.get("machineosconfigs", "worker")
            assert mosc["metadata"]["annotations"][CURRENT_BUILD_ANNOTATION] == name
        else:
            assert mosc_image < succeeded


async def test_the_control_plane_pool_drains_the_node_its_build_runs_on(tmp_path: Path) -> None:
    """A pool without layering (``masters=``): its daemon drains and reboots for a new config
    (no image), and its drain evicts the layered pool's build pod running there (MCO's build
    pods tolerate the control-plane taint): on 4.16 the build fails."""
    async with SimCluster(
        tmp_path, nodes=2, masters=1, build_node="master-0", time_factor=0.01,
        version=McoVersion.V4_16,
    ) as cluster:  # fmt: skip
        api = cluster.api
        await cluster.create_machine_config("99-worker-files")
        await api.wait_for(
            lambda: [p for p in cluster.build_pods() if p["status"].get("phase") == "Running"], 30
        )
        master = await cluster.create_master_config("99-master-files")
        build = await cluster.wait_build_done(timeout=60)
        assert (build.phase, build.reason) == ("Error", "BuildPodDeleted")
        await cluster.wait_for(lambda: cluster.pool_updated("master", master), 60)
        [update] = cluster.machines["master-0"].updates
        assert update.drain_requested
        assert not update.same_image
        assert cluster.machines["master-0"].reboots == 1
        outcome = cluster.outcome()
        assert [c.node for c in outcome.cordons] == ["master-0"]
        assert not outcome.unchanged_image_cordons()
        assert outcome.build_pods_evicted() == [f"{MCO_NAMESPACE}/build-{build_config(cluster)}"]


def build_config(cluster: SimCluster) -> str:
    return str(cluster.api.get("machineconfigpools", "worker")["spec"]["configuration"]["name"])
