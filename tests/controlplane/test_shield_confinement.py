"""The central shield's account (the systemd install's cluster side, ``daemonset/overlays/
systemd``) on the real control plane: its grants and the admission policy
``drain-guard-shield-confinement`` applied as rendered, and a real token of its
ServiceAccount. docs/rights.md's rows for ``systemd: central shield`` are what the API server
answers it, request by request; and ``drain-guard shield`` itself, with that token, keeps the
budget of a build pod, so the policy refuses nothing the shield does.

The account lives in a namespace of the test's own (the policy matches any namespace, as a
renamed install's), named as shipped and renamed (a prefix and a suffix), and its Role and
RoleBinding in MCO's namespace have names of their own: nothing here meets another test's
objects but the policy, which binds only accounts whose name holds drain-guard-shield. The
policy is left in place at the end: this module's tests may run at once on two workers, and
one's teardown would change the other's answers.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard.confine.rights import ALLOWED, RBAC
from drain_guard.core.pods import Pod
from drain_guard.shield.plan import Role, Want
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_shield
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client, assert_rights_table, own_namespace, unique
from tests.controlplane.nodes import (
    BUILD_LABEL,
    add_build_pod,
    create_worker,
    shared_namespace,
    until,
)
from tests.controlplane.test_webhook import WEBHOOK_DENIAL
from tests.deploy.tools import Obj, render
from tests.helpers import MCO_NS, metric, reap, require_tool

INSTALL = "systemd: central shield"
ACCOUNT = "drain-guard-shield"
#: The account as shipped, and renamed as a namePrefix and a nameSuffix would: the policy
#: matches any name that holds drain-guard-shield, so a renamed install stays confined.
NAMES = {"shipped": ACCOUNT, "renamed": f"acme-{ACCOUNT}-x"}
POLICY = "drain-guard-shield-confinement"
DENIED = f"denied: {POLICY}"


@dataclass
class Shield:
    """The shield's account installed, its token's client, and a Node with a build pod."""

    plane: ControlPlane
    admin: client.ApiClient
    shield: client.ApiClient  # the token's
    kubeconfig: Path
    namespace: str  #: the account's
    account: str  #: its name
    node: str


def kubectl(plane: ControlPlane, *args: str) -> str:
    proc = subprocess.run(
        [require_tool("kubectl"), "--kubeconfig", str(plane.admin_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stderr}"
    return proc.stdout


def accounts_objects(namespace: str, account: str, suffix: str) -> list[Obj]:
    """The rendered overlay's account, its grants in MCO's namespace and the policy: the
    account moved to ``namespace`` and named ``account``, the Role and RoleBinding named with
    ``suffix``."""
    kept: list[Obj] = []
    for obj in render("systemd"):
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "ServiceAccount":
            meta["namespace"], meta["name"] = namespace, account
        elif kind in ("Role", "RoleBinding") and meta.get("namespace") == MCO_NS:
            meta["name"] += suffix
            if kind == "RoleBinding":
                obj["roleRef"]["name"] += suffix
                for subject in obj["subjects"]:
                    subject["namespace"], subject["name"] = namespace, account
        elif not kind.startswith("ValidatingAdmissionPolicy"):
            continue
        kept.append(obj)
    return kept


@pytest.fixture(params=list(NAMES))
async def installed(
    request: pytest.FixtureRequest, control_plane: ControlPlane, tmp_path: Path
) -> AsyncIterator[Shield]:
    account = NAMES[request.param]
    async with api_client(control_plane.admin_kubeconfig) as admin:
        await shared_namespace(admin, MCO_NS)
        namespace = await own_namespace(admin, "shield")
        objects = accounts_objects(namespace, account, "-" + namespace)
        manifest = tmp_path / "shield.yaml"
        manifest.write_text(yaml.safe_dump_all(objects))
        kubectl(control_plane, "apply", "--server-side", "-f", str(manifest))
        core = client.CoreV1Api(admin)
        token = await core.create_namespaced_service_account_token(
            account,
            namespace,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
            ),
        )
        kubeconfig = control_plane.token_kubeconfig(token.status.token, tmp_path / "shield")
        node = await create_worker(admin)
        try:
            async with api_client(kubeconfig) as shield:
                setup = Shield(control_plane, admin, shield, kubeconfig, namespace, account, node)
                await until(lambda: policy_in_force(setup))
                yield setup
        finally:
            namespaced = [o for o in objects if o["metadata"].get("namespace") == MCO_NS]
            manifest.write_text(yaml.safe_dump_all(namespaced))
            kubectl(control_plane, "delete", "--ignore-not-found", "-f", str(manifest))
            await core.delete_namespace(namespace)


async def policy_in_force(setup: Shield) -> bool:
    """Whether the API server enforces the policy just applied (it loads it in the
    background): a budget that would stall MCO's namespace refused by it."""
    return await stall_the_namespace(setup) == DENIED


async def answer(call: Awaitable[Any]) -> str:
    """What the API server said: allowed, or who denied it (RBAC, which policy, or which
    admission webhook entry: daemonset/overlays/systemd-4.15's, tests/controlplane/
    test_shield_webhook.py)."""
    try:
        await call
    except ApiException as error:
        if error.status == 403 and "ValidatingAdmissionPolicy" in str(error.body):
            return f"denied: {POLICY}" if POLICY in str(error.body) else str(error.body)
        webhook = WEBHOOK_DENIAL.search(str(error.body))
        if error.status == 403 and webhook:
            return f"denied: webhook {webhook.group(1)}"
        if error.status != 403:
            return f"error {error.status}: {error.body!r}"
        return RBAC
    return ALLOWED


# --- the requests of the table ---------------------------------------------------------------


async def shield_budget(setup: Shield, namespace: str = MCO_NS) -> Any:
    """The budget the shield makes for a real build pod on the test's Node (the garbage
    collector deletes a budget whose owner does not exist)."""
    name = await add_build_pod(setup.admin, setup.node)
    read = await client.CoreV1Api(setup.admin).read_namespaced_pod(name, MCO_NS)
    labels = {str(k): str(v) for k, v in read.metadata.labels.items()}
    pod = Pod(namespace, name, "Running", labels, uid=read.metadata.uid, node=setup.node)
    return Want(pod, Role.BUILD_POD, unique("drain-guard-build")).manifest()


async def create(setup: Shield, body: Any) -> str:
    api = client.PolicyV1Api(setup.shield)
    namespace = body["metadata"]["namespace"]
    return await answer(api.create_namespaced_pod_disruption_budget(namespace, body, dry_run="All"))


async def delete(setup: Shield, body: Any) -> str:
    """``body`` created by the administrator, then deleted with the shield's token."""
    await client.PolicyV1Api(setup.admin).create_namespaced_pod_disruption_budget(MCO_NS, body)
    return await answer(
        client.PolicyV1Api(setup.shield).delete_namespaced_pod_disruption_budget(
            body["metadata"]["name"], MCO_NS
        )
    )


async def own_budget(setup: Shield) -> str:
    return await create(setup, await shield_budget(setup))


async def delete_own_budget(setup: Shield) -> str:
    return await delete(setup, await shield_budget(setup))


async def builder_budget(setup: Shield) -> str:
    """The shield's shape, selecting MCO's machine-os-builder (a pool's build could stall)."""
    body = await shield_budget(setup)
    body["spec"]["selector"] = {"matchLabels": {"k8s-app": "machine-os-builder"}}
    return await create(setup, body)


async def stall_the_namespace(setup: Shield) -> str:
    """``maxUnavailable: 0`` over every pod of MCO's namespace: no drain could evict one."""
    body: Any = {
        "metadata": {"name": unique("stall"), "namespace": MCO_NS},
        "spec": {"maxUnavailable": 0, "selector": {}},
    }
    return await create(setup, body)


async def unlabelled_budget(setup: Shield) -> str:
    """The shield's shape without drain-guard's labels: not one it keeps."""
    body = await shield_budget(setup)
    body["metadata"]["labels"] = {}
    return await create(setup, body)


async def delete_foreign_budget(setup: Shield) -> str:
    """Somebody else's budget on a build pod (the administrator's, not drain-guard's)."""
    body = await shield_budget(setup)
    body["metadata"]["labels"] = {"example.com/owner": "admin"}
    return await delete(setup, body)


async def change_budget(setup: Shield) -> str:
    body = await shield_budget(setup)
    await client.PolicyV1Api(setup.admin).create_namespaced_pod_disruption_budget(MCO_NS, body)
    return await answer(
        client.PolicyV1Api(setup.shield).patch_namespaced_pod_disruption_budget(
            body["metadata"]["name"], MCO_NS, {"spec": {"minAvailable": 0}}, dry_run="All"
        )
    )


async def budget_in_default(setup: Shield) -> str:
    return await create(setup, await shield_budget(setup, "default"))


async def list_mco_pods(setup: Shield) -> str:
    return await answer(client.CoreV1Api(setup.shield).list_namespaced_pod(MCO_NS))


async def list_pods_elsewhere(setup: Shield) -> str:
    return await answer(client.CoreV1Api(setup.shield).list_namespaced_pod("kube-system"))


async def read_mco_secret(setup: Shield) -> str:
    """The authorizer answers before the Secret is looked up: any name will do."""
    return await answer(
        client.CoreV1Api(setup.shield).read_namespaced_secret(unique("secret"), MCO_NS)
    )


async def patch_node(setup: Shield) -> str:
    body = {"metadata": {"annotations": {"drain-guard.io/held-drain": "drain-x"}}}
    return await answer(client.CoreV1Api(setup.shield).patch_node(setup.node, body, dry_run="All"))


async def node_event(setup: Shield) -> str:
    body: Any = {
        "metadata": {"name": unique("event"), "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": setup.node, "apiVersion": "v1"},
        "reason": "DrainHeld",
        "message": "shield rights test",
    }
    return await answer(
        client.CoreV1Api(setup.shield).create_namespaced_event("default", body, dry_run="All")
    )


async def evict_build_pod(setup: Shield) -> str:
    name = await add_build_pod(setup.admin, setup.node)
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=MCO_NS))
    return await answer(
        client.CoreV1Api(setup.shield).create_namespaced_pod_eviction(
            name, MCO_NS, body, dry_run="All"
        )
    )


async def own_token(setup: Shield) -> str:
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    return await answer(
        client.CoreV1Api(setup.shield).create_namespaced_service_account_token(
            setup.account, setup.namespace, request
        )
    )


Request = Callable[[Shield], Awaitable[str]]
#: docs/rights.md's request column for the central shield, word for word, and how each is made.
REQUESTS: dict[str, Request] = {
    "list the pods in openshift-machine-config-operator": list_mco_pods,
    "list the pods in kube-system": list_pods_elsewhere,
    "create a budget on a build pod, as the shield makes it": own_budget,
    "delete a budget of drain-guard's on a build pod": delete_own_budget,
    "create a budget selecting MCO's machine-os-builder": builder_budget,
    "create a maxUnavailable 0 budget over every pod of openshift-machine-config-operator": (
        stall_the_namespace
    ),
    "create a budget on a build pod without drain-guard's labels": unlabelled_budget,
    "delete a budget of someone else's on a build pod": delete_foreign_budget,
    "change a budget": change_budget,
    "create a budget in default": budget_in_default,
    "read a Secret in openshift-machine-config-operator": read_mco_secret,
    "patch a Node": patch_node,
    "create an Event about a Node in default": node_event,
    "evict a build pod": evict_build_pod,
    "create a token for its own ServiceAccount": own_token,
}


async def test_the_rights_table_is_what_the_real_api_server_answers_the_shield(
    installed: Shield,
) -> None:
    results = {name: await make(installed) for name, make in REQUESTS.items()}
    assert_rights_table(results, INSTALL)


async def test_the_confined_shield_keeps_its_build_pods_budget(
    installed: Shield, tmp_path: Path
) -> None:
    """``drain-guard shield`` with the confined token (its selector one build pod of the
    test's own, so no other test's pod is shielded): the budget is created, with no API
    error, and goes with its pod."""
    build = await add_build_pod(installed.admin, installed.node)
    started: list[AgentProcess] = []
    try:
        shield = await spawn_shield(
            installed.kubeconfig, "--build-pod-selector", f"{MCO_NS}:{BUILD_LABEL}={build}"
        )
        started.append(shield)

        async def budgets() -> list[Any]:
            found = await client.PolicyV1Api(installed.admin).list_namespaced_pod_disruption_budget(
                MCO_NS, label_selector=f"drain-guard.io/node={installed.node}"
            )
            return list(found.items)

        (budget,) = await until(budgets)
        (owner,) = budget.metadata.owner_references
        assert (owner.kind, owner.name) == ("Pod", build)
        errors = "drain_guard_api_errors_total"
        assert await metric(shield, errors, operation="poddisruptionbudget_create") == 0
        await client.CoreV1Api(installed.admin).delete_namespaced_pod(
            build, MCO_NS, grace_period_seconds=0
        )

        async def gone() -> bool:
            return not await budgets()

        assert await until(gone)
    finally:
        await reap(started)
