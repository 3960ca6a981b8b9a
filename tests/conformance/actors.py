"""The simulated MCO actors as clients of either API server: each a service account of the
test's namespace, its token from the TokenRequest API, granted only what it calls by a
ClusterRole of the test's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conformance.client import Client
from tests.conformance.servers import Server

RBAC = "/apis/rbac.authorization.k8s.io/v1"


async def actor_kubeconfig(
    server: Server, admin: Client, ns: str, account: str, rules: list[dict[str, Any]], path: Path
) -> Path:
    """A kubeconfig for service account ``account`` of ``ns``, bound to ``rules`` by the
    ClusterRole ``<ns>-<account>`` (removed with the test's ``remove_actor``)."""
    role = f"{ns}-{account}"
    await admin.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
    )
    await admin.ok(
        "POST",
        f"{RBAC}/clusterroles",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": role}, "rules": rules},
    )  # fmt: skip
    await admin.ok(
        "POST",
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        },
    )  # fmt: skip
    token = await admin.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return server.token_kubeconfig(token["status"]["token"], path)


async def remove_actor(admin: Client, ns: str, account: str) -> None:
    for kind in ("clusterrolebindings", "clusterroles"):
        await admin.delete(f"{RBAC}/{kind}/{ns}-{account}")
