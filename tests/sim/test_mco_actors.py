"""The simulated MCO actors' rules, one by one, through the simulator (docs/protocol.md).

The tests play the node controller (or an agent) by writing Node annotations as an admin and
read what the actors did from the write log, the stored objects and the timeline.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from drain_guard_sim.actors.mco import (
    CURRENT_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    LAST_APPLIED_DRAIN,
    MCC_USER,
    MCD_USER,
    POOL_IMAGE,
    REGISTRY_NAMESPACE,
    STATE,
    Timings,
    annotations_of,
)
from drain_guard_sim.apiserver.server import WriteRecord
from drain_guard_sim.harness.cluster import SimCluster
from tests.sim.helpers import CFG, REGISTRY_BUDGET, ann, request_and_hold, set_ann, wrote_drain

MCC = "machine-config-controller"
MCD = "machine-config-daemon"


def unschedulable(rec: WriteRecord, side: str) -> bool:
    obj: Any = rec.before if side == "before" else rec.after
    return bool(((obj or {}).get("spec") or {}).get("unschedulable", False))


async def test_unknown_verb_leaves_node_untouched_and_is_dropped(tmp_path: Path) -> None:
    timings = Timings(mcc_max_retries=4)
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.01, timings=timings, node_controller=False
    ) as cluster:
        rv = cluster.api.resource_version
        set_ann(cluster, "worker-1", desired_drain="hold-drain-" + CFG)
        async with asyncio.timeout(20):
            dropped = await cluster.timeline.wait_for(
                lambda e: e.node == "worker-1" and "Dropping node" in e.message
            )
        assert "non-recognized drain verb detected hold" in dropped.message
        errors = cluster.timeline.select(
            actor=MCC, node="worker-1", contains="non-recognized drain verb detected hold"
        )
        assert len(errors) >= 5  # 4 rate-limited retries, then the drop
        assert not cluster.api.writes("nodes", name="worker-1", user=MCC_USER, since=rv)
        assert not cluster.api.get("nodes", "worker-1")["spec"].get("unschedulable")
        assert not cluster.timeline.select(actor=MCC, node="worker-1", contains="cordon")


async def test_mcd_skips_drain_request_when_last_applied_equals(tmp_path: Path) -> None:
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, node_controller=False) as cluster:
        # As after a drain whose update was interrupted: lastAppliedDrain already drain-<cfg>.
        set_ann(cluster, "worker-0", desired_drain=f"drain-{CFG}", last_applied=f"drain-{CFG}")
        rv = cluster.api.resource_version
        set_ann(cluster, "worker-0", desired_config=CFG)
        await cluster.api.wait_for(
            lambda: (
                ann(cluster, "worker-0").get(CURRENT_CONFIG) == CFG
                and ann(cluster, "worker-0").get(STATE) == "Done"
                and ann(cluster, "worker-0").get(LAST_APPLIED_DRAIN) == f"uncordon-{CFG}"
            ),
            timeout=20,
        )
        assert cluster.timeline.select(
            actor=MCD, node="worker-0", contains="drain is already completed on this node"
        )
        mcd_drains = [
            r
            for r in cluster.api.writes("nodes", user=MCD_USER, since=rv)
            if wrote_drain(f"drain-{CFG}")(r)
        ]
        assert mcd_drains == []
        assert not [
            r
            for r in cluster.api.writes("nodes", name="worker-0", user=MCC_USER, since=rv)
            if unschedulable(r, "after")
        ]


async def test_pdb_makes_drain_retry_then_error_metric_then_succeed(tmp_path: Path) -> None:
    async with SimCluster(tmp_path, nodes=2, time_factor=0.001, node_controller=False) as cluster:
        api = cluster.api
        api.create("poddisruptionbudgets", REGISTRY_BUDGET)
        set_ann(cluster, "worker-0", desired_drain="drain-" + CFG)
        tl = cluster.timeline
        async with asyncio.timeout(30):
            await tl.wait_for(lambda e: "(will retry after 5s)" in e.message)
            await tl.wait_for(lambda e: "Drain failed. Waiting 1 minute then retrying" in e.message)
            await tl.wait_for(
                lambda e: "Drain has been failing for more than 10 minutes" in e.message
            )
            await tl.wait_for(lambda e: "drain exceeded timeout" in e.message)
        assert cluster.drain is not None
        assert cluster.drain.mcc_drain_err == {"worker-0": 1}
        assert ann(cluster, "worker-0").get(LAST_APPLIED_DRAIN) != "drain-" + CFG
        assert cluster.pods_on("worker-0", "docker-registry=default")  # never evicted
        assert not [
            r
            for r in api.writes("pods", user=MCC_USER)
            if r.subresource == "eviction" and r.namespace == REGISTRY_NAMESPACE
        ]
        api.delete("poddisruptionbudgets", "image-registry", REGISTRY_NAMESPACE)
        await api.wait_for(
            lambda: ann(cluster, "worker-0").get(LAST_APPLIED_DRAIN) == "drain-" + CFG, timeout=20
        )
        assert cluster.drain.mcc_drain_err == {}
        assert not cluster.pods_on("worker-0", "docker-registry=default")
        assert tl.select(contains="Cleaning up MCCDrain error for node(worker-0)")


async def test_mcd_degrades_after_the_hour_and_keeps_waiting(tmp_path: Path) -> None:
    timings = Timings(mcc_update_delay=100)
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.001, timings=timings, node_controller=False
    ) as cluster:
        api = cluster.api
        await request_and_hold(cluster, "worker-0", CFG)
        async with asyncio.timeout(30):
            await cluster.timeline.wait_for(
                lambda e: (
                    e.node == "worker-0"
                    and "Marking Degraded due to: failed to drain node" in e.message
                )
            )
        await api.wait_for(lambda: ann(cluster, "worker-0").get(STATE) == "Degraded", timeout=5)
        failed = [e for e in api.list("events") if e.get("reason") == "FailedToDrain"]
        assert [e["involvedObject"]["name"] for e in failed] == ["worker-0"]
        assert not cluster.api.get("nodes", "worker-0")["spec"].get("unschedulable")
        # Later syncs keep waiting while the request is not applied; a release lets it finish.
        set_ann(cluster, "worker-0", desired_config=CFG)  # any node update triggers a sync
        async with asyncio.timeout(10):
            await cluster.timeline.wait_for(
                lambda e: (
                    e.node == "worker-0"
                    and "A previously requested drain has not yet completed" in e.message
                )
            )
        set_ann(cluster, "worker-0", desired_drain=f"drain-{CFG}")
        await api.wait_for(
            lambda: (
                ann(cluster, "worker-0").get(CURRENT_CONFIG) == CFG
                and ann(cluster, "worker-0").get(STATE) == "Done"
            ),
            timeout=30,
        )
        assert cluster.timeline.select(
            actor=MCD, node="worker-0", contains="drain is already completed on this node"
        )


async def test_mcd_compares_the_two_annotations_only(tmp_path: Path) -> None:
    """Why an agent must never write desiredDrain == lastAppliedDrain (invariant 1)."""
    timings = Timings(mcc_update_delay=100)
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.01, timings=timings, node_controller=False
    ) as cluster:
        rv = cluster.api.resource_version
        request = await request_and_hold(cluster, "worker-0", CFG)
        last = annotations_of(request.after or {})[LAST_APPLIED_DRAIN]
        set_ann(cluster, "worker-0", desired_drain=last)
        await cluster.api.wait_for(lambda: cluster.machines["worker-0"].reboots == 1, timeout=20)
        assert cluster.timeline.select(actor=MCD, node="worker-0", contains="drain complete")
        assert not [
            r
            for r in cluster.api.writes("nodes", name="worker-0", user=MCC_USER, since=rv)
            if unschedulable(r, "after")
        ]


async def test_stale_same_image_update_is_finished_before_the_real_one(tmp_path: Path) -> None:
    """The seed's lost race (4.15 targets worker-0 with the old image), then the daemon's plan:
    at 0.04 the race's margins are 80 ms of real time, the demo's order of magnitude."""
    timings = Timings(mcc_update_delay=20)
    async with SimCluster(
        tmp_path, time_factor=0.04, timings=timings, build_node="worker-2"
    ) as cluster:
        api = cluster.api
        x = cluster.initial_image
        rendered = await cluster.create_machine_config("99-worker-stale", lose_build_race=True)
        rv = api.resource_version
        request = await api.wait_for_write(wrote_drain(f"drain-{rendered}"), since=rv, timeout=20)
        set_ann(cluster, "worker-0", desired_drain=f"hold-drain-{rendered}")  # as the agent would
        assert annotations_of(request.after or {})[DESIRED_IMAGE] == x
        build = await cluster.wait_build_done(timeout=30)
        assert build.succeeded
        y = await api.wait_for(
            lambda: (
                (annotations_of(api.get("machineconfigpools", "worker"))[POOL_IMAGE] != x)
                and annotations_of(api.get("machineconfigpools", "worker"))[POOL_IMAGE]
            ),
            timeout=10,
        )
        await api.wait_for(lambda: ann(cluster, "worker-0").get(DESIRED_IMAGE) == y, timeout=20)
        set_ann(cluster, "worker-0", desired_drain=f"drain-{rendered}")  # release
        host = cluster.hosts["worker-0"]
        await api.wait_for(
            lambda: host.booted_image == y and ann(cluster, "worker-0").get(STATE) == "Done",
            timeout=30,
        )
        updates = cluster.machines["worker-0"].updates
        assert [(u.from_image, u.to_image) for u in updates] == [(x, x), (x, y)]
        assert updates[0].drain_requested
        assert not updates[0].rebased
        assert updates[1].drain_skipped
        assert updates[1].rebased
        assert host.boot_count == 2
        assert [c.node for c in cluster.cordons()].count("worker-0") == 1
        mine = [e.message for e in cluster.timeline.select(node="worker-0")]

        def index(text: str) -> int:
            return next(i for i, m in enumerate(mine) if text in m)

        assert (
            index("Image pullspecs equal, skipping rpm-ostree rebase")
            < index(f"rebooted into {x}")
            < index("drain is already completed on this node")
            < index(f'Updating OS to layered image "{y}"')
            < index(f"rebooted into {y}")
        )


async def test_mcc_uncordons_only_for_the_uncordon_verb(tmp_path: Path) -> None:
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, node_controller=False) as cluster:
        api = cluster.api

        async def apply(value: str) -> None:
            set_ann(cluster, "worker-1", desired_drain=value)
            await api.wait_for(
                lambda: ann(cluster, "worker-1").get(LAST_APPLIED_DRAIN) == value, timeout=20
            )

        await apply("drain-a")
        assert api.get("nodes", "worker-1")["spec"].get("unschedulable")
        await apply("drain-b")
        assert api.get("nodes", "worker-1")["spec"].get("unschedulable")
        rv = api.resource_version
        uncordons = [
            r
            for r in api.writes("nodes", name="worker-1")
            if unschedulable(r, "before") and not unschedulable(r, "after")
        ]
        assert uncordons == []
        await apply("uncordon-b")
        [uncordon] = [
            r
            for r in api.writes("nodes", name="worker-1")
            if unschedulable(r, "before") and not unschedulable(r, "after")
        ]
        assert uncordon.rv > rv
        assert uncordon.user == MCC_USER


async def test_restarted_mcd_requests_its_drain_again(tmp_path: Path) -> None:
    timings = Timings(mcc_update_delay=100)
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.01, timings=timings, node_controller=False
    ) as cluster:
        await request_and_hold(cluster, "worker-0", CFG)
        rv = cluster.api.resource_version
        cluster.restart_mcd("worker-0")
        again = await cluster.api.wait_for_write(wrote_drain(f"drain-{CFG}"), since=rv, timeout=20)
        assert annotations_of(again.before or {})[DESIRED_DRAIN] == f"hold-drain-{CFG}"
        assert cluster.timeline.select(actor=MCD, node="worker-0", contains="daemon pod restarted")
        await cluster.api.wait_for(
            lambda: ann(cluster, "worker-0").get(LAST_APPLIED_DRAIN) == f"drain-{CFG}", timeout=20
        )


async def test_drain_in_flight_is_not_stopped_by_a_new_request(tmp_path: Path) -> None:
    """A hold written after the MCC started draining loses the race: the MCC completes the
    drain it read and writes lastAppliedDrain = that value (what an agent must detect)."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, node_controller=False) as cluster:
        api = cluster.api
        api.create("poddisruptionbudgets", REGISTRY_BUDGET)
        set_ann(cluster, "worker-0", desired_drain="drain-" + CFG)
        async with asyncio.timeout(20):
            await cluster.timeline.wait_for(lambda e: "(will retry after 5s)" in e.message)
        set_ann(cluster, "worker-0", desired_drain="hold-drain-" + CFG)
        api.delete("poddisruptionbudgets", "image-registry", REGISTRY_NAMESPACE)
        await api.wait_for(
            lambda: ann(cluster, "worker-0").get(LAST_APPLIED_DRAIN) == "drain-" + CFG, timeout=20
        )
        assert ann(cluster, "worker-0")[DESIRED_DRAIN] == "hold-drain-" + CFG
        assert api.get("nodes", "worker-0")["spec"].get("unschedulable")
        assert not cluster.pods_on("worker-0", "docker-registry=default")


async def test_a_reboot_restarts_the_nodes_pods_during_its_downtime(tmp_path: Path) -> None:
    """The reboot hooks (a node's agent, restarted with its node) run from the start of the
    downtime, on the new deployment, and the daemon starts once they are over too: the
    agent's start, a hundred times a real one's in MCO seconds, overlaps the downtime instead
    of following it (docs/benchmarks.md, "The pool")."""
    async with SimCluster(tmp_path, nodes=2, time_factor=0.01, node_controller=False) as cluster:
        machine, host = cluster.machines["worker-1"], cluster.hosts["worker-1"]
        boots = host.boot_count
        called: list[tuple[int, bool]] = []
        release = asyncio.Event()

        async def hook(node: str) -> None:
            rebooted = cluster.timeline.select(node=node, contains="rebooted into")
            called.append((host.boot_count, bool(rebooted)))
            await release.wait()

        cluster.reboot_hooks.append(hook)
        # A Degraded node in its desired config updates again: a drain and a reboot.
        cluster.api.patch("nodes", "worker-1", {"metadata": {"annotations": {STATE: "Degraded"}}})
        async with asyncio.timeout(30):
            await cluster.timeline.wait_for(
                lambda e: e.node == "worker-1" and "rebooted into" in e.message
            )
        assert called == [(boots + 1, False)]  # on the new deployment, before the downtime ended
        assert machine.daemon is None  # the daemon waits for the hook
        release.set()
        await cluster.api.wait_for(lambda: ann(cluster, "worker-1").get(STATE) == "Done", 30)
        assert machine.daemon is not None


async def test_the_drain_request_floor_delays_only_a_sync_that_comes_sooner(
    tmp_path: Path,
) -> None:
    """``Timings.drain_request_floor`` (real seconds, benchmarks.pool's): the drain controller
    acts on a new drain request no sooner than that after it saw it, however early a sync
    queued before lands; its 5 s timer (50 ms here) would act sooner."""
    timings = Timings(drain_request_floor=0.5)
    async with SimCluster(
        tmp_path, nodes=2, time_factor=0.01, timings=timings, node_controller=False
    ) as cluster:
        rv = cluster.api.resource_version
        set_ann(cluster, "worker-1", desired_drain="drain-" + CFG)
        [request] = cluster.api.writes("nodes", name="worker-1", since=rv)
        cordon = await cluster.api.wait_for_write(
            lambda r: r.name == "worker-1" and unschedulable(r, "after"), since=rv, timeout=30
        )
        assert cordon.user == MCC_USER
        assert cordon.time - request.time >= 0.5
