"""A build pod in its first seconds (bound to its Node, ``Pending`` while its image is pulled)
on the real control plane: the eviction API evicts a Pending pod whatever its budgets say
(Kubernetes: a pod that is not running may be evicted regardless of budget), so the shield's
budget on it, in force and allowing no disruption, does not protect it. What does is the
``build-pod`` guard's hold: it counts a Pending build pod as running, and the drain controller
does not act on a held request. (The budget protects the pod once it runs: test_shield.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import unique
from tests.controlplane.nodes import (
    BUILD_LABEL,
    DRAIN_B,
    create_worker,
    mcd_request,
    until,
    wait_annotation,
)
from tests.controlplane.test_shield import budgets_of, evict
from tests.helpers import IMAGE_A, IMAGE_B, MCO_NS, reap, spawn


async def test_a_pending_build_pod_is_protected_by_the_hold_not_by_its_budget(
    control_plane: ControlPlane, admin: client.ApiClient, tmp_path: Path
) -> None:
    node = await create_worker(admin)
    build = unique("build")
    body: Any = {
        "metadata": {"name": build, "labels": {BUILD_LABEL: build}},
        "spec": {"nodeName": node, "containers": [{"name": "build", "image": "builder"}]},
    }
    created = await client.CoreV1Api(admin).create_namespaced_pod(MCO_NS, body)
    assert created.status.phase == "Pending"  # as the API server creates every pod
    started: list[AgentProcess] = []
    try:
        await spawn(
            node,
            control_plane.admin_kubeconfig,
            HostFS(tmp_path / "host", IMAGE_A),
            started=started,
        )

        async def computed() -> Any:
            """The shield's budget on the Pending pod, once the disruption controller has
            counted it: expected 1, healthy 0 (not Ready), so no disruption allowed."""
            found = await budgets_of(admin, node)
            if len(found) != 1 or found[0].status is None:
                return None
            budget = found[0]
            current = budget.status.observed_generation == budget.metadata.generation
            return budget if current and budget.status.expected_pods == 1 else None

        budget = await until(computed)
        assert (budget.status.disruptions_allowed, budget.status.desired_healthy) == (0, 1)

        # A drain for a new image (not noop-image's): held for the Pending build pod.
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        assert held[protocol.HOLD_REASONS] == protocol.Reason.BUILD_POD
        assert build in held[protocol.HOLD_DETAIL], held

        # The eviction a drain would send, had it started (before the hold, or with none):
        # taken although the budget allows no disruption. Only the hold kept the drain off it.
        assert await evict(admin, build) == 201
        evicted = await client.CoreV1Api(admin).read_namespaced_pod(build, MCO_NS)
        assert evicted.metadata.deletion_timestamp is not None
    finally:
        await reap(started)
