"""The 4.15/4.16 admission webhook's own account on the real control plane: the
``openshift-4.15`` overlay rendered into a namespace of the test's own (with a ``namePrefix``,
as test_webhook does), the webhook's ServiceAccount and its grants created, and docs/rights.md's
rows for ``openshift-4.15: admission webhook`` made with a real token of that account. What a
taken-over webhook could do with its own credential, as the API server answers it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard.confine.rights import ALLOWED, RBAC
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client, assert_rights_table, own_namespace, unique
from tests.controlplane.nodes import create_worker, shared_namespace
from tests.controlplane.test_webhook import _create, _rendered
from tests.helpers import MCO_NS

INSTALL = "openshift-4.15: admission webhook"


async def answer(call: Awaitable[Any]) -> str:
    """Allowed (a 404: the authorizer let the read through to a name that is not there), or
    RBAC's refusal."""
    try:
        await call
    except ApiException as error:
        if error.status == 404:
            return ALLOWED
        return RBAC if error.status == 403 else f"error {error.status}: {error.body!r}"
    return ALLOWED


Made = Callable[[client.ApiClient, str, str], Awaitable[str]]


def _get_pod(where: str | None) -> Made:
    async def make(api: client.ApiClient, namespace: str, node: str) -> str:
        read = client.CoreV1Api(api).read_namespaced_pod
        return await answer(read(unique("pod"), where or namespace))

    return make


async def _list_mco_pods(api: client.ApiClient, namespace: str, node: str) -> str:
    return await answer(client.CoreV1Api(api).list_namespaced_pod(MCO_NS))


async def _own_secret(api: client.ApiClient, namespace: str, node: str) -> str:
    return await answer(client.CoreV1Api(api).read_namespaced_secret(unique("s"), namespace))


async def _patch_node(api: client.ApiClient, namespace: str, node: str) -> str:
    body = {"metadata": {"annotations": {"drain-guard.io/held-drain": "drain-x"}}}
    return await answer(client.CoreV1Api(api).patch_node(node, body, dry_run="All"))


async def _budget(api: client.ApiClient, namespace: str, node: str) -> str:
    body: Any = {
        "metadata": {"name": unique("budget"), "namespace": MCO_NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"x": "y"}}},
    }
    create = client.PolicyV1Api(api).create_namespaced_pod_disruption_budget
    return await answer(create(MCO_NS, body, dry_run="All"))


async def _event(api: client.ApiClient, namespace: str, node: str) -> str:
    body: Any = {
        "metadata": {"name": unique("event"), "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": "DrainHeld",
    }
    create = client.CoreV1Api(api).create_namespaced_event
    return await answer(create("default", body, dry_run="All"))


async def _default_token(api: client.ApiClient, namespace: str, node: str) -> str:
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    create = client.CoreV1Api(api).create_namespaced_service_account_token
    return await answer(create("default", namespace, request))


#: The account's name after the prefix the test renders with.
WEBHOOK_ACCOUNT = "drain-guard-webhook"
#: docs/rights.md's request column for the webhook's account, word for word.
REQUESTS: dict[str, Made] = {
    "get a pod in its own namespace": _get_pod(None),
    "get a pod in openshift-machine-config-operator": _get_pod(MCO_NS),
    "get a pod in kube-system": _get_pod("kube-system"),
    "list the pods in openshift-machine-config-operator": _list_mco_pods,
    "read a Secret in its own namespace": _own_secret,
    "patch a Node": _patch_node,
    "create a budget in openshift-machine-config-operator": _budget,
    "create an Event about a Node in default": _event,
    "create a token for its namespace's default ServiceAccount": _default_token,
}


async def test_the_rights_table_is_what_the_real_api_server_answers_the_webhook(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    prefix = unique("w") + "-"
    async with api_client(control_plane.admin_kubeconfig) as admin:
        await shared_namespace(admin, MCO_NS)
        namespace = await own_namespace(admin, "dgw")
        objects = _rendered(tmp_path, namespace, prefix)
        account = f"{prefix}{WEBHOOK_ACCOUNT}"
        mine = [
            o
            for o in objects
            if (o["kind"] == "ServiceAccount" and o["metadata"]["name"] == account)
            or (o["kind"] in ("Role", "RoleBinding") and o["metadata"]["name"].startswith(account))
        ]
        assert {o["kind"] for o in mine} == {"ServiceAccount", "Role", "RoleBinding"}
        try:
            for obj in mine:
                await _create(admin, obj)
            token = await client.CoreV1Api(admin).create_namespaced_service_account_token(
                account,
                namespace,
                client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
            )
            kubeconfig = control_plane.token_kubeconfig(token.status.token, tmp_path / "webhook")
            node = await create_worker(admin)
            async with api_client(kubeconfig) as webhook:
                results = {r: await make(webhook, namespace, node) for r, make in REQUESTS.items()}
        finally:
            rbac = client.RbacAuthorizationV1Api(admin)
            for obj in mine:
                if obj["metadata"].get("namespace") == MCO_NS:
                    name = obj["metadata"]["name"]
                    delete = (
                        rbac.delete_namespaced_role
                        if obj["kind"] == "Role"
                        else rbac.delete_namespaced_role_binding
                    )
                    await delete(name, MCO_NS)
            await client.CoreV1Api(admin).delete_namespace(namespace)
    assert_rights_table(results, INSTALL)
