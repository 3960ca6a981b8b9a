"""CRUD semantics through kubernetes_asyncio over HTTP, as a real server has them."""

from __future__ import annotations

import re

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.apiserver.server import ApiError, SimApiServer
from tests.sim.helpers import NS, node, pdb, pod, status_body


async def test_create_sets_metadata_and_bumps_the_cluster_resource_version(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    v1 = client.CoreV1Api(kube)
    before = sim.resource_version
    created = await v1.create_node(node("worker-0"))
    assert int(created.metadata.resource_version) == before + 1
    assert re.fullmatch(r"[0-9a-f-]{36}", created.metadata.uid)
    assert created.metadata.creation_timestamp is not None
    p = await v1.create_namespaced_pod(NS, pod("p"))
    assert int(p.metadata.resource_version) == before + 2  # one counter for every resource
    pdb_obj = await client.PolicyV1Api(kube).create_namespaced_pod_disruption_budget(
        NS, pdb("b", {}, min_available=1)
    )
    assert pdb_obj.metadata.generation == 1
    listed = await v1.list_node()
    assert listed.metadata.resource_version == str(sim.resource_version)
    assert [n.metadata.name for n in listed.items] == ["worker-0"]


async def test_create_over_http_resets_pod_status_like_the_real_strategy(
    kube: client.ApiClient,
) -> None:
    v1 = client.CoreV1Api(kube)
    created = await v1.create_namespaced_pod(NS, pod("p", phase="Running"))
    assert created.status.phase == "Pending"


async def test_create_existing_name_is_409_already_exists(kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    await v1.create_node(node("worker-0"))
    with pytest.raises(ApiException) as info:
        await v1.create_node(node("worker-0"))
    assert info.value.status == 409
    assert status_body(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "worker-0" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "worker-0", "kind": "nodes"},
        "code": 409,
    }


async def test_not_found_is_a_status_object(kube: client.ApiClient) -> None:
    with pytest.raises(ApiException) as info:
        await client.CoreV1Api(kube).read_namespaced_pod("nope", NS)
    assert info.value.status == 404
    assert status_body(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }
    with pytest.raises(ApiException) as info:
        await client.PolicyV1Api(kube).read_namespaced_pod_disruption_budget("nope", NS)
    body = status_body(info.value)
    assert body["message"] == 'poddisruptionbudgets.policy "nope" not found'
    assert body["details"] == {"name": "nope", "group": "policy", "kind": "poddisruptionbudgets"}


async def test_put_with_stale_resource_version_is_409_conflict(kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    first = await v1.create_node(node("worker-0"))
    first.metadata.labels = {"a": "1"}
    await v1.replace_node("worker-0", first)  # rv matches: accepted
    first.metadata.labels = {"a": "2"}
    with pytest.raises(ApiException) as info:
        await v1.replace_node("worker-0", first)  # same (now stale) rv
    assert info.value.status == 409
    body = status_body(info.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on nodes "worker-0": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


async def test_patch_carrying_stale_resource_version_is_409(kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    created = await v1.create_node(node("worker-0"))
    rv = created.metadata.resource_version
    await v1.patch_node("worker-0", {"metadata": {"labels": {"x": "1"}}})
    for body in (
        {"metadata": {"resourceVersion": rv, "labels": {"x": "2"}}},
        [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/labels/x", "value": "3"},
        ],
    ):
        with pytest.raises(ApiException) as info:
            await v1.patch_node("worker-0", body)
        assert info.value.status == 409
        assert status_body(info.value)["reason"] == "Conflict"
    assert (await v1.read_node("worker-0")).metadata.labels == {"x": "1"}


async def test_json_patch_failed_test_op_is_422_invalid(kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    await v1.create_node(node("worker-0", a="1"))
    ops = [
        {"op": "test", "path": "/metadata/annotations/a", "value": "2"},
        {"op": "replace", "path": "/metadata/annotations/a", "value": "3"},
    ]
    with pytest.raises(ApiException) as info:
        await v1.patch_node("worker-0", ops)
    assert info.value.status == 422
    # patch.go answers NewGenericServerResponse(422, ...): the generic message, empty details
    assert status_body(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server rejected our request due to an error in our request",
        "reason": "Invalid",
        "details": {},
        "code": 422,
    }
    # a missing path is the same 422; the object is untouched
    with pytest.raises(ApiException) as info:
        await v1.patch_node("worker-0", [{"op": "remove", "path": "/metadata/annotations/zz"}])
    assert info.value.status == 422
    assert (await v1.read_node("worker-0")).metadata.annotations == {"a": "1"}
    ops[0]["value"] = "1"
    patched = await v1.patch_node("worker-0", ops)
    assert patched.metadata.annotations == {"a": "3"}


async def test_json_patch_that_is_not_an_array_is_400(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.create("nodes", node("worker-0"))
    async with http.patch(
        "/api/v1/nodes/worker-0",
        data=b'{"op": "add"}',
        headers={"Content-Type": "application/json-patch+json"},
    ) as resp:
        assert resp.status == 400
        assert (await resp.json())["reason"] == "BadRequest"


async def test_merge_patch_rfc7386(sim: SimApiServer, http: aiohttp.ClientSession) -> None:
    sim.create("nodes", node("worker-0", a="1", b="2"))
    async with http.patch(
        "/api/v1/nodes/worker-0",
        json={"metadata": {"annotations": {"a": None, "c": "3"}}, "spec": {"taints": []}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["metadata"]["annotations"] == {"b": "2", "c": "3"}
    assert body["spec"]["taints"] == []


async def test_strategic_merge_patch_merges_maps_and_keyed_lists(kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    await v1.create_node(node("worker-0", a="1", b="2"))
    # kubernetes_asyncio sends a dict body to patch_node as a strategic merge patch
    patched = await v1.patch_node(
        "worker-0",
        {"metadata": {"annotations": {"b": None, "c": "3"}}, "spec": {"unschedulable": True}},
    )
    assert patched.metadata.annotations == {"a": "1", "c": "3"}
    assert patched.spec.unschedulable is True
    patched = await v1.patch_node("worker-0", {"spec": {"unschedulable": None}})
    assert patched.spec.unschedulable is None
    # status.conditions merge by "type" (patchMergeKey), through the status subresource
    await v1.patch_node_status(
        "worker-0",
        {"status": {"conditions": [{"type": "Ready", "status": "True"},
                                   {"type": "DiskPressure", "status": "False"}]}},
    )  # fmt: skip
    patched = await v1.patch_node_status(
        "worker-0", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    assert [(c.type, c.status) for c in patched.status.conditions] == [
        ("Ready", "False"),
        ("DiskPressure", "False"),
    ]


async def test_strategic_merge_patch_on_custom_resources_is_415(kube: client.ApiClient) -> None:
    crd = client.CustomObjectsApi(kube)
    mc = {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": "99-worker"},
        "spec": {"config": {}},
    }
    await crd.create_cluster_custom_object(
        "machineconfiguration.openshift.io", "v1", "machineconfigs", mc
    )
    with pytest.raises(ApiException) as info:
        await crd.patch_cluster_custom_object(
            "machineconfiguration.openshift.io",
            "v1",
            "machineconfigs",
            "99-worker",
            {"metadata": {"labels": {"a": "b"}}},
            _content_type="application/strategic-merge-patch+json",  # type: ignore[call-arg]
        )
    assert info.value.status == 415
    # kubernetes_asyncio sends a dict to CustomObjectsApi.patch_* as a JSON Patch (the first
    # content type it lists), which a real server rejects with 400: pass the merge type.
    with pytest.raises(ApiException) as info:
        await crd.patch_cluster_custom_object(
            "machineconfiguration.openshift.io",
            "v1",
            "machineconfigs",
            "99-worker",
            {"metadata": {"labels": {"a": "b"}}},
        )
    assert info.value.status == 400
    merged = await crd.patch_cluster_custom_object(
        "machineconfiguration.openshift.io",
        "v1",
        "machineconfigs",
        "99-worker",
        {"metadata": {"labels": {"a": "b"}}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    assert merged["metadata"]["labels"] == {"a": "b"}


async def test_custom_resource_put_without_resource_version_is_422(
    kube: client.ApiClient,
) -> None:
    crd = client.CustomObjectsApi(kube)
    body = {
        "apiVersion": "build.openshift.io/v1",
        "kind": "Build",
        "metadata": {"name": "build-1", "namespace": "ns"},
        "spec": {},
    }
    await crd.create_namespaced_custom_object("build.openshift.io", "v1", "ns", "builds", body)
    with pytest.raises(ApiException) as info:
        await crd.replace_namespaced_custom_object(
            "build.openshift.io", "v1", "ns", "builds", "build-1", body
        )
    assert info.value.status == 422
    assert status_body(info.value)["reason"] == "Invalid"


async def test_status_subresource_separates_spec_and_status(kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    await v1.create_namespaced_pod(NS, pod("p"))
    # status written through the main resource is ignored ...
    ignored = await v1.patch_namespaced_pod(
        "p", NS, {"metadata": {"labels": {"l": "1"}}, "status": {"phase": "Running"}}
    )
    assert ignored.status.phase == "Pending"
    assert ignored.metadata.labels == {"l": "1"}
    # ... and spec through status is ignored
    running = await v1.patch_namespaced_pod_status(
        "p", NS, {"spec": {"nodeName": "other"}, "status": {"phase": "Running"}}
    )
    assert running.status.phase == "Running"
    assert running.spec.node_name == "worker-0"


async def test_noop_patch_does_not_bump_the_resource_version(kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    created = await v1.create_node(node("worker-0", a="1"))
    same = await v1.patch_node("worker-0", {"metadata": {"annotations": {"a": "1"}}})
    assert same.metadata.resource_version == created.metadata.resource_version


async def test_delete_removes_the_object_and_honours_preconditions(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    v1 = client.CoreV1Api(kube)
    created = await v1.create_namespaced_pod(NS, pod("p"))
    with pytest.raises(ApiException) as info:
        await v1.delete_namespaced_pod(
            "p",
            NS,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid")),
        )
    assert info.value.status == 409
    deleted = await v1.delete_namespaced_pod(
        "p",
        NS,
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=created.metadata.uid)),
    )
    assert deleted.metadata.name == "p"
    assert sim.try_get("pods", "p", NS) is None
    with pytest.raises(ApiException) as info:
        await v1.delete_namespaced_pod("p", NS)
    assert info.value.status == 404
    await v1.create_node(node("worker-0"))
    status = await v1.delete_node("worker-0")
    assert status.status == "Success"


async def test_users_tokens_and_the_write_log(sim: SimApiServer) -> None:
    token = sim.add_user("alice")
    assert sim.token("alice") == token
    async with sim.api_client("alice") as alice:
        await client.CoreV1Api(alice).create_node(node("worker-0"))
        await client.CoreV1Api(alice).patch_node("worker-0", {"metadata": {"labels": {"a": "b"}}})
    records = sim.writes("nodes", name="worker-0")
    assert [(r.user, r.verb) for r in records] == [("alice", "create"), ("alice", "patch")]
    create, patch = records
    assert create.before is None
    assert create.after is not None
    assert patch.before == create.after
    assert patch.after is not None
    assert patch.after["metadata"]["labels"] == {"a": "b"}
    assert patch.rv == int(patch.after["metadata"]["resourceVersion"])
    assert patch.time >= create.time
    assert sim.request_count(user="alice", verb="create", resource="nodes") == 1
    assert sim.request_count(user="alice", verb="patch", resource="nodes") == 1


async def test_unknown_token_is_401_and_anonymous_may_only_read(sim: SimApiServer) -> None:
    sim.create("nodes", node("worker-0"))
    async with aiohttp.ClientSession(base_url=sim.url) as session:
        async with session.get("/api/v1/nodes", headers={"Authorization": "Bearer wrong"}) as resp:
            assert resp.status == 401
            assert await resp.json() == {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "Unauthorized",
                "reason": "Unauthorized",
                "code": 401,
            }
        async with session.get("/api/v1/nodes") as resp:
            assert resp.status == 200
        async with session.delete("/api/v1/nodes/worker-0") as resp:
            assert resp.status == 403
            body = await resp.json()
            assert body["reason"] == "Forbidden"
            assert body["message"] == (
                'nodes "worker-0" is forbidden: User "system:anonymous" cannot delete resource '
                '"nodes" in API group "" at the cluster scope'
            )
    assert sim.try_get("nodes", "worker-0") is not None


async def test_list_pagination_with_limit_and_continue(kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    for i in range(5):
        await v1.create_node(node(f"worker-{i}"))
    first = await v1.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == ["worker-0", "worker-1"]
    assert first.metadata.remaining_item_count == 3
    second = await v1.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.metadata.name for n in second.items] == ["worker-2", "worker-3"]
    third = await v1.list_node(limit=2, _continue=second.metadata._continue)
    assert [n.metadata.name for n in third.items] == ["worker-4"]
    assert third.metadata._continue is None


async def test_discovery_documents(http: aiohttp.ClientSession) -> None:
    async with http.get("/api") as resp:
        assert (await resp.json())["versions"] == ["v1"]
    async with http.get("/apis") as resp:
        groups = {g["name"] for g in (await resp.json())["groups"]}
    assert {"policy", "apps", "batch", "machineconfiguration.openshift.io",
            "build.openshift.io"} <= groups  # fmt: skip
    async with http.get("/api/v1") as resp:
        resources = {r["name"]: r for r in (await resp.json())["resources"]}
    assert resources["pods/eviction"]["group"] == "policy"
    assert resources["pods/eviction"]["kind"] == "Eviction"
    assert resources["nodes"]["namespaced"] is False
    async with http.get("/version") as resp:
        assert (await resp.json())["major"] == "1"
    async with http.get("/api/v1/widgets") as resp:
        assert resp.status == 404


async def test_in_process_api_shares_the_store_with_http(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    sim.create("pods", pod("p"), NS)
    got = await client.CoreV1Api(kube).read_namespaced_pod("p", NS)
    assert got.status.phase == "Running"  # the in-process create keeps status (test set-up)
    sim.patch("pods", "p", {"metadata": {"labels": {"a": "b"}}}, NS, user="bob")
    assert sim.get("pods", "p", NS)["metadata"]["labels"] == {"a": "b"}
    assert sim.writes("pods", user="bob")[0].verb == "patch"
    assert [p["metadata"]["name"] for p in sim.list("pods", label_selector="a=b")] == ["p"]
    sim.delete("pods", "p", NS)
    assert sim.list("pods") == []
    with pytest.raises(ApiError) as info:
        sim.get("nodes", "x")
    assert info.value.code == 404
    assert info.value.status["message"] == 'nodes "x" not found'


async def test_subresources_accept_only_their_verbs(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.create("pods", pod("p"))
    async with http.get(f"/api/v1/namespaces/{NS}/pods/p/eviction") as resp:
        assert resp.status == 405
    async with http.post(f"/api/v1/namespaces/{NS}/pods/p/status", json={}) as resp:
        assert resp.status == 405
    async with http.get(f"/api/v1/namespaces/{NS}/pods/p/status") as resp:
        assert resp.status == 200
        assert (await resp.json())["metadata"]["name"] == "p"
    async with http.get(f"/api/v1/namespaces/{NS}/pods/p/logs") as resp:
        assert resp.status == 404
