"""The central shield's account on OpenShift 4.15/4.16's admission, on the real control plane:
``daemonset/overlays/systemd-4.15`` applied as rendered on a kube-apiserver that serves and
enforces no ValidatingAdmissionPolicy (as Kubernetes 1.28/1.29), its admission webhook
running as a process the API server calls, and a real token of the shield's ServiceAccount.
docs/rights.md's ``systemd-4.15: central shield`` rows are what the API server answers it:
each write outside its confinement is refused by the webhook's entry, not only by RBAC (RBAC
alone lets it create and delete any budget in MCO's namespace); and ``drain-guard shield``
with that token keeps a build pod's budget, so the webhook refuses nothing the shield does.

As ``test_shield_confinement``: the account in a namespace of the test's own, named as
shipped and renamed (a prefix and a suffix), its grants in MCO's namespace named apart. The
webhook is reached by ``clientConfig.url`` on loopback with a CA made for the test, and its
entry gets one more matchCondition, this test's namespace only.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.agentproc import spawn_webhook
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane import test_shield_confinement as confined
from tests.controlplane.helpers import api_client, assert_rights_table, own_namespace
from tests.controlplane.nodes import create_worker, shared_namespace, until
from tests.controlplane.test_shield_confinement import (
    NAMES,
    REQUESTS,
    Shield,
    kubectl,
    stall_the_namespace,
)
from tests.controlplane.test_webhook_rights import REQUESTS as WEBHOOK_REQUESTS
from tests.deploy.tools import Obj, render
from tests.helpers import MCO_NS, reap

OVERLAY = "systemd-4.15"
INSTALL = "systemd-4.15: central shield"
#: The webhook's own account in this install (it reads no agent's pod here).
WEBHOOK_INSTALL = "systemd-4.15: admission webhook"
ENTRY = "shield.drain-guard.io"
DENIED = f"denied: webhook {ENTRY}"
WEBHOOK = "drain-guard-webhook"


def overlay_objects(namespace: str, account: str, suffix: str) -> list[Obj]:
    """The rendered overlay's two accounts (the shield's named ``account``) moved to
    ``namespace``, their grants in MCO's namespace and the webhook configuration named with
    ``suffix``; the Deployments, Services and the rest are not applied (no kubelet here)."""
    kept: list[Obj] = []
    for obj in render(OVERLAY):
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "ServiceAccount" and meta["name"] in (confined.ACCOUNT, WEBHOOK):
            meta["namespace"] = namespace
            if meta["name"] == confined.ACCOUNT:
                meta["name"] = account
        elif kind in ("Role", "RoleBinding") and meta.get("namespace") == MCO_NS:
            meta["name"] += suffix
            if kind == "RoleBinding":
                obj["roleRef"]["name"] += suffix
                for subject in obj["subjects"]:
                    subject["namespace"] = namespace
                    if subject["name"] == confined.ACCOUNT:
                        subject["name"] = account
        elif kind == "ValidatingWebhookConfiguration":
            meta["name"] += suffix
        else:
            continue
        kept.append(obj)
    return kept


def pointed_at(objects: list[Obj], url: str, ca: bytes, namespace: str) -> None:
    """The configuration sent to ``url`` and called for this test's namespace only."""
    (configuration,) = (o for o in objects if o["kind"] == "ValidatingWebhookConfiguration")
    configuration["metadata"].pop("annotations")  # the service CA's injection
    for webhook in configuration["webhooks"]:
        webhook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca).decode()}
        webhook["matchConditions"].append(
            {
                "name": "this-test-only",
                "expression": (
                    f"request.userInfo.username.startsWith('system:serviceaccount:{namespace}:')"
                ),
            }
        )


async def token(admin: client.ApiClient, account: str, namespace: str) -> str:
    made = await client.CoreV1Api(admin).create_namespaced_service_account_token(
        account,
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        ),
    )
    return str(made.status.token)


@pytest.fixture(params=list(NAMES))
async def installed(
    request: pytest.FixtureRequest, control_plane_no_policy: ControlPlane, tmp_path: Path
) -> AsyncIterator[Shield]:
    plane = control_plane_no_policy
    account = NAMES[request.param]
    async with api_client(plane.admin_kubeconfig) as admin:
        await shared_namespace(admin, MCO_NS)
        namespace = await own_namespace(admin, "shield")
        objects = overlay_objects(namespace, account, "-" + namespace)
        cert = ServingCert.generate(tmp_path / "webhook-tls")
        manifest = tmp_path / "shield.yaml"
        manifest.write_text(
            yaml.safe_dump_all(
                [o for o in objects if o["kind"] != "ValidatingWebhookConfiguration"]
            )
        )
        kubectl(plane, "apply", "--server-side", "-f", str(manifest))
        webhook_kubeconfig = plane.token_kubeconfig(
            await token(admin, WEBHOOK, namespace), tmp_path / "webhook"
        )
        webhook = await spawn_webhook(webhook_kubeconfig, cert.cert_file, cert.key_file)
        try:
            await webhook.wait_log(lambda r: str(r.get("message", "")).startswith("listening"))
            url = f"https://127.0.0.1:{webhook.port}/validate"
            pointed_at(objects, url, cert.ca_file.read_bytes(), namespace)
            manifest.write_text(yaml.safe_dump_all(objects))
            kubectl(plane, "apply", "--server-side", "-f", str(manifest))
            kubeconfig = plane.token_kubeconfig(
                await token(admin, account, namespace), tmp_path / "shield"
            )
            node = await create_worker(admin)
            async with api_client(kubeconfig) as shield:
                setup = Shield(plane, admin, shield, kubeconfig, namespace, account, node)
                await until(lambda: webhook_in_force(setup))
                yield setup
        finally:
            await reap([webhook])
            kubectl(plane, "delete", "--ignore-not-found", "-f", str(manifest))
            await client.CoreV1Api(admin).delete_namespace(namespace)


async def webhook_in_force(setup: Shield) -> bool:
    """Whether the API server calls the webhook just configured (it loads the configuration
    in the background): a budget that would stall MCO's namespace refused by its entry."""
    return await stall_the_namespace(setup) == DENIED


async def test_no_policy_is_served_here(control_plane_no_policy: ControlPlane) -> None:
    """The plane is 4.15's in what matters here: the policy API is not there to apply."""
    async with api_client(control_plane_no_policy.admin_kubeconfig) as admin:
        groups = await client.AdmissionregistrationV1Api(admin).get_api_resources()
        served = {r.name for r in groups.resources}
    assert "validatingwebhookconfigurations" in served
    assert not served & {"validatingadmissionpolicies", "validatingadmissionpolicybindings"}


async def test_the_rights_table_is_what_the_real_api_server_answers_the_shield(
    installed: Shield,
) -> None:
    results = {name: await make(installed) for name, make in REQUESTS.items()}
    assert_rights_table(results, INSTALL)


async def test_the_confined_shield_keeps_its_build_pods_budget(
    installed: Shield, tmp_path: Path
) -> None:
    await confined.test_the_confined_shield_keeps_its_build_pods_budget(installed, tmp_path)


async def test_the_rights_table_is_what_the_real_api_server_answers_the_webhooks_account(
    installed: Shield, tmp_path: Path
) -> None:
    """What a taken-over webhook could do with its own credential here: the openshift-4.15
    rows' requests (``test_webhook_rights``), made with a real token of the account as this
    overlay grants it."""
    kubeconfig = installed.plane.token_kubeconfig(
        await token(installed.admin, WEBHOOK, installed.namespace), tmp_path / "webhook-rights"
    )
    async with api_client(kubeconfig) as webhook:
        results = {
            name: await make(webhook, installed.namespace, installed.node)
            for name, make in WEBHOOK_REQUESTS.items()
        }
    assert_rights_table(results, WEBHOOK_INSTALL)
