"""The eviction subresource and PodDisruptionBudget status, as the API server and the
disruption controller produce them (eviction.go, disruption.go)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.apiserver.identities import DISRUPTION_CONTROLLER
from drain_guard_sim.apiserver.server import SimApiServer
from tests.sim.helpers import NS, pdb, pod, status_body


def eviction(name: str) -> client.V1Eviction:
    return client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS))


async def evict(kube: client.ApiClient, name: str) -> Any:
    return await client.CoreV1Api(kube).create_namespaced_pod_eviction(name, NS, eviction(name))


def pdb_status(sim: SimApiServer, name: str) -> dict[str, Any]:
    status: dict[str, Any] = sim.get("poddisruptionbudgets", name, NS)["status"]
    return status


WEB = {"matchLabels": {"app": "web"}}


async def test_evicting_a_pod_without_budget_deletes_it(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    sim.create("pods", pod("p"))
    await evict(kube, "p")
    assert sim.try_get("pods", "p", NS) is None
    (record,) = sim.writes("pods", name="p", verb="create", since=0)[-1:]
    assert record.subresource == "eviction"
    assert record.after is None


async def test_eviction_answer_on_the_wire(sim: SimApiServer, http: aiohttp.ClientSession) -> None:
    sim.create("pods", pod("p"))
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}
    async with http.post(f"/api/v1/namespaces/{NS}/pods/p/eviction", json=body) as resp:
        assert resp.status == 201
        assert await resp.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
    sim.create("pods", pod("q"))
    async with http.post(f"/api/v1/namespaces/{NS}/pods/q/eviction", json=body) as resp:
        assert resp.status == 400  # the name in the body must match the URL
        assert (await resp.json())["message"] == (
            "name in URL does not match name in Eviction object"
        )


async def test_evicting_a_missing_pod_is_404(kube: client.ApiClient) -> None:
    with pytest.raises(ApiException) as info:
        await evict(kube, "nope")
    assert info.value.status == 404


async def test_budget_with_no_disruption_allowed_is_429(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    sim.create("pods", pod("p", labels={"app": "web"}))
    sim.create("poddisruptionbudgets", pdb("web", WEB, min_available=1))
    assert pdb_status(sim, "web")["disruptionsAllowed"] == 0
    with pytest.raises(ApiException) as info:
        await evict(kube, "p")
    assert info.value.status == 429
    assert status_body(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 1 healthy pods and has 1 currently",
                }
            ]
        },
        "code": 429,
    }
    assert sim.try_get("pods", "p", NS) is not None


async def test_budget_allowing_a_disruption_evicts_and_is_recomputed(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    for name in ("a", "b", "c"):
        sim.create("pods", pod(name, labels={"app": "web"}))
    sim.create("poddisruptionbudgets", pdb("web", WEB, min_available=2))
    assert pdb_status(sim, "web")["disruptionsAllowed"] == 1
    await evict(kube, "a")
    assert sim.try_get("pods", "a", NS) is None
    status = pdb_status(sim, "web")
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (
        2,
        2,
        0,
    )
    # the eviction decremented the budget before deleting (and recorded the disrupted pod)
    decrement = next(
        w for w in sim.writes("poddisruptionbudgets", name="web") if w.user == "system:apiserver"
    )
    assert decrement.after is not None
    assert decrement.after["status"]["disruptionsAllowed"] == 0
    assert "a" in decrement.after["status"]["disruptedPods"]
    with pytest.raises(ApiException) as info:
        await evict(kube, "b")
    assert info.value.status == 429


async def test_pod_under_two_budgets_is_500(sim: SimApiServer, kube: client.ApiClient) -> None:
    sim.create("pods", pod("p", labels={"app": "web", "team": "x"}))
    sim.create("poddisruptionbudgets", pdb("one", WEB, max_unavailable=5))
    sim.create("poddisruptionbudgets", pdb("two", {"matchLabels": {"team": "x"}},
                                           max_unavailable=5))  # fmt: skip
    with pytest.raises(ApiException) as info:
        await evict(kube, "p")
    assert info.value.status == 500
    assert status_body(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction "
        "subresource does not support.",
        "code": 500,
    }
    assert sim.try_get("pods", "p", NS) is not None


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Pending"])
async def test_terminal_or_pending_pod_is_evicted_regardless_of_budgets(
    sim: SimApiServer, kube: client.ApiClient, phase: str
) -> None:
    sim.create("pods", pod("p", labels={"app": "web"}, phase=phase, ready=False))
    sim.create("poddisruptionbudgets", pdb("one", WEB, min_available=10))
    sim.create("poddisruptionbudgets", pdb("two", WEB, min_available=10))
    await evict(kube, "p")
    assert sim.try_get("pods", "p", NS) is None


async def test_unready_pod_is_evicted_when_the_budget_is_healthy(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    sim.create("pods", pod("ok1", labels={"app": "web"}))
    sim.create("pods", pod("ok2", labels={"app": "web"}))
    sim.create("pods", pod("sick", labels={"app": "web"}, ready=False))
    sim.create("poddisruptionbudgets", pdb("web", WEB, min_available=2))
    assert pdb_status(sim, "web")["disruptionsAllowed"] == 0
    await evict(kube, "sick")  # currentHealthy 2 >= desiredHealthy 2: no budget needed
    assert sim.try_get("pods", "sick", NS) is None
    with pytest.raises(ApiException) as info:
        await evict(kube, "ok1")
    assert info.value.status == 429


async def test_empty_selector_budget_does_not_guard_evictions(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    sim.create("pods", pod("p", labels={"app": "web"}))
    sim.create("poddisruptionbudgets", pdb("all", {}, min_available=1))
    # the controller counts every pod for an empty policy/v1 selector ...
    assert pdb_status(sim, "all")["expectedPods"] == 1
    # ... but the eviction handler treats an empty selector as matching nothing
    await evict(kube, "p")
    assert sim.try_get("pods", "p", NS) is None


@pytest.mark.parametrize(
    ("spec", "ready", "expected"),
    [
        # (desiredHealthy, currentHealthy, expectedPods, disruptionsAllowed)
        ({"min_available": 2}, 3, (2, 3, 3, 1)),
        ({"min_available": "50%"}, 3, (2, 3, 3, 1)),  # ceil(1.5)
        ({"min_available": "100%"}, 3, (3, 3, 3, 0)),
        ({"max_unavailable": 1}, 3, (2, 3, 3, 1)),
        ({"max_unavailable": "34%"}, 3, (1, 3, 3, 2)),  # ceil(1.02) = 2 unavailable
        ({"max_unavailable": 0}, 3, (3, 3, 3, 0)),
        ({"min_available": 1}, 1, (1, 1, 3, 0)),  # two of three pods not ready
        ({"min_available": 0}, 0, (0, 0, 3, 0)),
    ],
)
async def test_pdb_status_is_computed(
    sim: SimApiServer,
    kube: client.ApiClient,
    spec: dict[str, Any],
    ready: int,
    expected: tuple[int, int, int, int],
) -> None:
    web = sim.create(
        "deployments",
        {"metadata": {"name": "web", "namespace": NS}, "spec": {"replicas": 3}},
        NS,
    )
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
             "uid": web["metadata"]["uid"], "controller": True}  # fmt: skip
    for i in range(3):
        owned = pod(f"p{i}", labels={"app": "web"}, ready=i < ready)
        owned["metadata"]["ownerReferences"] = [owner]
        sim.create("pods", owned)
    sim.create("pods", pod("other", labels={"app": "db"}))
    created = await client.PolicyV1Api(kube).create_namespaced_pod_disruption_budget(
        NS, pdb("web", WEB, **spec)
    )
    assert created.status is None or not created.status.expected_pods  # reset on create
    read = await client.PolicyV1Api(kube).read_namespaced_pod_disruption_budget("web", NS)
    status = read.status
    assert (
        status.desired_healthy,
        status.current_healthy,
        status.expected_pods,
        status.disruptions_allowed,
    ) == expected
    assert status.observed_generation == read.metadata.generation
    (condition,) = status.conditions
    assert condition.type == "DisruptionAllowed"
    assert condition.status == ("True" if expected[3] > 0 else "False")
    assert condition.reason == ("SufficientPods" if expected[3] > 0 else "InsufficientPods")
    assert sim.writes("poddisruptionbudgets", user=DISRUPTION_CONTROLLER)


async def test_a_scaled_budget_counts_only_controllers_scale(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    """maxUnavailable over pods without a controller: they count 0 expected (getExpectedScale
    skips unmanaged pods), so nothing may be disrupted; over a DaemonSet's pods (no scale) the
    sync fails (failSafe: condition SyncFailed)."""
    for i in range(2):
        sim.create("pods", pod(f"bare{i}", labels={"app": "bare"}))
    sim.create("poddisruptionbudgets", pdb("bare", {"matchLabels": {"app": "bare"}},
                                           max_unavailable=1))  # fmt: skip
    status = sim.get("poddisruptionbudgets", "bare", NS)["status"]
    assert (status["expectedPods"], status["currentHealthy"], status["disruptionsAllowed"]) == (
        0,
        2,
        0,
    )
    ds = sim.create("daemonsets", {"metadata": {"name": "agent", "namespace": NS}}, NS)
    owned = pod("agent-x", labels={"app": "agent"})
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
         "uid": ds["metadata"]["uid"], "controller": True}
    ]  # fmt: skip
    sim.create("pods", owned)
    sim.create("poddisruptionbudgets", pdb("agent", {"matchLabels": {"app": "agent"}},
                                           max_unavailable=1))  # fmt: skip
    failed = sim.get("poddisruptionbudgets", "agent", NS)["status"]
    assert failed["disruptionsAllowed"] == 0
    [condition] = failed["conditions"]
    assert (condition["reason"], condition["message"]) == (
        "SyncFailed",
        'found no controllers for pod "agent-x"',
    )


async def test_pdb_status_follows_pod_changes(sim: SimApiServer) -> None:
    sim.create("poddisruptionbudgets", pdb("web", WEB, min_available=1))
    assert pdb_status(sim, "web")["expectedPods"] == 0
    sim.create("pods", pod("a", labels={"app": "web"}))
    sim.create("pods", pod("b", labels={"app": "web"}, ready=False))
    assert pdb_status(sim, "web")["disruptionsAllowed"] == 0
    sim.patch(
        "pods",
        "b",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        NS,
        subresource="status",
    )
    assert pdb_status(sim, "web")["disruptionsAllowed"] == 1
    sim.delete("pods", "a", NS)
    assert pdb_status(sim, "web")["currentHealthy"] == 1
    assert pdb_status(sim, "web")["disruptionsAllowed"] == 0
