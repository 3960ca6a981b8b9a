"""RBAC for a service account, as drain-guard's are granted: a token from the TokenRequest API,
Roles bound in one namespace, a ClusterRole bound in one namespace only, rules limited to
object names, and the 403 bodies of what no rule allows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.client import Client, JsonObj
from tests.conformance.objects import create_pod, pods_path
from tests.conformance.servers import Server

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _role(kind: str, name: str, *rules: JsonObj) -> JsonObj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "rules": list(rules),
    }


def _binding(name: str, role_kind: str, role: str, ns: str, account: str) -> JsonObj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }


@pytest.fixture
async def account(server: Server, admin: Client, ns: str, tmp_path: Path) -> AsyncIterator[Client]:
    """Service account ``agent`` of ``ns``, through a token the TokenRequest API made, with a
    Role reading pods, a ClusterRole (bound here only) reading budgets, and a Role that may get
    one ConfigMap by name."""
    await admin.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "agent"}},
    )
    read = ["get", "list", "watch"]
    await admin.ok(
        "POST",
        f"{RBAC}/namespaces/{ns}/roles",
        _role("Role", "pods", {"apiGroups": [""], "resources": ["pods"], "verbs": read}),
    )
    await admin.ok(
        "POST",
        f"{RBAC}/namespaces/{ns}/roles",
        _role(
            "Role",
            "one-configmap",
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get"],
                "resourceNames": ["one"],
            },
        ),
    )
    cluster_role = f"{ns}-budgets"
    await admin.ok(
        "POST",
        f"{RBAC}/clusterroles",
        _role(
            "ClusterRole",
            cluster_role,
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": read},
        ),
    )
    for name, kind, role in (
        ("pods", "Role", "pods"),
        ("one-configmap", "Role", "one-configmap"),
        ("budgets", "ClusterRole", cluster_role),
    ):
        await admin.ok(
            "POST", f"{RBAC}/namespaces/{ns}/rolebindings", _binding(name, kind, role, ns, "agent")
        )
    token = await admin.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/agent/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert token["status"]["token"]
    kubeconfig = server.token_kubeconfig(token["status"]["token"], tmp_path / "agent.kubeconfig")
    async with Client(kubeconfig) as client:
        yield client
    await admin.delete(f"{RBAC}/clusterroles/{cluster_role}")


def _denied(body: Any, message: str) -> None:
    assert body["kind"] == "Status"
    assert body["reason"] == "Forbidden"
    assert body["code"] == 403
    assert body["message"] == message


async def test_a_role_grants_what_it_names_in_its_namespace(
    account: Client, admin: Client, ns: str
) -> None:
    await create_pod(admin, ns, "p", f"{ns}-n0")
    listed = await account.ok("GET", pods_path(ns))
    assert [i["metadata"]["name"] for i in listed["items"]] == ["p"]
    assert (await account.get(pods_path(ns, "p"))).status == 200
    user = f"system:serviceaccount:{ns}:agent"
    deleted = await account.delete(pods_path(ns, "p"))
    assert deleted.status == 403
    _denied(
        deleted.body,
        f'pods "p" is forbidden: User "{user}" cannot delete resource "pods" in API group "" '
        f'in the namespace "{ns}"',
    )
    everywhere = await account.get("/api/v1/pods")
    assert everywhere.status == 403
    _denied(
        everywhere.body,
        f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" at the '
        "cluster scope",
    )
    evicted = await account.post(pods_path(ns, "p") + "/eviction", {"metadata": {"name": "p"}})
    assert evicted.status == 403
    assert (await admin.get(pods_path(ns, "p"))).status == 200


async def test_a_cluster_role_bound_in_a_namespace_grants_there_only(
    account: Client, ns: str
) -> None:
    budgets = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    assert (await account.get(budgets)).status == 200
    other = await account.get("/apis/policy/v1/namespaces/default/poddisruptionbudgets")
    assert other.status == 403
    user = f"system:serviceaccount:{ns}:agent"
    _denied(
        other.body,
        f'poddisruptionbudgets.policy is forbidden: User "{user}" cannot list resource '
        '"poddisruptionbudgets" in API group "policy" in the namespace "default"',
    )


async def test_resource_names_limit_a_rule_to_those_objects(
    account: Client, admin: Client, ns: str
) -> None:
    for name in ("one", "two"):
        await admin.ok(
            "POST",
            f"/api/v1/namespaces/{ns}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
        )
    configmaps = f"/api/v1/namespaces/{ns}/configmaps"
    assert (await account.get(f"{configmaps}/one")).status == 200
    assert (await account.get(f"{configmaps}/two")).status == 403
    assert (await account.get(configmaps)).status == 403
