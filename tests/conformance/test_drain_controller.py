"""The simulated machine-config-controller's drain controller (drain_guard_sim.drain) as a
client of either API server, with only the rights a ClusterRole gives it: it cordons the node,
evicts its pods through the eviction API, retries a pod whose budget refuses (429) and
completes the drain once the budget is gone. The first of the MCO actors held to the real
control plane (issue 22 item 2)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from drain_guard_sim.drain import DrainController
from drain_guard_sim.mco import DESIRED_DRAIN, LAST_APPLIED_DRAIN, Timings
from drain_guard_sim.timeline import Timeline
from tests.conformance.client import MERGE_PATCH, Client, JsonObj
from tests.conformance.objects import budget, create_pod, node, pods_path
from tests.conformance.servers import Server
from tests.helpers import WAIT

RBAC = "/apis/rbac.authorization.k8s.io/v1"
BUILD = {"app": "build"}

#: What the drain controller calls: its node informer and patches, the pods of a node, the
#: DaemonSet a pod may belong to, and evictions.
MCC_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
]


@pytest.fixture
async def drain_controller(
    server: Server, admin: Client, ns: str, tmp_path: Path
) -> AsyncIterator[DrainController]:
    """The drain controller (MCO 4.15, durations a hundredth of MCO's) as a service account
    (``machine-config-controller`` of the test's namespace, its token from the TokenRequest
    API), granted MCC_RULES by a ClusterRole of the test's own."""
    role = f"{ns}-machine-config-controller"
    await admin.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "machine-config-controller"}},
    )  # fmt: skip
    await admin.ok(
        "POST",
        f"{RBAC}/clusterroles",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": role}, "rules": MCC_RULES},
    )  # fmt: skip
    await admin.ok(
        "POST",
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "machine-config-controller",
                          "namespace": ns}],
        },
    )  # fmt: skip
    token = await admin.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/machine-config-controller/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    kubeconfig = server.token_kubeconfig(token["status"]["token"], tmp_path / "mcc.kubeconfig")
    controller = DrainController(kubeconfig, Timeline(), Timings().scaled(0.01))
    await controller.start()
    yield controller
    await controller.stop()
    for kind in ("clusterrolebindings", "clusterroles"):
        await admin.delete(f"{RBAC}/{kind}/{role}")


def _annotations(obj: JsonObj) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


async def test_a_drain_waits_for_the_budget_then_completes(
    drain_controller: DrainController, admin: Client, ns: str
) -> None:
    name = f"{ns}-n0"
    worker = node(name)
    worker["metadata"]["annotations"] = {
        DESIRED_DRAIN: "uncordon-a",
        LAST_APPLIED_DRAIN: "uncordon-a",
    }
    await admin.ok("POST", "/api/v1/nodes", worker)
    await create_pod(admin, ns, "app", name)
    await create_pod(admin, ns, "build", name, labels=BUILD)
    budgets = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    await admin.ok("POST", budgets, budget("shield", BUILD, minAvailable=1))
    await admin.wait_for(
        f"{budgets}/shield", lambda b: (b.get("status") or {}).get("currentHealthy") == 1
    )
    await admin.ok(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"metadata": {"annotations": {DESIRED_DRAIN: "drain-b"}}},
        content_type=MERGE_PATCH,
    )
    timeline = drain_controller.timeline
    async with asyncio.timeout(WAIT):
        await timeline.wait_for(lambda e: f'pods/"build" -n "{ns}" (will retry' in e.message)
    await admin.wait_gone(pods_path(ns, "app"))
    cordoned = await admin.ok("GET", f"/api/v1/nodes/{name}")
    assert cordoned["spec"].get("unschedulable") is True
    assert _annotations(cordoned)[LAST_APPLIED_DRAIN] == "uncordon-a"
    assert (await admin.get(pods_path(ns, "build"))).status == 200
    await admin.ok("DELETE", f"{budgets}/shield")
    done = await admin.wait_for(
        f"/api/v1/nodes/{name}", lambda n: _annotations(n).get(LAST_APPLIED_DRAIN) == "drain-b"
    )
    assert done["spec"].get("unschedulable") is True
    assert (await admin.get(pods_path(ns, "build"))).status == 404
    evicted = [(e.namespace, e.name) for e in drain_controller.evictions if e.node == name]
    assert evicted == [(ns, "app"), (ns, "build")]
    await admin.delete(f"/api/v1/nodes/{name}")
