"""Create, get and list as a client sees them, with label and field selectors (the agent's
pod watch selects ``spec.nodeName``), and the ``Status`` bodies of the errors."""

from __future__ import annotations

from tests.conformance.client import Client
from tests.conformance.objects import create_pod, node, pod, pods_path


async def test_create_then_get_returns_the_stored_object(admin: Client, ns: str) -> None:
    created = await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    got = await admin.ok("GET", pods_path(ns, "p"))
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert got["metadata"]["namespace"] == ns
    assert (got["kind"], got["apiVersion"]) == ("Pod", "v1")


async def test_create_twice_is_409_already_exists(admin: Client, ns: str) -> None:
    await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    again = await admin.post(pods_path(ns), pod("p", f"{ns}-n0"))
    assert again.status == 409
    assert again.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "p" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "p", "kind": "pods"},
        "code": 409,
    }


async def test_get_missing_is_404_not_found_with_details(admin: Client, ns: str) -> None:
    missing = await admin.get(pods_path(ns, "nothing"))
    assert missing.status == 404
    assert missing.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nothing" not found',
        "reason": "NotFound",
        "details": {"name": "nothing", "kind": "pods"},
        "code": 404,
    }
    budget = await admin.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/b")
    assert budget.body["details"] == {
        "name": "b",
        "group": "policy",
        "kind": "poddisruptionbudgets",
    }


async def test_label_selectors_equality_set_and_existence(admin: Client, ns: str) -> None:
    for name, labels in (
        ("a", {"app": "x", "tier": "web"}),
        ("b", {"app": "y", "tier": "web"}),
        ("c", {"app": "z"}),
    ):
        await admin.ok("POST", pods_path(ns), pod(name, f"{ns}-n0", labels))

    async def names(selector: str) -> list[str]:
        listed = await admin.ok("GET", pods_path(ns), params={"labelSelector": selector})
        return sorted(i["metadata"]["name"] for i in listed["items"])

    assert await names("app=x") == ["a"]
    assert await names("app!=x") == ["b", "c"]
    assert await names("app in (x,z)") == ["a", "c"]
    assert await names("app notin (x,z)") == ["b"]
    assert await names("tier") == ["a", "b"]
    assert await names("!tier") == ["c"]
    assert await names("tier=web,app=y") == ["b"]


async def test_field_selector_on_node_name_and_phase(admin: Client, ns: str) -> None:
    await create_pod(admin, ns, "on-0", f"{ns}-n0")
    await create_pod(admin, ns, "on-1", f"{ns}-n1")
    await create_pod(admin, ns, "pending-0", f"{ns}-n0", phase="Pending", ready=False)

    async def names(selector: str, path: str = pods_path(ns)) -> list[str]:
        listed = await admin.ok("GET", path, params={"fieldSelector": selector})
        return sorted(
            i["metadata"]["name"] for i in listed["items"] if i["metadata"]["namespace"] == ns
        )

    assert await names(f"spec.nodeName={ns}-n0") == ["on-0", "pending-0"]
    assert await names(f"spec.nodeName={ns}-n0", "/api/v1/pods") == ["on-0", "pending-0"]
    assert await names(f"spec.nodeName={ns}-n0,status.phase=Running") == ["on-0"]
    assert await names(f"spec.nodeName!={ns}-n0") == ["on-1"]
    assert await names("metadata.name=on-1") == ["on-1"]


async def test_node_field_selector_on_its_name(admin: Client, ns: str) -> None:
    for suffix in ("n0", "n1"):
        await admin.ok("POST", "/api/v1/nodes", node(f"{ns}-{suffix}"))
    listed = await admin.ok(
        "GET", "/api/v1/nodes", params={"fieldSelector": f"metadata.name={ns}-n1"}
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == [f"{ns}-n1"]
    for suffix in ("n0", "n1"):
        await admin.delete(f"/api/v1/nodes/{ns}-{suffix}")


async def test_an_unsupported_field_label_is_400_bad_request(admin: Client, ns: str) -> None:
    answer = await admin.get(pods_path(ns), fieldSelector="spec.image=x")
    assert answer.status == 400
    assert answer.reason == "BadRequest"
    assert answer.body["message"] == "field label not supported: spec.image"


async def test_list_pages_with_limit_and_continue(admin: Client, ns: str) -> None:
    for i in range(5):
        await admin.ok("POST", pods_path(ns), pod(f"p{i}", f"{ns}-n0"))
    seen: list[str] = []
    params = {"limit": "2"}
    pages = 0
    while True:
        page = await admin.ok("GET", pods_path(ns), params=params)
        pages += 1
        seen.extend(i["metadata"]["name"] for i in page["items"])
        cont = page["metadata"].get("continue")
        if not cont:
            break
        assert page["metadata"]["remainingItemCount"] == 5 - len(seen)
        params = {"limit": "2", "continue": cont}
    assert seen == [f"p{i}" for i in range(5)]
    assert pages == 3
