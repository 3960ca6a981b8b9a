"""The eviction API with PodDisruptionBudgets, as the drain controller and the agent's shield
meet it: the budget's status (computed by the disruption controller), 429 with the budget's
cause, what is evicted regardless (pending pods; unready ones while the budget is healthy)."""

from __future__ import annotations

from tests.conformance.client import Client, JsonObj
from tests.conformance.objects import budget, create_pod, eviction, pods_path

APP = {"app": "guarded"}


def _budgets(ns: str, name: str = "") -> str:
    return f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets" + (f"/{name}" if name else "")


async def _settled(admin: Client, ns: str, name: str, **expected: int) -> JsonObj:
    """The budget once its status is for its current generation and says ``expected``."""

    def done(obj: JsonObj) -> bool:
        status = obj.get("status") or {}
        return status.get("observedGeneration") == obj["metadata"].get("generation") and all(
            status.get(k) == v for k, v in expected.items()
        )

    return await admin.wait_for(_budgets(ns, name), done)


async def _evict(admin: Client, ns: str, name: str) -> tuple[int, JsonObj]:
    answer = await admin.post(pods_path(ns, name) + "/eviction", eviction(name))
    return answer.status, answer.body


async def test_budget_status_counts_healthy_pods(admin: Client, ns: str) -> None:
    node = f"{ns}-n0"
    for name in ("a", "b", "c"):
        await create_pod(admin, ns, name, node, labels=APP)
    await create_pod(admin, ns, "unready", node, labels=APP, ready=False)
    await admin.ok("POST", _budgets(ns), budget("pdb", APP, minAvailable=2))
    settled = await _settled(admin, ns, "pdb", currentHealthy=3)
    status = settled["status"]
    assert (status["desiredHealthy"], status["expectedPods"], status["disruptionsAllowed"]) == (
        2,
        4,
        1,
    )


async def test_a_scaled_budget_over_pods_without_a_controller_allows_nothing(
    admin: Client, ns: str
) -> None:
    """maxUnavailable needs the pods' controllers' scale: bare pods count 0 expected, so no
    disruption is allowed however many are healthy (why the shield's budgets use
    minAvailable: 1)."""
    for name in ("a", "b"):
        await create_pod(admin, ns, name, f"{ns}-n0", labels=APP)
    await admin.ok("POST", _budgets(ns), budget("pdb", APP, maxUnavailable=1))
    settled = await _settled(admin, ns, "pdb", currentHealthy=2)
    status = settled["status"]
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (
        0,
        0,
        0,
    )
    code, body = await _evict(admin, ns, "a")
    assert code == 429
    assert body["reason"] == "TooManyRequests"


async def test_eviction_within_the_budget_is_201_and_the_pod_goes(admin: Client, ns: str) -> None:
    node = f"{ns}-n0"
    for name in ("a", "b"):
        await create_pod(admin, ns, name, node, labels=APP)
    await admin.ok("POST", _budgets(ns), budget("pdb", APP, minAvailable=1))
    await _settled(admin, ns, "pdb", disruptionsAllowed=1)
    code, body = await _evict(admin, ns, "a")
    assert code == 201
    assert (body["kind"], body["status"]) == ("Status", "Success")
    assert (await admin.get(pods_path(ns, "a"))).status == 404


async def test_eviction_beyond_the_budget_is_429_with_the_budgets_cause(
    admin: Client, ns: str
) -> None:
    node = f"{ns}-n0"
    for name in ("a", "b"):
        await create_pod(admin, ns, name, node, labels=APP)
    await admin.ok("POST", _budgets(ns), budget("pdb", APP, minAvailable=2))
    await _settled(admin, ns, "pdb", currentHealthy=2, disruptionsAllowed=0)
    answer = await admin.post(pods_path(ns, "a") + "/eviction", eviction("a"))
    assert answer.status == 429
    assert answer.body == {
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
                    "message": "The disruption budget pdb needs 2 healthy pods and has 2 currently",
                }
            ]
        },
        "code": 429,
    }
    assert (await admin.get(pods_path(ns, "a"))).status == 200


async def test_a_pending_pod_is_evicted_whatever_its_budget(admin: Client, ns: str) -> None:
    node = f"{ns}-n0"
    await create_pod(admin, ns, "a", node, labels=APP)
    await create_pod(admin, ns, "pending", node, labels=APP, phase="Pending", ready=False)
    await admin.ok("POST", _budgets(ns), budget("pdb", APP, minAvailable=2))
    await _settled(admin, ns, "pdb", currentHealthy=1, disruptionsAllowed=0)
    assert (await _evict(admin, ns, "pending"))[0] == 201
    assert (await admin.get(pods_path(ns, "pending"))).status == 404


async def test_an_unready_pod_is_evicted_while_the_budget_is_healthy(
    admin: Client, ns: str
) -> None:
    """unhealthyPodEvictionPolicy IfHealthyBudget (the default): an unready running pod may go
    when the budget has its healthy pods (even with no disruption left), not otherwise."""
    node = f"{ns}-n0"
    for name in ("a", "b"):
        await create_pod(admin, ns, name, node, labels=APP)
    for name in ("sick-1", "sick-2"):
        await create_pod(admin, ns, name, node, labels=APP, ready=False)
    await admin.ok("POST", _budgets(ns), budget("pdb", APP, minAvailable=2))
    await _settled(admin, ns, "pdb", currentHealthy=2, disruptionsAllowed=0)
    assert (await _evict(admin, ns, "sick-1"))[0] == 201
    await admin.ok(
        "PATCH",
        _budgets(ns, "pdb"),
        {"spec": {"minAvailable": 3}},
        content_type="application/merge-patch+json",
    )
    await _settled(admin, ns, "pdb", desiredHealthy=3, currentHealthy=2)
    code, body = await _evict(admin, ns, "sick-2")
    assert code == 429
    assert body["reason"] == "TooManyRequests"


async def test_an_unready_pod_is_evicted_with_always_allow(admin: Client, ns: str) -> None:
    node = f"{ns}-n0"
    await create_pod(admin, ns, "a", node, labels=APP)
    await create_pod(admin, ns, "sick", node, labels=APP, ready=False)
    await admin.ok(
        "POST",
        _budgets(ns),
        budget("pdb", APP, minAvailable=2, unhealthyPodEvictionPolicy="AlwaysAllow"),
    )
    await _settled(admin, ns, "pdb", currentHealthy=1, disruptionsAllowed=0)
    assert (await _evict(admin, ns, "sick"))[0] == 201


async def test_a_pod_with_two_budgets_is_500(admin: Client, ns: str) -> None:
    await create_pod(admin, ns, "a", f"{ns}-n0", labels=APP)
    for name in ("one", "two"):
        await admin.ok("POST", _budgets(ns), budget(name, APP, minAvailable=0))
        await _settled(admin, ns, name, currentHealthy=1, disruptionsAllowed=1)
    code, body = await _evict(admin, ns, "a")
    assert code == 500
    assert body["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource "
        "does not support."
    )


async def test_eviction_of_a_missing_pod_is_404(admin: Client, ns: str) -> None:
    code, body = await _evict(admin, ns, "nothing")
    assert code == 404
    assert body["details"] == {"name": "nothing", "kind": "pods"}
