"""Owner references and the garbage collector, for the dependents drain-guard makes: the
shield's PodDisruptionBudget owned by the build pod goes when the pod goes, also when nobody
else is left to delete it."""

from __future__ import annotations

from tests.conformance.client import Client
from tests.conformance.objects import budget, create_pod, pods_path


def _owned_budget(name: str, owner: dict[str, str]) -> dict[str, object]:
    body = budget(name, {"app": "x"}, maxUnavailable=0)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": owner["name"], "uid": owner["uid"]}
    ]
    return body


async def test_a_budget_owned_by_a_pod_goes_with_the_pod(admin: Client, ns: str) -> None:
    owner = await create_pod(admin, ns, "build", f"{ns}-n0", labels={"app": "x"})
    budgets = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    ref = {"name": "build", "uid": owner["metadata"]["uid"]}
    await admin.ok("POST", budgets, _owned_budget("shield", ref))
    await admin.ok("DELETE", pods_path(ns, "build"))
    await admin.wait_gone(f"{budgets}/shield")


async def test_a_budget_whose_owner_never_existed_is_collected(admin: Client, ns: str) -> None:
    """An owner reference with a uid no object has: the collector confirms the owner's absence
    and deletes the dependent."""
    await create_pod(admin, ns, "build", f"{ns}-n0", labels={"app": "x"})
    budgets = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    ref = {"name": "build", "uid": "00000000-0000-0000-0000-000000000000"}
    await admin.ok("POST", budgets, _owned_budget("stale", ref))
    await admin.wait_gone(f"{budgets}/stale")
    assert (await admin.get(pods_path(ns, "build"))).status == 200
