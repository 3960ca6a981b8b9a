"""``drain-guard shield``, the central shield, as a process against the simulator.

One process, its own identity, watches of the pods of MCO's namespace that a build-pod selector
may match (never MCO's own pods; lists that do not grow with the build pods): a budget for each
build pod on any node, labelled with that pod's node; the eviction API then refuses to evict
the pod (429); the budget goes when the pod finishes; MCO's own pods never get one; a restart
resumes on the budgets it left (owned by their pods) without making them again; an uninstall
(its Deployment gone) removes them. Its requests are authorized by the RBAC the
``systemd`` overlay (the central shield alone) renders for its account, as the API server
would.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from drain_guard.confine import permissions
from drain_guard.core.pods import MANAGED_BY, MANAGED_BY_KEY, NODE_KEY
from drain_guard.core.selectors import default_build_pod_selectors
from drain_guard.programs import central
from drain_guard_sim.apiserver.errors import ApiError
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_shield
from drain_guard_sim.harness.seedobjects import worker_node
from tests.deploy.rbac import Grant, allows, granted
from tests.deploy.tools import render
from tests.helpers import CONFIG_A, IMAGE_A, MCO_NS, NODE, WAIT, metric, namespace_of, reap

SHIELD_USER = "system:serviceaccount:drain-guard:drain-guard-shield"
OTHER = "worker-1"
PDBS = "poddisruptionbudgets"
OURS = f"{MANAGED_BY_KEY}={MANAGED_BY}"
READY = [{"type": "Ready", "status": "True"}]

StartShield = Callable[..., Awaitable[AgentProcess]]


@pytest.fixture(scope="module")
def rbac() -> set[Grant]:
    """What the systemd overlay grants the central shield's account."""
    return granted(render("systemd"), ("drain-guard", "drain-guard-shield"))


@pytest.fixture
async def start_shield(
    api: SimApiServer, tmp_path: Path, rbac: set[Grant]
) -> AsyncIterator[StartShield]:
    """Start central shields (as the test asks) with their own identity, under their rendered
    RBAC; gone afterwards."""
    api.restrict(SHIELD_USER, partial(allows, rbac))
    api.create("nodes", worker_node(OTHER, CONFIG_A, IMAGE_A))
    kubeconfig = api.kubeconfig(SHIELD_USER, tmp_path / "shield-kubeconfig")
    started: list[AgentProcess] = []

    async def start(*extra: str, synced: bool = True) -> AgentProcess:
        shield = await spawn_shield(kubeconfig, *extra)
        started.append(shield)
        if synced:
            await shield.wait_log(lambda r: r.get("message", "").startswith("watches synced"))
        return shield

    yield start
    await reap(started)


def add_pod(
    api: SimApiServer, name: str, node: str, labels: dict[str, str], phase: str = "Running"
) -> dict[str, Any]:
    pod: dict[str, Any] = api.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": MCO_NS, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase, "conditions": READY},
        },
        MCO_NS,
    )
    return pod


def add_build_pod(api: SimApiServer, name: str, node: str) -> dict[str, Any]:
    """A 4.15 build pod (OpenShift Build), running on ``node``."""
    return add_pod(api, name, node, {"openshift.io/build.name": name.removesuffix("-build")})


def add_mco_pods(api: SimApiServer) -> None:
    """MCO's own single-replica pods (the drain of a control-plane node evicts them)."""
    add_pod(api, "machine-config-controller-6d9f", NODE, {"k8s-app": "machine-config-controller"})
    add_pod(api, "machine-os-builder-557cd", OTHER, {"k8s-app": "machine-os-builder"})
    add_pod(api, "machine-config-daemon-x7k2p", NODE, {"k8s-app": "machine-config-daemon"})


def budgets(api: SimApiServer) -> dict[str, dict[str, Any]]:
    """Our budgets, by the pod each is owned by."""
    return {
        b["metadata"]["ownerReferences"][0]["name"]: b
        for b in api.list(PDBS, MCO_NS, label_selector=OURS)
    }


async def protected(api: SimApiServer, *pods: str) -> dict[str, dict[str, Any]]:
    """Until exactly ``pods`` have a budget, each computed by the disruption controller."""

    def check() -> tuple[dict[str, dict[str, Any]]] | None:
        found = budgets(api)
        computed = all(
            (b.get("status") or {}).get("observedGeneration") == b["metadata"]["generation"]
            for b in found.values()
        )
        return (found,) if sorted(found) == sorted(pods) and computed else None  # () is falsy

    found = await api.wait_for(check, timeout=WAIT)
    assert found is not None
    return found[0]


def finish(api: SimApiServer, name: str) -> None:
    pod = api.get("pods", name, MCO_NS)
    pod["status"] = {"phase": "Succeeded", "conditions": []}
    api.update("pods", pod, MCO_NS, subresource="status")


def created_budgets(api: SimApiServer) -> list[str]:
    return [w.name for w in api.writes(PDBS) if w.user == SHIELD_USER and w.verb == "create"]


async def test_a_build_pod_on_any_node_gets_a_budget_and_its_eviction_is_refused(
    api: SimApiServer, start_shield: StartShield
) -> None:
    add_mco_pods(api)
    add_build_pod(api, "build-a-build", NODE)
    add_build_pod(api, "build-b-build", OTHER)
    shield = await start_shield()
    found = await protected(api, "build-a-build", "build-b-build")
    assert {pod: b["metadata"]["labels"][NODE_KEY] for pod, b in found.items()} == {
        "build-a-build": NODE,
        "build-b-build": OTHER,
    }
    for pod in found:
        with pytest.raises(ApiError) as refused:
            api.evict(pod, MCO_NS)
        assert refused.value.code == 429
    # MCO's own pods never get one: the drain evicts them as usual.
    api.evict("machine-os-builder-557cd", MCO_NS)
    assert set(budgets(api)) == {"build-a-build", "build-b-build"}
    assert await metric(shield, "drain_guard_shield_budgets") == 2


async def test_the_budget_goes_when_the_pod_finishes(
    api: SimApiServer, start_shield: StartShield
) -> None:
    add_build_pod(api, "build-b-build", OTHER)
    shield = await start_shield()
    await protected(api, "build-b-build")
    finish(api, "build-b-build")
    await protected(api)
    api.evict("build-b-build", MCO_NS)  # finished: evicted whatever the budgets
    assert await metric(shield, "drain_guard_shield_budgets") == 0


async def test_a_restart_resumes_on_the_budgets_left_without_making_them_again(
    api: SimApiServer, start_shield: StartShield
) -> None:
    add_build_pod(api, "build-a-build", NODE)
    add_build_pod(api, "build-b-build", OTHER)
    first = await start_shield()
    kept = await protected(api, "build-a-build", "build-b-build")
    await first.kill()  # no clean-up of any kind; the budgets stay and keep refusing
    with pytest.raises(ApiError):
        api.evict("build-a-build", MCO_NS)

    # While it is away: one build finishes, a new one starts.
    finish(api, "build-b-build")
    add_build_pod(api, "build-c-build", OTHER)
    await start_shield()
    now = await protected(api, "build-a-build", "build-c-build")
    assert now["build-a-build"]["metadata"]["uid"] == kept["build-a-build"]["metadata"]["uid"]
    assert sorted(created_budgets(api)) == [
        "drain-guard-build-a-build",
        "drain-guard-build-b-build",
        "drain-guard-build-c-build",
    ]


async def test_a_rolling_update_keeps_the_budgets_and_an_uninstall_removes_them(
    api: SimApiServer, start_shield: StartShield
) -> None:
    deployment = {"metadata": {"name": "drain-guard-shield"}, "spec": {"replicas": 1}}
    api.create("deployments", deployment, "drain-guard")
    flags = ("--deployment", "drain-guard/drain-guard-shield")
    add_build_pod(api, "build-a-build", NODE)
    shield = await start_shield(*flags)
    await protected(api, "build-a-build")
    assert await shield.stop(signal.SIGTERM) == 0
    assert set(budgets(api)) == {"build-a-build"}

    shield = await start_shield(*flags)
    api.delete("deployments", "drain-guard-shield", "drain-guard")
    assert await shield.stop(signal.SIGTERM) == 0
    assert budgets(api) == {}
    await shield.wait_log(lambda r: r.get("message") == "on exit: removed 1 shield budgets")


async def test_a_deployment_that_does_not_exist_is_refused_at_start(
    start_shield: StartShield,
) -> None:
    shield = await start_shield("--deployment", "drain-guard/nope", synced=False)
    async with asyncio.timeout(WAIT):
        await shield.closed()
    assert shield.proc.returncode == 2
    errors = [line for line in shield.lines if '"ERROR"' in line]
    assert len(errors) == 1
    # Its Role may read its own Deployment only: any other name is refused (403) as absent.
    assert "--deployment drain-guard/nope: cannot read it (403" in errors[0]


async def test_endpoints_serve_the_shield_and_the_metrics_that_mean_the_same(
    api: SimApiServer, start_shield: StartShield
) -> None:
    add_build_pod(api, "build-b-build", OTHER)
    shield = await start_shield()
    await protected(api, "build-b-build")
    assert await shield.http("/healthz") == (200, "ok\n")
    assert await shield.http("/readyz") == (200, "ok\n")
    code, text = await shield.http("/status?format=text")
    assert code == 200
    assert f"{MCO_NS}/build-b-build on {OTHER}" in text
    code, body = await shield.http("/status")
    assert '"node": "*"' in body
    for resource in ("pod", "poddisruptionbudget"):
        assert await metric(shield, "drain_guard_synced", resource=resource) == 1
    code, exposition = await shield.http("/metrics")
    assert "drain_guard_build_info" in exposition
    # An agent's metrics that mean nothing here are not served (a Node, holds, Events).
    for absent in ("drain_guard_hold_active", 'resource="node"', "drain_guard_confined"):
        assert absent not in exposition


async def test_every_request_the_shield_sent_is_in_its_permissions(
    api: SimApiServer, start_shield: StartShield
) -> None:
    api.create("deployments", {"metadata": {"name": "drain-guard-shield"}}, "drain-guard")
    add_build_pod(api, "build-a-build", NODE)
    shield = await start_shield("--deployment", "drain-guard/drain-guard-shield")
    await protected(api, "build-a-build")
    finish(api, "build-a-build")
    await protected(api)
    assert await shield.stop() == 0
    sent = {
        (verb, resource, namespace_of(path))
        for _t, user, verb, resource, path, _status in api.request_log
        if user == SHIELD_USER
    }
    assert ("create", f"{PDBS}.policy", MCO_NS) in sent
    assert ("delete", f"{PDBS}.policy", MCO_NS) in sent
    assert ("get", "deployments.apps", "drain-guard") in sent
    for verb, resource, namespace in sent:
        plural, _, group = resource.partition(".")
        assert permissions.allowed(
            group, plural, verb, namespace, permissions.SHIELD_PERMISSIONS
        ), (verb, resource, namespace)


async def test_it_answers_its_probes_while_its_start_up_check_waits_for_the_api(
    api: SimApiServer, start_shield: StartShield
) -> None:
    """Issue 25: alive (liveness 200) and not ready until its start-up check has passed; a
    SIGTERM meanwhile is a clean stop."""
    api.faults.error(503, user=SHIELD_USER)
    shield = await start_shield("--deployment", "drain-guard/drain-guard-shield", synced=False)
    await shield.wait_log(
        lambda r: (
            "checking --deployment" in r.get("message", "")
            and "API unreachable since" in r.get("message", "")
        )
    )
    assert await shield.http("/healthz") == (200, "ok\n")
    assert await shield.http("/readyz") == (503, "waiting for the API\n")
    assert await shield.stop() == 0


async def test_it_is_never_sent_mcos_own_pods_and_lists_once_per_selector_at_start(
    api: SimApiServer, start_shield: StartShield
) -> None:
    """Its pod watches are by the build-pod selectors: an MCO daemon pod per node (which grows
    with the cluster) is never sent to it, and its lists at start are one per selector, not one
    more per build pod (its watches show every pod a budget by a pod's labels would select)."""
    served: list[str] = []
    api.serve_hooks.append(
        lambda user, resource, obj: (
            served.append(obj["metadata"]["name"])
            if user == SHIELD_USER and resource == "pods"
            else None
        )
    )
    add_mco_pods(api)
    builds = [f"build-{i}-build" for i in range(6)]
    for i, name in enumerate(builds):
        add_build_pod(api, name, NODE if i % 2 else OTHER)
    shield = await start_shield()
    await protected(api, *builds)
    add_pod(api, "machine-config-daemon-q9z4t", OTHER, {"k8s-app": "machine-config-daemon"})
    add_build_pod(api, "build-late-build", NODE)
    await protected(api, *builds, "build-late-build")
    assert sorted(set(served)) == sorted([*builds, "build-late-build"])
    selectors = len(central.pod_watch_selectors(default_build_pod_selectors()))
    assert api.requests[(SHIELD_USER, "list", "pods")] == selectors
    assert await metric(shield, "drain_guard_synced", resource="pod") == 1


async def test_a_pod_whose_labels_a_budget_would_share_is_unshieldable_without_a_list(
    api: SimApiServer, start_shield: StartShield
) -> None:
    """A budget by build-x's labels would also select copy-x (the same labels and one more):
    build-x is reported unshieldable; copy-x, singled out by its extra label, is shielded."""
    add_build_pod(api, "build-x-build", NODE)
    add_pod(api, "copy-x", OTHER, {"openshift.io/build.name": "build-x", "extra": "y"})
    shield = await start_shield()
    await protected(api, "copy-x")
    _, text = await shield.http("/status?format=text")
    assert f"unshieldable:  {MCO_NS}/build-x-build on {NODE}: its labels also select copy-x" in text
    selectors = len(central.pod_watch_selectors(default_build_pod_selectors()))
    assert api.requests[(SHIELD_USER, "list", "pods")] == selectors
