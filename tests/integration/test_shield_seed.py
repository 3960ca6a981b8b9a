"""The seed scenario with the shield alone (no hold): the MCC drains the build node, the budget
refuses the build pod's eviction, the build succeeds, and the budget is gone afterwards.

``tests/sim/test_seed.py`` shows the same cluster without drain-guard: the build pod is evicted
and the build ends ``Error (BuildPodDeleted)``.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from drain_guard.core.pods import MANAGED_BY, MANAGED_BY_KEY
from drain_guard.core.selectors import MCO_NAMESPACE, default_build_pod_selectors
from drain_guard.kube.client import Kube
from drain_guard.kube.credentials import load_api_client
from drain_guard.kube.listwatch import WatchCache
from drain_guard.shield.loop import Shield
from drain_guard.shield.plan import NodeScope
from drain_guard_sim.actors.gc import GC_USER
from drain_guard_sim.actors.mco import DESIRED_DRAIN, LAST_APPLIED_DRAIN, Timings, annotations_of
from drain_guard_sim.harness.cluster import SimCluster

OURS = f"{MANAGED_BY_KEY}={MANAGED_BY}"
WAIT = 30.0


async def test_seed_with_the_agent_killed_after_shielding_the_build_pod(tmp_path: Path) -> None:
    # The eviction API ignores budgets for Pending pods (as Kubernetes does), so the build pod
    # must be Running before the first eviction. In the seed's order (lose_build_race) the pod
    # comes 4 MCO seconds after the render (the build's two slow ConfigMap creates), the
    # cordon 7 s after (the node controller's sync 2 s after the render, then the MCC's 5 s):
    # a pod that starts in 0.5 s leaves 2.5 s.
    timings = Timings(build_pod_start=0.5)
    async with SimCluster(tmp_path, time_factor=0.03, timings=timings) as cluster:
        api = cluster.api
        node = cluster.build_node
        client = await load_api_client(str(cluster.agent_kubeconfig(node)))
        cache = WatchCache()
        kube = Kube(client)
        pods = asyncio.create_task(kube.watch_pods(node, cache, MCO_NAMESPACE))
        shield = Shield(kube, NodeScope(node), default_build_pod_selectors(), cache)
        task = asyncio.create_task(shield.run())
        try:
            rendered = await cluster.create_machine_config("99-worker-seed", lose_build_race=True)
            pod = f"build-{rendered}-build"
            # The budget is in force (computed by the disruption controller) for the running pod.
            await api.wait_for(
                lambda: any(
                    (b.get("status") or {}).get("observedGeneration")
                    and (b.get("status") or {}).get("currentHealthy") == 1
                    for b in api.list("poddisruptionbudgets", MCO_NAMESPACE, label_selector=OURS)
                ),
                timeout=WAIT,
            )
            for t in (task, pods):  # the agent is killed: its budget stays
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t

            build = await cluster.wait_build_done(timeout=WAIT)
            assert build.name == f"build-{rendered}"
            assert build.node == node
            assert build.succeeded, build
            refused = cluster.timeline.select(
                actor="machine-config-controller", contains=f'evicting pods/"{pod}"'
            )
            assert any("will retry" in e.message for e in refused)
            # Evicted, if at all, only once it had succeeded (a finished pod ignores budgets).
            writes = api.writes("pods", name=pod)
            succeeded = min(
                w.rv
                for w in writes
                if ((w.after or {}).get("status") or {}).get("phase") == "Succeeded"
            )
            assert all(w.rv > succeeded for w in writes if w.subresource == "eviction")
            # The drain of the build node completes once the build pod is gone, and the
            # garbage collector has removed the dead agent's budget with the pod.
            await api.wait_for(
                lambda: (
                    annotations_of(api.get("nodes", node)).get(LAST_APPLIED_DRAIN)
                    == f"drain-{rendered}"
                ),
                timeout=WAIT,
            )
            assert annotations_of(api.get("nodes", node)).get(DESIRED_DRAIN) in (
                f"drain-{rendered}",
                f"uncordon-{rendered}",
            )
            await api.wait_for(
                lambda: not api.list("poddisruptionbudgets", label_selector=OURS), timeout=WAIT
            )
            [removal] = [w for w in api.writes("poddisruptionbudgets") if w.after is None]
            assert removal.user == GC_USER
        finally:
            for t in (task, pods):
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await client.close()
