"""Status subresources and server-side dry run: what a write to the main resource keeps of the
status (nothing), what a status write keeps of the rest (nothing but status), and a dry run
that answers as the write would and stores nothing."""

from __future__ import annotations

from tests.conformance.client import MERGE_PATCH, Client
from tests.conformance.objects import node, pod, pods_path


async def test_create_ignores_a_pods_status(admin: Client, ns: str) -> None:
    body = pod("p", f"{ns}-n0")
    body["status"] = {"phase": "Running"}
    created = await admin.ok("POST", pods_path(ns), body)
    assert created["status"].get("phase") == "Pending"


async def test_a_main_resource_write_keeps_the_status(admin: Client, ns: str) -> None:
    await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    await admin.ok(
        "PATCH",
        pods_path(ns, "p") + "/status",
        {"status": {"phase": "Running"}},
        content_type=MERGE_PATCH,
    )
    patched = await admin.ok(
        "PATCH",
        pods_path(ns, "p"),
        {"metadata": {"labels": {"a": "b"}}, "status": {"phase": "Failed"}},
        content_type=MERGE_PATCH,
    )
    assert patched["status"]["phase"] == "Running"
    assert patched["metadata"]["labels"] == {"a": "b"}


async def test_a_status_write_keeps_the_spec(admin: Client, ns: str) -> None:
    await admin.ok("POST", "/api/v1/nodes", node(f"{ns}-n0"))
    path = f"/api/v1/nodes/{ns}-n0"
    patched = await admin.ok(
        "PATCH",
        path + "/status",
        {"spec": {"unschedulable": True}, "status": {"capacity": {"pods": "110"}}},
        content_type=MERGE_PATCH,
    )
    assert patched["status"]["capacity"] == {"pods": "110"}
    assert not patched.get("spec", {}).get("unschedulable")
    got = await admin.ok("GET", path + "/status")
    assert got["status"]["capacity"] == {"pods": "110"}
    assert not got.get("spec", {}).get("unschedulable")


async def test_dry_run_create_answers_and_stores_nothing(admin: Client, ns: str) -> None:
    answer = await admin.post(pods_path(ns), pod("p", f"{ns}-n0"), dryRun="All")
    assert answer.status == 201
    assert answer.body["metadata"]["name"] == "p"
    assert answer.body["metadata"]["uid"]
    assert (await admin.get(pods_path(ns, "p"))).status == 404


async def test_dry_run_patch_and_delete_change_nothing(admin: Client, ns: str) -> None:
    created = await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    patched = await admin.patch(
        pods_path(ns, "p"), {"metadata": {"labels": {"a": "b"}}}, MERGE_PATCH, dryRun="All"
    )
    assert patched.status == 200
    assert patched.body["metadata"]["labels"] == {"a": "b"}
    deleted = await admin.delete(pods_path(ns, "p"), dryRun="All")
    assert deleted.status == 200
    current = await admin.ok("GET", pods_path(ns, "p"))
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert not current["metadata"].get("labels")


async def test_an_unknown_dry_run_value_is_422(admin: Client, ns: str) -> None:
    answer = await admin.post(pods_path(ns), pod("p", f"{ns}-n0"), dryRun="Some")
    assert answer.status == 422
    assert answer.reason == "Invalid"
    assert answer.body["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: '
        'dryRun: Unsupported value: ["Some"]: supported values: "All"'
    )
    assert (await admin.get(pods_path(ns, "p"))).status == 404
