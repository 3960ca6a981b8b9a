"""The simulated machine-config-controller's drain controller (drain_guard_sim.actors.drain) as a
client of either API server, with only the rights a ClusterRole gives it: it cordons the node,
evicts its pods through the eviction API, retries a pod whose budget refuses (429) and
completes the drain once the budget is gone. The first of the MCO actors held to the real
control plane (issue 22 item 2)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from drain_guard_sim.actors.buildrunner import OpenShiftBuildController
from drain_guard_sim.actors.drain import DrainController
from drain_guard_sim.actors.mco import (
    BUILD_NAME_LABEL,
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    MCO_NAMESPACE,
    Timings,
)
from drain_guard_sim.actors.timeline import Timeline
from tests.conformance.actors import actor_kubeconfig, remove_actor
from tests.conformance.client import MERGE_PATCH, Client, JsonObj
from tests.conformance.objects import budget, create_pod, node, pods_path
from tests.conformance.servers import Server
from tests.helpers import WAIT

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
    """The drain controller (MCO 4.15, durations a hundredth of MCO's) as service account
    ``machine-config-controller`` with MCC_RULES."""
    account = "machine-config-controller"
    kubeconfig = await actor_kubeconfig(
        server, admin, ns, account, MCC_RULES, tmp_path / "mcc.kubeconfig"
    )
    controller = DrainController(kubeconfig, Timeline(), Timings().scaled(0.01))
    await controller.start()
    yield controller
    await controller.stop()
    await remove_actor(admin, ns, account)


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


#: What the 4.15 build controller (openshift-controller-manager's, and the kubelet for its pod)
#: calls: its Build informer and writes, the build pod's creation, status and deletion.
BUILD_RULES = [
    {"apiGroups": ["build.openshift.io"], "resources": ["builds"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["build.openshift.io"], "resources": ["builds/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
]  # fmt: skip


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "budget"])
async def test_the_seed_drain_against_a_running_build(
    server: Server,
    admin: Client,
    ns: str,
    tmp_path: Path,
    drain_controller: DrainController,
    guarded: bool,
) -> None:
    """The seed's core on either server: a drain of the node a build runs on. Unguarded, the
    eviction API takes the build pod and the build ends in Error (BuildPodDeleted), as in the
    seed report; with the budget drain-guard's shield makes (minAvailable 1 over the pod) the
    eviction is refused (429) until the build completes, then the drain finishes."""
    await server.custom_resources(admin)
    name = f"{ns}-n0"
    worker = node(name)
    worker["metadata"]["annotations"] = {
        DESIRED_DRAIN: "uncordon-a",
        LAST_APPLIED_DRAIN: "uncordon-a",
    }
    await admin.ok("POST", "/api/v1/nodes", worker)
    mco = await _mco_namespace(server, admin)
    # Unguarded, the build would outlast the drain by far; guarded it ends in 3 s.
    timings = replace(Timings().scaled(0.01), build_duration=300.0 if guarded else 3000.0)
    kubeconfig = await actor_kubeconfig(
        server, admin, ns, "build-controller", BUILD_RULES, tmp_path / "build.kubeconfig"
    )
    builder = OpenShiftBuildController(
        kubeconfig, drain_controller.timeline, timings, lambda _: name
    )
    await builder.start()
    try:
        build = f"{ns}-build"
        builds = f"/apis/build.openshift.io/v1/namespaces/{mco}/builds"
        await admin.ok(
            "POST",
            builds,
            {"apiVersion": "build.openshift.io/v1", "kind": "Build", "metadata": {"name": build},
             "spec": {"strategy": {"type": "Docker"}}},
        )  # fmt: skip
        await admin.wait_for(f"{builds}/{build}", lambda b: _phase(b) == "Running")
        if guarded:
            budgets = f"/apis/policy/v1/namespaces/{mco}/poddisruptionbudgets"
            shield = budget(build, {BUILD_NAME_LABEL: build}, minAvailable=1)
            await admin.ok("POST", budgets, shield)
            await admin.wait_for(
                f"{budgets}/{build}", lambda b: (b.get("status") or {}).get("currentHealthy") == 1
            )
        await admin.ok(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {"annotations": {DESIRED_DRAIN: "drain-b"}}},
            content_type=MERGE_PATCH,
        )
        ended = await admin.wait_for(
            f"{builds}/{build}", lambda b: _phase(b) in ("Complete", "Error", "Failed")
        )
        await admin.wait_for(
            f"/api/v1/nodes/{name}", lambda n: _annotations(n).get(LAST_APPLIED_DRAIN) == "drain-b"
        )
        refused = drain_controller.timeline.select(
            contains=f'pods/"{build}-build" -n "{mco}" (will retry'
        )
        if guarded:
            assert _phase(ended) == "Complete"
            assert refused, "the budget never refused the eviction"
            await admin.delete(f"{budgets}/{build}")
        else:
            assert (_phase(ended), ended["status"].get("reason")) == ("Error", "BuildPodDeleted")
            assert not refused
        evicted = [(e.namespace, e.name) for e in drain_controller.evictions if e.node == name]
        assert evicted == [(mco, f"{build}-build")]
    finally:
        await builder.stop()
        await remove_actor(admin, ns, "build-controller")
        await admin.delete(f"/api/v1/nodes/{name}")


def _phase(build: JsonObj) -> str | None:
    phase: str | None = (build.get("status") or {}).get("phase")
    return phase


async def _mco_namespace(server: Server, admin: Client) -> str:
    """MCO's namespace (the build controller's), shared by the session's tests, with the
    ``builder`` account its build pods run as."""
    created = await admin.post("/api/v1/namespaces", {"metadata": {"name": MCO_NAMESPACE}})
    assert created.status in (201, 409), created.body
    await server.namespace_ready(admin, MCO_NAMESPACE)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"}}
    made = await admin.post(f"/api/v1/namespaces/{MCO_NAMESPACE}/serviceaccounts", account)
    assert made.status in (201, 409), made.body
    return MCO_NAMESPACE
