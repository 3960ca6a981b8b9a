"""A build pod in its first seconds (bound to its Node, ``Pending`` while its image is pulled)
on the real control plane: the eviction API evicts a Pending pod whatever its budgets say
(Kubernetes: a pod that is not running may be evicted regardless of budget), so the shield's
budget on it, in force and allowing no disruption, does not protect it. What does is the
``build-pod`` guard's hold: it counts a Pending build pod as running, and the drain controller
does not act on a held request. The budget protects the pod from the moment it runs, Ready or
not (the eviction API's default for a pod not Ready: evicted only while its budget is healthy,
which one allowing no disruption of its one pod is not)."""

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
    set_phase,
    until,
    wait_annotation,
)
from tests.controlplane.test_shield import budgets_of, evict
from tests.helpers import IMAGE_A, IMAGE_B, MCO_NS, reap, spawn


async def pending_build_pod(admin: client.ApiClient, node: str) -> str:
    """A build pod bound to ``node``, as the API server creates every pod: Pending."""
    build = unique("build")
    body: Any = {
        "metadata": {"name": build, "labels": {BUILD_LABEL: build}},
        "spec": {"nodeName": node, "containers": [{"name": "build", "image": "builder"}]},
    }
    created = await client.CoreV1Api(admin).create_namespaced_pod(MCO_NS, body)
    assert created.status.phase == "Pending"
    return build


async def shielded(admin: client.ApiClient, node: str, pod: str) -> None:
    """Until the shield's budget on ``pod`` is counted by the disruption controller: expected
    1, healthy 0 (not Ready), so no disruption allowed."""

    async def computed() -> Any:
        for budget in await budgets_of(admin, node):
            (owner,) = budget.metadata.owner_references
            status = budget.status
            if owner.name == pod and status is not None:
                current = status.observed_generation == budget.metadata.generation
                return budget if current and status.expected_pods == 1 else None
        return None

    budget = await until(computed)
    assert (budget.status.disruptions_allowed, budget.status.desired_healthy) == (0, 1)


async def test_a_pending_build_pod_is_protected_by_the_hold_not_by_its_budget(
    control_plane: ControlPlane, admin: client.ApiClient, tmp_path: Path
) -> None:
    node = await create_worker(admin)
    build = await pending_build_pod(admin, node)
    started: list[AgentProcess] = []
    try:
        host = HostFS(tmp_path / "host", IMAGE_A)
        await spawn(node, control_plane.admin_kubeconfig, host, started=started)
        await shielded(admin, node, build)

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

        # The next build pod, once its container runs (Running, not yet Ready): its budget
        # refuses the same eviction.
        running = await pending_build_pod(admin, node)
        await shielded(admin, node, running)
        await set_phase(admin, running, "Running", ready=False)
        assert await evict(admin, running) == 429
    finally:
        await reap(started)
