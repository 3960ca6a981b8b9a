"""The shield on the real control plane: the budget the agent keeps on its Node's build pod is
what the real eviction API refuses a drain with (the disruption controller computes
``disruptionsAllowed``), and the garbage collector removes it when its pod goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import unique
from tests.controlplane.nodes import add_build_pod, create_worker, until
from tests.helpers import IMAGE_A, MCO_NS, reap, spawn


async def budgets_of(admin: client.ApiClient, node: str) -> list[Any]:
    listed = await client.PolicyV1Api(admin).list_namespaced_pod_disruption_budget(
        MCO_NS, label_selector=f"drain-guard.io/node={node}"
    )
    return list(listed.items)


async def evict(admin: client.ApiClient, pod: str) -> int:
    """POST the pod's eviction as a drain does: 201, or the refusal's status."""
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=MCO_NS))
    try:
        await client.CoreV1Api(admin).create_namespaced_pod_eviction(pod, MCO_NS, eviction)
    except ApiException as error:
        return int(error.status)
    return 201


async def test_the_real_eviction_api_refuses_a_shielded_build_pod_and_gc_removes_the_budget(
    control_plane: ControlPlane, admin: client.ApiClient, tmp_path: Path
) -> None:
    node = await create_worker(admin)
    build = await add_build_pod(admin, node)
    started: list[AgentProcess] = []
    try:
        agent = await spawn(
            node,
            control_plane.admin_kubeconfig,
            HostFS(tmp_path / "host", IMAGE_A),
            started=started,
        )

        async def computed() -> Any:
            """The agent's budget once the disruption controller has computed its status."""
            found = await budgets_of(admin, node)
            if len(found) != 1 or found[0].status is None:
                return None
            budget = found[0]
            current = budget.status.observed_generation == budget.metadata.generation
            return budget if current and budget.status.current_healthy == 1 else None

        budget = await until(computed)
        assert budget.status.disruptions_allowed == 0
        assert budget.status.desired_healthy == 1
        (owner,) = budget.metadata.owner_references
        assert (owner.kind, owner.name) == ("Pod", build)

        # A drain's eviction of the build pod: the real API server says 429 (the budget).
        assert await evict(admin, build) == 429
        # The same eviction of a pod no budget selects goes through: the 429 is the budget's.
        plain = unique("plain")
        body: Any = {
            "metadata": {"name": plain},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        }
        await client.CoreV1Api(admin).create_namespaced_pod(MCO_NS, body)
        assert await evict(admin, plain) == 201

        # The agent gone (a crash: it deletes nothing), the build pod deleted: the garbage
        # collector removes the budget the pod owned.
        await agent.kill()
        await client.CoreV1Api(admin).delete_namespaced_pod(build, MCO_NS, grace_period_seconds=0)

        async def collected() -> bool:
            return not await budgets_of(admin, node)

        assert await until(collected)
    finally:
        await reap(started)
