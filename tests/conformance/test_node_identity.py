"""A node's identity (``system:node:<name>`` in ``system:nodes``, a client certificate as the
kubelet's), read as an attacker who owns it would: the Node authorizer and NodeRestriction
let it write its own Node and the pods bound to it, and nothing of another node's, nor
secrets, service-account tokens or approvals it has no business with.

Only what Kubernetes 1.28 (OpenShift 4.15) and 1.34 agree on is asked here; reads of other
Nodes and pods differ between them (docs/simulator-conformance.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance.client import MERGE_PATCH, Client, Response
from tests.conformance.objects import create_pod, eviction, node, pods_path
from tests.conformance.servers import Server

NODES_GROUP = "system:nodes"


@pytest.fixture
async def kubelet(server: Server, admin: Client, ns: str, tmp_path: Path) -> AsyncIterator[Client]:
    """The identity of node ``<ns>-n0`` (both ``<ns>-n0`` and ``<ns>-n1`` exist)."""
    for suffix in ("n0", "n1"):
        await admin.ok("POST", "/api/v1/nodes", node(f"{ns}-{suffix}"))
    kubeconfig = server.user_kubeconfig(f"system:node:{ns}-n0", [NODES_GROUP], tmp_path / "kc")
    async with Client(kubeconfig) as client:
        yield client
    for suffix in ("n0", "n1"):
        await admin.delete(f"/api/v1/nodes/{ns}-{suffix}")


def _forbidden(answer: Response, message: str) -> None:
    assert answer.status == 403, answer.body
    assert answer.reason == "Forbidden"
    assert answer.body["message"] == message


async def test_a_node_annotates_its_own_node(kubelet: Client, ns: str) -> None:
    patched = await kubelet.ok(
        "PATCH",
        f"/api/v1/nodes/{ns}-n0",
        {"metadata": {"annotations": {"example.com/held": "yes"}}},
        content_type=MERGE_PATCH,
    )
    assert patched["metadata"]["annotations"] == {"example.com/held": "yes"}


async def test_a_node_may_not_modify_another_node(kubelet: Client, ns: str) -> None:
    answer = await kubelet.patch(
        f"/api/v1/nodes/{ns}-n1",
        {"metadata": {"annotations": {"example.com/held": "yes"}}},
        MERGE_PATCH,
    )
    _forbidden(
        answer,
        f'nodes "{ns}-n1" is forbidden: node "{ns}-n0" is not allowed to modify node "{ns}-n1"',
    )


async def test_a_node_may_not_set_its_role_label(kubelet: Client, ns: str) -> None:
    answer = await kubelet.patch(
        f"/api/v1/nodes/{ns}-n0",
        {"metadata": {"labels": {"node-role.kubernetes.io/master": ""}}},
        MERGE_PATCH,
    )
    _forbidden(
        answer,
        f'nodes "{ns}-n0" is forbidden: is not allowed to modify labels: '
        "node-role.kubernetes.io/master",
    )


async def test_a_node_writes_status_and_evicts_only_its_own_pods(
    kubelet: Client, admin: Client, ns: str
) -> None:
    await create_pod(admin, ns, "mine", f"{ns}-n0")
    await create_pod(admin, ns, "theirs", f"{ns}-n1")
    status = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    mine = await kubelet.patch(pods_path(ns, "mine") + "/status", status, MERGE_PATCH)
    assert mine.status == 200
    theirs = await kubelet.patch(pods_path(ns, "theirs") + "/status", status, MERGE_PATCH)
    _forbidden(
        theirs,
        f'pods "theirs" is forbidden: node "{ns}-n0" can only update pod status for pods '
        "with spec.nodeName set to itself",
    )
    evicted = await kubelet.post(pods_path(ns, "theirs") + "/eviction", eviction("theirs"))
    _forbidden(
        evicted,
        f'pods "theirs" is forbidden: node {ns}-n0 can only evict pods with spec.nodeName set '
        "to itself",
    )
    assert (await kubelet.post(pods_path(ns, "mine") + "/eviction", eviction("mine"))).status == 201


async def test_a_node_deletes_only_its_own_pods_and_creates_none(
    kubelet: Client, admin: Client, ns: str
) -> None:
    await create_pod(admin, ns, "theirs", f"{ns}-n1")
    answer = await kubelet.delete(pods_path(ns, "theirs"))
    _forbidden(
        answer,
        f'pods "theirs" is forbidden: node "{ns}-n0" can only delete pods with spec.nodeName '
        "set to itself",
    )
    body = {
        "metadata": {"name": "mine"},
        "spec": {"nodeName": f"{ns}-n0", "containers": [{"name": "c", "image": "x"}]},
    }
    created = await kubelet.post(pods_path(ns), body)
    _forbidden(
        created,
        f'pods "mine" is forbidden: pod does not have "kubernetes.io/config.mirror" '
        f'annotation, node "{ns}-n0" can only create mirror pods',
    )


async def test_a_node_reads_no_secret_it_has_no_pod_for(
    kubelet: Client, admin: Client, ns: str
) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}}
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/secrets", secret)
    answer = await kubelet.get(f"/api/v1/namespaces/{ns}/secrets/s")
    assert answer.status == 403
    assert answer.reason == "Forbidden"
    assert answer.body["message"].startswith(
        f'secrets "s" is forbidden: User "system:node:{ns}-n0" cannot get resource "secrets" '
        f'in API group "" in the namespace "{ns}"'
    )
    listed = await kubelet.get(f"/api/v1/namespaces/{ns}/secrets")
    assert listed.status == 403
    created = await kubelet.post(f"/api/v1/namespaces/{ns}/secrets", secret)
    assert created.status == 403


async def test_a_node_gets_no_token_of_an_account_no_pod_of_it_uses(
    kubelet: Client, admin: Client, ns: str
) -> None:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "someone"}}
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", account)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    answer = await kubelet.post(f"/api/v1/namespaces/{ns}/serviceaccounts/someone/token", request)
    assert answer.status == 403
    assert answer.reason == "Forbidden"
    assert answer.body["message"].startswith(
        f'serviceaccounts "someone" is forbidden: User "system:node:{ns}-n0" cannot create '
        f'resource "serviceaccounts/token" in API group "" in the namespace "{ns}"'
    )


async def test_a_node_may_not_approve_a_certificate_request(kubelet: Client, ns: str) -> None:
    answer = await kubelet.put(
        f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{ns}-csr/approval",
        {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": f"{ns}-csr"},
        },
    )
    assert answer.status == 403
    assert answer.body["message"].startswith(
        f'certificatesigningrequests.certificates.k8s.io "{ns}-csr" is forbidden: User '
        f'"system:node:{ns}-n0" cannot update resource "certificatesigningrequests/approval" '
        'in API group "certificates.k8s.io" at the cluster scope'
    )


def _csr_pem(common_name: str) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    request = (
        x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM).decode()


async def test_a_node_requests_its_own_client_certificate(kubelet: Client, ns: str) -> None:
    """What the kubelet's rotation does: create a CSR for the kubelet client signer."""
    import base64

    user = f"system:node:{ns}-n0"
    csr = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": f"{ns}-csr"},
        "spec": {
            "request": base64.b64encode(_csr_pem(user).encode()).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
        },
    }
    created = await kubelet.ok(
        "POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", csr
    )
    assert created["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert created["spec"]["username"] == user
    assert not (created.get("status") or {}).get("certificate")
