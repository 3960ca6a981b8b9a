"""Node identities in the simulator: the Node authorizer's static rules and NodeRestriction
(Kubernetes 1.28/1.29), and dry runs that run them without storing anything."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from drain_guard_sim.apiserver import nodeauth
from drain_guard_sim.apiserver.server import SimApiServer

NODE_USER = "system:node:worker-0"
MERGE = {"Content-Type": "application/merge-patch+json"}
PROBE = {"metadata": {"annotations": {"drain-guard.io/probe": "x"}}}


@pytest.fixture
async def node_http(sim: SimApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    """Requests as the kubelet of worker-0 would send them (its own credentials)."""
    for name in ("worker-0", "worker-1"):
        sim.create("nodes", {"metadata": {"name": name}, "spec": {}})
    headers = {"Authorization": f"Bearer {sim.add_node_user('worker-0')}"}
    async with aiohttp.ClientSession(base_url=sim.url, headers=headers) as session:
        yield session


async def _patch(
    session: aiohttp.ClientSession, path: str, body: Any, query: str = ""
) -> tuple[int, dict[str, Any]]:
    async with session.patch(path + query, json=body, headers=MERGE) as resp:
        return resp.status, await resp.json()


async def test_a_node_may_patch_its_own_node(
    sim: SimApiServer, node_http: aiohttp.ClientSession
) -> None:
    status, body = await _patch(node_http, "/api/v1/nodes/worker-0", PROBE)
    assert status == 200, body
    assert sim.writes("nodes")[-1].user == NODE_USER


async def test_noderestriction_denies_another_nodes_patch(
    sim: SimApiServer, node_http: aiohttp.ClientSession
) -> None:
    rv = sim.resource_version
    status, body = await _patch(node_http, "/api/v1/nodes/worker-1", PROBE)
    assert status == 403
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'nodes "worker-1" is forbidden: node "worker-0" is not allowed to modify node "worker-1"'
    )
    assert sim.resource_version == rv


async def test_a_dry_run_runs_admission_and_stores_nothing(
    sim: SimApiServer, node_http: aiohttp.ClientSession
) -> None:
    rv = sim.resource_version
    writes = len(sim.write_log)
    status, _ = await _patch(node_http, "/api/v1/nodes/worker-1", PROBE, "?dryRun=All")
    assert status == 403  # denied as the real write would be
    status, body = await _patch(node_http, "/api/v1/nodes/worker-0", PROBE, "?dryRun=All")
    assert status == 200
    assert body["metadata"]["annotations"]["drain-guard.io/probe"] == "x"  # what would be
    assert sim.resource_version == rv  # no resourceVersion spent, nothing logged or stored
    assert len(sim.write_log) == writes
    assert "drain-guard.io/probe" not in (
        sim.get("nodes", "worker-0")["metadata"].get("annotations") or {}
    )


async def test_a_node_may_not_change_its_taints_nor_kubernetes_labels(
    node_http: aiohttp.ClientSession,
) -> None:
    taint = {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    status, body = await _patch(node_http, "/api/v1/nodes/worker-0", taint)
    assert (status, body["message"]) == (
        403,
        'nodes "worker-0" is forbidden: node "worker-0" is not allowed to modify taints',
    )
    label = {"metadata": {"labels": {"node-role.kubernetes.io/master": ""}}}
    status, body = await _patch(node_http, "/api/v1/nodes/worker-0", label)
    assert status == 403
    assert body["message"].endswith(
        "is not allowed to modify labels: node-role.kubernetes.io/master"
    )
    own = {"metadata": {"labels": {"example.com/rack": "r1", "kubernetes.io/hostname": "w0"}}}
    status, _ = await _patch(node_http, "/api/v1/nodes/worker-0", own)
    assert status == 200


@pytest.mark.parametrize(
    ("method", "path", "message"),
    [
        (
            "GET",
            "/apis/policy/v1/namespaces/ns/poddisruptionbudgets",
            'User "system:node:worker-0" cannot list resource "poddisruptionbudgets" in API'
            ' group "policy" in the namespace "ns"',
        ),
        (
            "GET",
            "/apis/apps/v1/namespaces/ns/daemonsets/ds",
            'User "system:node:worker-0" cannot get resource "daemonsets" in API group "apps"'
            ' in the namespace "ns"',
        ),
    ],
)
async def test_the_node_authorizer_allows_only_its_static_rules(
    node_http: aiohttp.ClientSession, method: str, path: str, message: str
) -> None:
    async with node_http.request(method, path) as resp:
        assert resp.status == 403
        assert message in (await resp.json())["message"]


async def test_a_node_reads_nodes_and_pods_and_writes_events(
    node_http: aiohttp.ClientSession,
) -> None:
    for path in ("/api/v1/nodes", "/api/v1/pods"):
        async with node_http.get(path) as resp:
            assert resp.status == 200  # 1.28/1.29: no AuthorizeNodeWithSelectors
    event = {
        "metadata": {"name": "e1", "namespace": "other"},
        "involvedObject": {"kind": "Node", "name": "worker-1"},
        "reason": "R",
        "message": "m",
    }
    async with node_http.post("/api/v1/namespaces/other/events", json=event) as resp:
        assert resp.status == 201  # NodeRules allow Events anywhere, on any object


async def test_a_name_without_the_group_is_not_a_node(sim: SimApiServer) -> None:
    sim.create("nodes", {"metadata": {"name": "worker-1"}})
    headers = {"Authorization": f"Bearer {sim.token('system:node:worker-0')}"}
    async with aiohttp.ClientSession(base_url=sim.url, headers=headers) as session:
        status, _ = await _patch(session, "/api/v1/nodes/worker-1", PROBE)
    assert status == 200  # not a node identity: NodeRestriction does not apply


def test_node_rules_allow_core_events_only() -> None:
    """NodeRules() grants events in the core group; events.k8s.io is not in them."""
    assert nodeauth.authorized("", "events", "", "create")
    assert nodeauth.authorized("", "events", "", "patch")
    assert not nodeauth.authorized("events.k8s.io", "events", "", "create")
    assert not nodeauth.authorized("", "events", "", "delete")


async def test_a_node_may_not_register_with_a_kubernetes_label(
    sim: SimApiServer, node_http: aiohttp.ClientSession
) -> None:
    sim.delete("nodes", "worker-0")
    node = {
        "metadata": {"name": "worker-0", "labels": {"node-role.kubernetes.io/master": ""}},
        "spec": {},
    }
    async with node_http.post("/api/v1/nodes", json=node) as resp:
        assert resp.status == 403
        assert (await resp.json())["message"].endswith(
            'node "worker-0" is not allowed to set the following labels:'
            " node-role.kubernetes.io/master"
        )
    node["metadata"]["labels"] = {"kubernetes.io/hostname": "worker-0", "node.kubernetes.io/x": ""}
    async with node_http.post("/api/v1/nodes", json=node) as resp:
        assert resp.status == 201


def _mirror_pod(owner: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "static-web-worker-0",
        "namespace": "ns",
        "annotations": {"kubernetes.io/config.mirror": "hash"},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "spec": {"nodeName": "worker-0", "containers": [{"name": "c"}]}}


@pytest.mark.parametrize(
    ("owner", "message"),
    [
        (None, 'node "worker-0" can only create pods with an owner reference set to itself'),
        (
            {"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": "u"},
            'node "worker-0" can only create pods with an owner reference set to itself',
        ),
        (
            {"apiVersion": "v1", "kind": "Node", "name": "worker-0", "uid": "u"},
            'node "worker-0" can only create pods with a controller owner reference set to itself',
        ),
    ],
)
async def test_a_mirror_pod_must_be_owned_by_its_node(
    node_http: aiohttp.ClientSession, owner: dict[str, Any] | None, message: str
) -> None:
    async with node_http.post("/api/v1/namespaces/ns/pods", json=_mirror_pod(owner)) as resp:
        assert resp.status == 403
        assert (await resp.json())["message"].endswith(message)


async def test_a_mirror_pod_owned_by_its_node_is_admitted(
    node_http: aiohttp.ClientSession,
) -> None:
    owner = {"apiVersion": "v1", "kind": "Node", "name": "worker-0", "uid": "u", "controller": True}
    async with node_http.post("/api/v1/namespaces/ns/pods", json=_mirror_pod(owner)) as resp:
        assert resp.status == 201, await resp.text()


async def test_a_node_may_not_relabel_a_pod_through_its_status(
    sim: SimApiServer, node_http: aiohttp.ClientSession
) -> None:
    sim.create(
        "pods",
        {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"nodeName": "worker-0"}},
        "ns",
    )
    body = {"metadata": {"labels": {"a": "2"}}, "status": {"phase": "Running"}}
    status, doc = await _patch(node_http, "/api/v1/namespaces/ns/pods/p/status", body)
    assert (status, doc["message"]) == (
        403,
        'pods "p" is forbidden: node "worker-0" cannot update labels through pod status',
    )
    status, _ = await _patch(
        node_http, "/api/v1/namespaces/ns/pods/p/status", body | {"metadata": {}}
    )
    assert status == 200
