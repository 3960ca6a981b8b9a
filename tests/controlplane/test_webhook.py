"""The admission webhook of OpenShift 4.15/4.16 registered with the real kube-apiserver.

The ``openshift-4.15`` overlay, rendered in a namespace of the test's own with a kustomize
``namePrefix`` (so a renamed namespace and prefixed names at once) and the repository's
renamed-namespace transformer, is applied as it renders: the agent's and the webhook's
accounts and RBAC, the DaemonSet (no controller makes its pods here), the
ValidatingWebhookConfiguration. The webhook runs as a process on loopback
(``drain-guard webhook`` with a CA made for the test) and the configuration reaches it by
``clientConfig.url`` instead of the in-cluster Service; each entry also gets one more
matchCondition, this test's namespace only, so that the other tests sharing the control
plane are never sent to it. The agent's pod is made from the DaemonSet's template on a Node
(admitted by the webhook's pods entry), and the agent's identity is a real bound token for
that pod (TokenRequest with ``boundObjectRef``), which carries the pod-name and pod-uid extras
as a projected token does.
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard import protocol
from drain_guard.commands.preflight.rows import UNMADE
from drain_guard.protocol import Reason
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_webhook
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client, bound_kubeconfig, own_namespace, unique
from tests.controlplane.test_rights import Installed, documented, made, probe_of
from tests.deploy.tools import (
    DAEMONSET_DIR,
    Obj,
    relative,
    render_dir,
    user_kustomization,
)
from tests.helpers import reap, run_cli

MCO = "openshift-machine-config-operator"
#: docs/rights.md's install whose rows this test makes.
INSTALL = "openshift-4.15"
JSON_PATCH = "application/json-patch+json"
REQUEST = "drain-rendered-worker-5620aa"
LAST_APPLIED = "uncordon-rendered-worker-11b0cc"
BUILD_LABELS = {"openshift.io/build.name": "build-rendered-worker-5620aa"}
#: The pool its PoolRollout Events are about.
POOL = "worker"


async def _create(admin: client.ApiClient, obj: Obj) -> Any:
    """Create one rendered object with the typed API of its kind (a dict body, as rendered)."""
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    body: Any = obj  # the typed APIs take a dict body as the manifest renders it
    rbac = client.RbacAuthorizationV1Api(admin)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "ServiceAccount": lambda: client.CoreV1Api(admin).create_namespaced_service_account(
            namespace, body
        ),
        "Role": lambda: rbac.create_namespaced_role(namespace, body),
        "RoleBinding": lambda: rbac.create_namespaced_role_binding(namespace, body),
        "ClusterRole": lambda: rbac.create_cluster_role(body),
        "ClusterRoleBinding": lambda: rbac.create_cluster_role_binding(body),
        "DaemonSet": lambda: client.AppsV1Api(admin).create_namespaced_daemon_set(namespace, body),
        "ValidatingWebhookConfiguration": lambda: client.AdmissionregistrationV1Api(
            admin
        ).create_validating_webhook_configuration(body),
    }
    return await calls[kind]()


def _rendered(tmp_path: Path, namespace: str, prefix: str) -> list[Obj]:
    mine = tmp_path / "mine"
    fixups = relative(DAEMONSET_DIR / "transformers" / "renamed-namespace", mine)
    return render_dir(
        user_kustomization(
            mine,
            "openshift-4.15",
            namespace=namespace,
            namePrefix=prefix,
            transformers=[fixups],
        )
    )


def _agent_account(objects: list[Obj]) -> list[str]:
    """The Deployment's ``--agent-account`` flag as rendered (the renamed account, which the
    renamed-namespace transformer writes), for the webhook the test runs."""
    (deployment,) = (o for o in objects if o["kind"] == "Deployment")
    (box,) = deployment["spec"]["template"]["spec"]["containers"]
    args = [str(a) for a in box["args"]]
    at = args.index("--agent-account")
    return args[at : at + 2]


async def install_with_webhook(
    control_plane: ControlPlane,
    admin: client.ApiClient,
    tmp_path: Path,
    namespace: str,
    prefix: str,
) -> tuple[list[Obj], Any, AgentProcess, ServingCert]:
    """The 4.15 overlay rendered into ``namespace`` with ``prefix``: MCO's namespace, the
    accounts and their grants, the DaemonSet (the agents' pods name it as their owner), and
    the webhook started with its own account's token and a CA made for the test. The caller
    reaps the webhook."""
    core: Any = client.CoreV1Api(admin)
    try:
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=MCO)))
    except ApiException as error:
        if error.status != 409:
            raise
    objects = _rendered(tmp_path, namespace, prefix)
    for kind in ("ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"):
        for obj in objects:
            if obj["kind"] == kind:
                await _create(admin, obj)
    (daemonset_manifest,) = (o for o in objects if o["kind"] == "DaemonSet")
    daemonset = await _create(admin, daemonset_manifest)
    token = await core.create_namespaced_service_account_token(
        f"{prefix}drain-guard-webhook",
        namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
    )
    webhook_kubeconfig = control_plane.token_kubeconfig(
        token.status.token, tmp_path / "webhook-kubeconfig"
    )
    cert = ServingCert.generate(tmp_path / "webhook-tls")
    webhook = await spawn_webhook(
        webhook_kubeconfig, cert.cert_file, cert.key_file, *_agent_account(objects)
    )
    return objects, daemonset, webhook, cert


def _pointed_at(configuration: Obj, url: str, ca: bytes, namespace: str) -> Obj:
    """The rendered configuration, sent to ``url`` and to this test's namespace only."""
    configuration = copy.deepcopy(configuration)
    configuration["metadata"].pop("annotations", None)  # the service CA's injection
    only_here = {
        "pods.drain-guard.io": f"request.namespace == '{namespace}'",
    }
    for webhook in configuration["webhooks"]:
        webhook["clientConfig"] = {
            "url": url,
            "caBundle": base64.b64encode(ca).decode(),
        }
        expression = only_here.get(
            webhook["name"],
            f"request.userInfo.username.startsWith('system:serviceaccount:{namespace}:')",
        )
        webhook["matchConditions"].append({"name": "this-test-only", "expression": expression})
    return configuration


def _node(name: str, drain: str = REQUEST) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                protocol.DESIRED_DRAIN: drain,
                protocol.LAST_APPLIED_DRAIN: LAST_APPLIED,
            },
        },
    }


#: The API server's answers by request, as docs/rights.md names them (install openshift-4.15).
Answers = dict[str, str]
WEBHOOK_DENIAL = re.compile(r'admission webhook \\?"?([a-z.-]+)\\?"? denied the request')


def _answer(status: int, message: str) -> str:
    """The rights table's words for an answer."""
    if status in (200, 201):
        return "allowed"
    if "failed calling webhook" in message:
        return "denied: the webhook unreachable (failurePolicy Fail)"
    found = WEBHOOK_DENIAL.search(message)
    if status == 403 and found:
        return f"denied: webhook {found.group(1)}"
    return "denied: RBAC" if status == 403 else f"{status}: {message}"


async def _ask(answers: Answers, request: str, call: Awaitable[Any]) -> tuple[int, str]:
    """Make the request and keep its answer under ``request``."""
    status, message = await _status(call)
    answers[request] = _answer(status, message)
    return status, message


async def _status(call: Awaitable[Any]) -> tuple[int, str]:
    """(200, "") when the API server allowed it, else its status and message."""
    try:
        await call
    except ApiException as error:
        return int(error.status), str(error.body)
    return 200, ""


async def test_the_webhook_confines_the_agents_real_token(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    prefix = unique("p") + "-"
    started: list[AgentProcess] = []
    async with api_client(control_plane.admin_kubeconfig) as admin:
        namespace = await own_namespace(admin, "dg")
        objects, daemonset, webhook, cert = await install_with_webhook(
            control_plane, admin, tmp_path, namespace, prefix
        )
        agent_account = f"{prefix}drain-guard"
        started.append(webhook)
        configuration_name = f"{prefix}drain-guard"
        try:
            await webhook.wait_log(lambda r: str(r.get("message", "")).startswith("listening"))
            (rendered_configuration,) = (
                o for o in objects if o["kind"] == "ValidatingWebhookConfiguration"
            )
            await _create(
                admin,
                _pointed_at(
                    rendered_configuration,
                    f"https://127.0.0.1:{webhook.port}/validate",
                    cert.ca_file.read_bytes(),
                    namespace,
                ),
            )
            answers: Answers = {}
            await _prove(
                answers, admin, control_plane, tmp_path, namespace, agent_account, daemonset
            )
            await _preflight_passes(admin, control_plane, namespace, agent_account, daemonset)
            await _prove_an_outage_strands_no_hold(
                answers,
                admin,
                control_plane,
                tmp_path,
                namespace,
                agent_account,
                daemonset,
                webhook,
            )
            # docs/rights.md's rows of this install are exactly these answers.
            table = documented(INSTALL)
            wrong = {r: (table.get(r), a) for r, a in answers.items() if table.get(r) != a}
            assert not wrong, f"(table, API server) per request: {wrong}"
            assert set(table) == set(answers), f"rows no request made: {set(table) - set(answers)}"
        finally:
            await reap(started)
            await _status(
                client.AdmissionregistrationV1Api(admin).delete_validating_webhook_configuration(
                    configuration_name
                )
            )


async def _preflight_passes(
    admin: client.ApiClient, plane: ControlPlane, namespace: str, account: str, daemonset: Any
) -> None:
    """``drain-guard preflight`` with the admin's kubeconfig, impersonating the agent on a Node
    of its own with a drain pending and a build pod: every row of this install it can make
    without the webhook stopped, answered as the table says."""
    core: Any = client.CoreV1Api(admin)
    own, other = unique("worker"), unique("worker")
    for name in (own, other):
        await core.create_node(_node(name))
    await _agent_pod(admin, namespace, account, daemonset, own)
    build = {
        "metadata": {"name": unique("build"), "labels": BUILD_LABELS},
        "spec": {"nodeName": own, "containers": [{"name": "b", "image": "builder"}]},
    }
    await core.create_namespaced_pod(MCO, build)
    code, out, err = await run_cli(
        "preflight",
        "--kubeconfig",
        str(plane.admin_kubeconfig),
        "--namespace",
        namespace,
        "--service-account",
        account,
        "--node-name",
        own,
        "--install",
        "openshift-4.15",
    )
    assert (code, err) == (0, ""), out + err
    rows = len(documented(INSTALL))
    untried = [line for line in out.splitlines() if "not tried:" in line]
    assert len(untried) == 4, untried  # a release, a cleanup, two with the webhook down
    assert f"{rows - 4} of {rows} rows tried, 0 surprises" in out, out


async def _agent_pod(
    admin: client.ApiClient, namespace: str, account: str, daemonset: Any, node: str
) -> tuple[str, str]:
    """The DaemonSet's pod on ``node``, as its controller would make it; (name, uid)."""
    template = admin.sanitize_for_serialization(daemonset.spec.template)
    name = unique("agent")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": template["metadata"]["labels"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": account,
                    "uid": daemonset.metadata.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {**template["spec"], "nodeName": node},
    }
    core: Any = client.CoreV1Api(admin)
    created = await core.create_namespaced_pod(namespace, pod)
    return name, str(created.metadata.uid)


async def _prove(
    answers: Answers,
    admin: client.ApiClient,
    plane: ControlPlane,
    tmp_path: Path,
    namespace: str,
    account: str,
    daemonset: Any,
) -> None:
    """Every row of this install that ``drain-guard preflight`` makes, by its own makers and
    in the state each needs (test_rights.made, as for the other installs), with the agent's
    real tokens: the one bound to its pod on a Node of its own (a build pod there), and one
    bound to no pod."""
    core: Any = client.CoreV1Api(admin)
    own, other = unique("worker"), unique("worker")
    for name in (own, other):
        await core.create_node(_node(name))
    pod = await _agent_pod(admin, namespace, account, daemonset, own)
    await core.create_namespaced_pod(
        MCO,
        {
            "metadata": {"name": unique("build"), "labels": BUILD_LABELS},
            "spec": {"nodeName": own, "containers": [{"name": "b", "image": "builder"}]},
        },
    )
    kubeconfig = await bound_kubeconfig(
        admin, plane, tmp_path / "agent", namespace, account, pod, expiration_seconds=600
    )
    async with api_client(kubeconfig) as agent:
        setup = Installed(INSTALL, plane, admin, agent, kubeconfig, own, other, pod[0], POOL)
        async with probe_of(setup, tmp_path, namespace, account) as probe:
            for request in documented(INSTALL):
                if request not in UNMADE:
                    answers[request] = await made(setup, probe, request)


async def _prove_an_outage_strands_no_hold(
    answers: Answers,
    admin: client.ApiClient,
    plane: ControlPlane,
    tmp_path: Path,
    namespace: str,
    account: str,
    daemonset: Any,
    webhook: AgentProcess,
) -> None:
    """The webhook gone: every write but a release is refused (failurePolicy Fail), the
    release of a hold taken before goes through (the release entry's Ignore)."""
    core: Any = client.CoreV1Api(admin)
    held = unique("worker")
    await core.create_node(_node(held))
    pod = await _agent_pod(admin, namespace, account, daemonset, held)
    kubeconfig = await bound_kubeconfig(
        admin, plane, tmp_path / "agent-outage", namespace, account, pod, expiration_seconds=600
    )
    hold = protocol.hold_patch(
        REQUEST,
        LAST_APPLIED,
        "0",
        [Reason.MANUAL],
        datetime.now(UTC),
        "operator",
        expires=datetime.now(UTC) + timedelta(minutes=45),
    )
    async with api_client(kubeconfig) as agent:
        as_agent: Any = client.CoreV1Api(agent)
        status, message = await _status(as_agent.patch_node(held, hold, _content_type=JSON_PATCH))
        assert status == 200, message
        await webhook.stop()
        node = await core.read_node(held)
        record = protocol.read_hold(node.metadata.annotations)
        assert record is not None
        update = protocol.update_hold_patch(
            record,
            [Reason.BUILD_POD],
            "more",
            record.since + timedelta(minutes=45),
            seen=node.metadata.annotations,
            resource_version=node.metadata.resource_version,
        )
        status, message = await _ask(
            answers,
            "update its own Node's hold while the webhook is down",
            as_agent.patch_node(held, update, _content_type=JSON_PATCH),
        )
        assert status != 200, "a write went through without the webhook"
        assert "failed calling webhook" in message, message
        release = protocol.release_patch(
            REQUEST, LAST_APPLIED, node.metadata.resource_version, node.metadata.annotations
        )
        status, message = await _ask(
            answers,
            "release its own Node's hold while the webhook is down",
            as_agent.patch_node(held, release, _content_type=JSON_PATCH),
        )
        assert status == 200, message
    node = await core.read_node(held)
    assert node.metadata.annotations[protocol.DESIRED_DRAIN] == REQUEST
    assert protocol.HELD_DRAIN not in node.metadata.annotations
