"""The systemd install on the real control plane: drain-guard node-proxy holds a real node
identity (a client certificate of ``system:node:<node>`` in ``system:nodes``, authorized by the
real Node authorizer and NodeRestriction) and the agent, as its unit runs it (its own UID, no
credential, ``--api-socket``), holds and releases its Node through it; whatever else the
agent's process asks is refused by the proxy, and its own Node's write in the protocol's shape
reaches the real API server's compare-and-swap. Processes as in
tests/integration/test_node_proxy.py, which runs the same against the simulator.
"""

from __future__ import annotations

import base64
import os
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard import protocol
from drain_guard.confine.rights import ALLOWED, expected
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client, own_namespace
from tests.controlplane.nodes import (
    DRAIN_B,
    add_build_pod,
    create_worker,
    mcd_request,
    set_phase,
    until,
    wait_annotation,
)
from tests.deploy.tools import REPO, under
from tests.helpers import IMAGE_B, MCO_NS, confinement
from tests.integration.test_node_proxy import (
    JSON_PATCH,
    as_agent,
    attempts,
    reads_as_agent,
    start_agent,
    started_proxy,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the proxy runs as root")

DRAIN = protocol.annotation_path(protocol.DESIRED_DRAIN)
RIGHTS = REPO / "docs" / "rights.md"


@pytest.fixture
def root() -> Iterator[Path]:
    """The scratch host: one the agent's user may enter (pytest's own are root's, 0700)."""
    with tempfile.TemporaryDirectory(prefix="dg-host-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


def node_kubeconfig(control_plane: ControlPlane, root: Path, node: str) -> Path:
    """The kubelet's kubeconfig of ``node`` on the scratch host: a real node identity."""
    kubeconfig = Path(under(root, "/var/lib/kubelet/kubeconfig"))
    kubeconfig.parent.mkdir(parents=True)
    control_plane.user_kubeconfig(f"system:node:{node}", ["system:nodes"], kubeconfig)
    kubeconfig.chmod(0o600)
    return kubeconfig


async def test_the_agent_holds_and_releases_through_the_proxy_on_the_real_api_server(
    control_plane: ControlPlane, admin: client.ApiClient, root: Path, agents: list[AgentProcess]
) -> None:
    node, other = await create_worker(admin), await create_worker(admin)
    kubeconfig = node_kubeconfig(control_plane, root, node)
    assert not reads_as_agent(root, kubeconfig)  # the agent's user reads no credential

    async with started_proxy(root, node) as proxy:
        agent = await start_agent(root, agents, node)
        doc = await confinement(agent)
        assert doc["confined"] is True, doc
        assert (
            "drain-guard node-proxy: an agent may change only the Node it runs on"
            in (doc["detail"])
        )

        pod = await add_build_pod(admin, node)
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        assert held[protocol.HOLD_REASONS] == "build-pod"
        await set_phase(admin, pod, "Succeeded")
        await wait_annotation(admin, node, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)

        # Its Events, written as the node through the proxy, are about its Node only.
        core = client.CoreV1Api(admin)

        async def released() -> list[client.CoreV1Event]:
            found = await core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={node}"
            )
            return [e for e in found.items if e.reason == "DrainReleased"]

        (event,) = await until(released)
        assert event.reporting_component == "drain-guard"

        # ... and its pool's (rendered-worker-…: pool worker), related to its Node, without
        # the pool's uid (the node's identity reads no pool: `oc get events` finds it by name).
        async def pool_released() -> list[client.CoreV1Event]:
            found = await core.list_namespaced_event(
                "default",
                field_selector="involvedObject.kind=MachineConfigPool,involvedObject.name=worker"
                ",reason=PoolRolloutReleased",
            )
            return [e for e in found.items if e.related and e.related.name == node]

        (pooled,) = await until(pool_released)
        assert pooled.involved_object.uid is None
        assert pooled.reporting_instance == f"drain-guard-{node}"

        # What a compromised agent process would try (a pool Event related to another Node
        # among them): refused by the proxy, every one.
        tried = attempts(node, other)
        answers = await as_agent(root, tried)
        for attempt, (status, message) in zip(tried, answers, strict=True):
            assert status == 403, (attempt, status, message)
            assert message.startswith("drain-guard node-proxy: "), (attempt, message)
        # Its own Node's release in the protocol's shape does reach the real API server, whose
        # compare-and-swap refuses it: desiredDrain is no longer held (422).
        ((status, message),) = await as_agent(
            root,
            [
                (
                    "PATCH",
                    f"/api/v1/nodes/{node}",
                    JSON_PATCH,
                    [
                        {"op": "test", "path": DRAIN, "value": "hold-" + DRAIN_B},
                        {"op": "add", "path": DRAIN, "value": DRAIN_B},
                    ],
                )
            ],
        )
        assert status == 422, message
        assert await agent.stop() == 0
        assert proxy.returncode is None


async def test_no_path_the_api_server_decodes_again_reads_a_secret_through_the_proxy(
    control_plane: ControlPlane, admin: client.ApiClient, root: Path
) -> None:
    """Issue 34: a namespace segment the API server decodes into a Secret's path, ``/pods``
    cut off by a ``#``, once read the Secret of a pod on the node through the proxy. The
    node's own identity may read it (the Node authorizer: a pod bound to the node mounts it),
    so only the proxy stands between the agent's UID and it."""
    node = await create_worker(admin)
    kubeconfig = node_kubeconfig(control_plane, root, node)
    namespace = await own_namespace(admin, "tenant")
    core = client.CoreV1Api(admin)
    await core.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="db-password"), string_data={"p": "s3"}),
    )
    volume = client.V1Volume(
        name="db", secret=client.V1SecretVolumeSource(secret_name="db-password")
    )
    container = client.V1Container(name="app", image="registry.invalid/app")
    await core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="app"),
            spec=client.V1PodSpec(node_name=node, containers=[container], volumes=[volume]),
        ),
    )
    async with api_client(kubeconfig) as as_node:

        async def node_reads_secret() -> bool:
            try:
                await client.CoreV1Api(as_node).read_namespaced_secret("db-password", namespace)
            except ApiException as error:
                if error.status != 403:
                    raise
                return False
            return True

        await until(node_reads_secret)  # the Node authorizer's graph has the pod's mount

    selector = f"fieldSelector=spec.nodeName%3D{node}"
    smuggled = [
        f"{namespace}%252Fsecrets%252Fdb-password%23",
        f"{namespace}%2Fsecrets%2Fdb-password%23",
        f"{namespace}%252Fsecrets%252Fdb-password%253F",
        f"{namespace}%2Fsecrets%2Fdb-password%3F",
        f"{namespace}/secrets/db-password#",
    ]
    async with started_proxy(root, node):
        reads: list[tuple[str, str, str, object]] = [
            ("GET", f"/api/v1/namespaces/{segment}/pods?{selector}", "", None)
            for segment in [*smuggled, namespace]
        ]
        answers = await as_agent(root, reads)
    *refused, (listed, _) = answers
    for segment, (status, message) in zip(smuggled, refused, strict=True):
        assert status == 403, (segment, status, message)
        assert message.startswith("drain-guard node-proxy: "), (segment, message)
    assert listed == 200  # the pods bound to its Node, in the same namespace: passed on


#: docs/rights.md's install whose rows the next test makes: the systemd agent, whose requests
#: go through drain-guard node-proxy with the node's identity.
INSTALL = "systemd"
PROXY_DENIAL = "drain-guard node-proxy: "
MERGE = "application/merge-patch+json"
JSON = "application/json"
ProxyRequest = tuple[str, str, str, object]


def _hold(ann: dict[str, str]) -> list[protocol.JsonPatchOp]:
    return list(
        protocol.hold_patch(
            DRAIN_B,
            ann.get(protocol.LAST_APPLIED_DRAIN),
            "",
            [protocol.Reason.BUILD_POD],
            datetime.now(UTC),
            "rights test",
            expires=datetime.now(UTC) + timedelta(minutes=45),
        )
    )


def _release(ann: dict[str, str]) -> list[protocol.JsonPatchOp]:
    present = [k for k in protocol.OWNED_KEYS if k in ann]
    return list(protocol.release_patch(DRAIN_B, ann.get(protocol.LAST_APPLIED_DRAIN), "", present))


def _event(node: str, about: str) -> Any:
    """An Event about Node ``about`` as the recorder of ``node``'s agent writes one."""
    return {
        "metadata": {"name": f"{node}.{uuid.uuid4().hex[:12]}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": about},
        "reason": "DrainReleased",
        "message": "rights test",
        "type": "Normal",
        "source": {"component": "drain-guard", "host": node},
        "reportingComponent": "drain-guard",
        "reportingInstance": f"drain-guard-{node}",
    }


def _systemd_requests(
    node: str, other: str, ann: dict[str, str]
) -> dict[str, Callable[[], ProxyRequest]]:
    """docs/rights.md's request column for the systemd agent, word for word, and the request
    the agent's process sends the proxy for each (``ann``: its Node's annotations, read just
    before a write that tests them)."""
    mco_pods = f"/api/v1/namespaces/{MCO_NS}/pods?fieldSelector=spec.nodeName%3D{node}"
    budget = {"metadata": {"name": "x"}, "spec": {"minAvailable": 1, "selector": {}}}
    return {
        "get its own Node": lambda: ("GET", f"/api/v1/nodes/{node}", JSON, None),
        "list the pods on its own Node in openshift-machine-config-operator": lambda: (
            "GET",
            mco_pods,
            JSON,
            None,
        ),
        "list the pods in kube-system": lambda: (
            "GET",
            "/api/v1/namespaces/kube-system/pods",
            JSON,
            None,
        ),
        "hold its own Node's drain (the agent's JSON Patch)": lambda: (
            "PATCH",
            f"/api/v1/nodes/{node}",
            JSON_PATCH,
            _hold(ann),
        ),
        "release its own Node's hold (the agent's JSON Patch)": lambda: (
            "PATCH",
            f"/api/v1/nodes/{node}",
            JSON_PATCH,
            _release(ann),
        ),
        "hold another Node's drain": lambda: (
            "PATCH",
            f"/api/v1/nodes/{other}",
            MERGE,
            {"metadata": {"annotations": {protocol.HELD_DRAIN: DRAIN_B}}},
        ),
        "taint its own Node": lambda: (
            "PATCH",
            f"/api/v1/nodes/{node}",
            MERGE,
            {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}},
        ),
        "label its own Node": lambda: (
            "PATCH",
            f"/api/v1/nodes/{node}",
            MERGE,
            {"metadata": {"labels": {"x": "y"}}},
        ),
        "write its own Node's status": lambda: (
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            MERGE,
            {"status": {"conditions": []}},
        ),
        "delete its own Node": lambda: ("DELETE", f"/api/v1/nodes/{node}", JSON, None),
        "create an Event about its own Node in default": lambda: (
            "POST",
            "/api/v1/namespaces/default/events",
            JSON,
            _event(node, node),
        ),
        "create an Event about another Node in default": lambda: (
            "POST",
            "/api/v1/namespaces/default/events",
            JSON,
            _event(node, other),
        ),
        "create a budget on its own Node's build pod": lambda: (
            "POST",
            f"/apis/policy/v1/namespaces/{MCO_NS}/poddisruptionbudgets",
            JSON,
            budget,
        ),
        "create a token for MCO's machine-os-builder ServiceAccount": lambda: (
            "POST",
            f"/api/v1/namespaces/{MCO_NS}/serviceaccounts/machine-os-builder/token",
            JSON,
            {"spec": {"audiences": []}},
        ),
        "list the Secrets of openshift-machine-config-operator": lambda: (
            "GET",
            f"/api/v1/namespaces/{MCO_NS}/secrets",
            JSON,
            None,
        ),
        "create a CertificateSigningRequest": lambda: (
            "POST",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            JSON,
            {"spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet"}},
        ),
    }


def _answer(status: int, message: str) -> str:
    """allowed, the proxy's refusal, or the API server's (the node's identity)."""
    if 200 <= status < 300:
        return ALLOWED
    if status == 403 and message.startswith(PROXY_DENIAL):
        return "denied: drain-guard node-proxy"
    return f"error {status}: {message}"


async def test_the_rights_table_is_what_the_proxy_and_the_real_api_server_answer(
    control_plane: ControlPlane, admin: client.ApiClient, root: Path
) -> None:
    """docs/rights.md's ``systemd`` rows, each sent to the proxy by a process of the agent's
    user with no credential, as the agent's own requests go: the proxy's refusal, or the
    real API server's answer to the node's identity. The hold is made on a pending drain
    and the release on that hold."""
    node, other = await create_worker(admin), await create_worker(admin)
    node_kubeconfig(control_plane, root, node)
    table = expected(RIGHTS.read_text(), INSTALL)
    results: dict[str, str] = {}
    async with started_proxy(root, node):
        for request in table:
            if request.startswith("hold its own"):
                await mcd_request(admin, node, DRAIN_B)
            ann = dict((await client.CoreV1Api(admin).read_node(node)).metadata.annotations)
            make = _systemd_requests(node, other, ann).get(request)
            assert make is not None, f"a row no request makes: {request}"
            ((status, message),) = await as_agent(root, [make()])
            results[request] = _answer(status, message)
    wrong = {r: (table[r], results[r]) for r in table if table[r] != results[r]}
    assert not wrong, f"(table, proxy and API server) per request: {wrong}"
    assert set(_systemd_requests(node, other, {})) == set(table), "requests no row names"


#: docs/rights.md's install of the node proxy's own credential: what a taken-over proxy (root
#: on the host, as the kubelet) could do with the node's identity.
NODE_INSTALL = "systemd: node proxy (the node's identity)"


async def _node_answer(call: Awaitable[Any]) -> str:
    """allowed; the authorizer's refusal (its message names what the user cannot do);
    otherwise NodeRestriction's (an admission plugin's 403 names no verb)."""
    try:
        await call
    except ApiException as error:
        if error.status != 403:
            return f"error {error.status}: {error.body!r}"
        return (
            "denied: the authorizer" if " cannot " in str(error.body) else "denied: NodeRestriction"
        )
    return ALLOWED


def _node_csr(node: str) -> str:
    """A kubelet's client certificate request, base64 PEM, as the kubelet makes one to rotate
    its certificate (``system:node:<node>`` in ``system:nodes``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
        ]
    )
    request = (
        x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    )
    return base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode()


def _node_requests(
    api: client.ApiClient, node: str, other: str
) -> dict[str, Callable[[], Awaitable[Any]]]:
    """docs/rights.md's request column for the node's identity, word for word."""
    core = client.CoreV1Api(api)
    note = {"metadata": {"annotations": {"example.com/rights": "x"}}}
    taints = {"spec": {"taints": [{"key": "example.com/t", "effect": "NoSchedule"}]}}
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    budget: Any = {
        "metadata": {"name": "rights", "namespace": MCO_NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"x": "y"}}},
    }
    csr: Any = {
        "metadata": {"name": f"rights-{uuid.uuid4().hex[:8]}"},
        "spec": {
            "request": _node_csr(node),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["client auth"],
        },
    }
    return {
        "get its own Node": lambda: core.read_node(node),
        "annotate its own Node": lambda: core.patch_node(node, note, dry_run="All"),
        "annotate another Node": lambda: core.patch_node(other, note, dry_run="All"),
        "taint its own Node": lambda: core.patch_node(node, taints, dry_run="All"),
        "list the pods on its own Node in every namespace": lambda: (
            core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        ),
        "list every pod": lambda: core.list_pod_for_all_namespaces(),
        "create an Event about another Node in default": lambda: core.create_namespaced_event(
            "default", _event(node, other), dry_run="All"
        ),
        "create a budget in openshift-machine-config-operator": lambda: client.PolicyV1Api(
            api
        ).create_namespaced_pod_disruption_budget(MCO_NS, budget, dry_run="All"),
        "create a token for a ServiceAccount no pod on its node runs as": lambda: (
            core.create_namespaced_service_account_token("default", "kube-system", request)
        ),
        "read a Secret no pod on its node uses": lambda: core.read_namespaced_secret(
            "rights", "kube-system"
        ),
        "create a CertificateSigningRequest": lambda: client.CertificatesV1Api(
            api
        ).create_certificate_signing_request(csr, dry_run="All"),
    }


async def test_the_rights_table_is_what_the_real_api_server_answers_the_nodes_identity(
    control_plane: ControlPlane, admin: client.ApiClient, root: Path
) -> None:
    """docs/rights.md's rows for the node's identity, the credential the proxy holds, made
    with a real ``system:node:`` client certificate on the real API server (Node
    authorizer, RBAC, NodeRestriction)."""
    node, other = await create_worker(admin), await create_worker(admin)
    kubeconfig = node_kubeconfig(control_plane, root, node)
    table = expected(RIGHTS.read_text(), NODE_INSTALL)
    async with api_client(kubeconfig) as api:
        made = _node_requests(api, node, other)
        results = {r: await _node_answer(make()) for r, make in made.items()}
    wrong = {r: (table.get(r), results[r]) for r in results if table.get(r) != results[r]}
    assert not wrong, f"(table, API server) per request: {wrong}"
    assert set(table) == set(results), f"rows no request makes: {set(table) - set(results)}"
