"""D2 (issue 38 item 3): the node that runs machine-os-builder keeps its drain while a
MachineOSBuild is in flight, by default: on MCO 4.18/4.19 that drain re-creates the build and
degrades the pool (OCPBUGS-58238). The agent reads the MachineOSBuilds through its own watch
(issue 38's rule) and holds with reason ``build-pod``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drain_guard_sim.actors.mco import MCO_NAMESPACE, McoVersion
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.demoagents import Agents

#: A machine-os-builder replica on the control-plane node (its Deployment runs there on
#: OpenShift); the build itself runs on a worker.
BUILDER = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "machine-os-builder-7d9f-cp",
        "namespace": MCO_NAMESPACE,
        "labels": {"k8s-app": "machine-os-builder"},
    },
    "spec": {"nodeName": "master-0", "containers": [{"name": "main", "image": "sim"}]},
    "status": {"phase": "Running"},
}


@pytest.mark.timeout(180)
async def test_the_builders_node_keeps_its_drain_until_the_build_ends(tmp_path: Path) -> None:
    async with SimCluster(
        tmp_path, nodes=2, masters=1, build_node="worker-1", time_factor=0.02,
        version=McoVersion.V4_18,
    ) as cluster:  # fmt: skip
        api = cluster.api
        api.create("pods", BUILDER, MCO_NAMESPACE)
        agents = Agents(cluster, tmp_path, 2700.0)
        try:
            await agents.start("master-0")
            await cluster.create_machine_config("99-worker-files")
            async with asyncio.timeout(60):
                await cluster.timeline.wait_for(
                    lambda e: e.actor == "build-controller" and " is Running in pod " in e.message
                )
            master = await cluster.create_master_config("99-master-files")
            held = await api.wait_for(
                lambda: [d for d in agents.decisions if d.outcome in ("hold", "holding")], 60
            )
            assert held[0].reasons == ("build-pod",), held
            assert "machine-os-builder-7d9f-cp while MachineOSBuild" in held[0].why, held
            build = await cluster.wait_build_done(timeout=90)
            assert build.succeeded
            await cluster.wait_for(lambda: cluster.pool_updated("master", master), 90)
        finally:
            await agents.stop_all()
        # master-0 was drained once, after the build.
        [cordon] = [c for c in cluster.cordons() if c.node == "master-0"]
        assert cordon.t > build.finished
        evicted = [p for _, node, p in cluster.evictions() if node == "master-0"]
        assert f"{MCO_NAMESPACE}/machine-os-builder-7d9f-cp" in evicted
