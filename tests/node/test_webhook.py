"""The 4.15/4.16 admission webhook as shipped, on two real nodes: its Deployment of two
replicas (never on one node: a required pod anti-affinity, hence a second kubelet on this
machine, ``Node.add_node``), its budget, its Service, and the serving certificate the
service CA would issue, called by the real API server through that Service.

The webhook's objects are the ``openshift-4.15`` overlay's as it renders them with the image
set to ``make image``'s (docs/install.md), applied as rendered but for what the test plays
of OpenShift: the service CA (``harness.nodewebhook``: the Secret the Service's annotation
names, holding a certificate for ``drain-guard-webhook.drain-guard.svc`` from a CA made here,
and that CA injected into the configuration the annotation marks). The rest of that overlay
needs OpenShift (an SCC, the ostree host path, kube-rbac-proxy's registry image), so the
agents it confines are the kubernetes overlay's DaemonSet, the same account and grants, with
its admission policies deleted as the 4.15 overlay deletes them: only the webhook confines
them.

A hold by the agent of a node with a build pod is admitted; the same agent's token forging a
hold on the other Node is refused by the webhook; its NetworkPolicy, enforced here by
kube-router's policy controller (``harness.netpolicy``), refuses a pod's connection and lets
the API server's call and the kubelet's probes through; with one replica gone (its pod deleted, its
node cordoned so that no replacement can start), the budget refuses the other's eviction and
the remaining replica decides both alone.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drain_guard_sim.harness.netpolicy import Enforcer, enforcer_binary
from drain_guard_sim.harness.node import AddedNode, Node
from drain_guard_sim.harness.nodewebhook import (
    WEBHOOK,
    apply_webhook,
    as_manifest,
    webhook_objects,
)
from tests.deploy.tools import REPO, Obj
from tests.helpers import require_or_skip
from tests.node.helpers import (
    AGENT_NS,
    ARCHIVE,
    DESIRED_DRAIN,
    HELD_DRAIN,
    MCO_NS,
    NAMESPACE,
    OVERLAY,
    as_mco_worker,
    build_pod,
    delete_pod,
    evict,
    get,
    kubectl,
    request_drain,
    run_pod,
    wait_held,
    wait_jsonpath,
    wait_ready,
    wait_released,
    wait_rollout,
    wait_service_endpoints,
)

SECOND = "drain-guard-node-2"
MASTER = "node-role.kubernetes.io/master"


@pytest.fixture(scope="module")
def second(node: Node) -> Iterator[AddedNode]:
    """The second node, stopped at the module's end with everything it changed put back."""
    added = node.add_node(SECOND)
    yield added
    left = added.stop()
    assert not left, "the second node left the host changed:\n" + "\n".join(left)
    assert not added.cgroups()
    assert node.get_node(SECOND) is None


@pytest.fixture(scope="module")
def webhook(
    node: Node, second: AddedNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Obj]]:
    """The agents (kubernetes overlay, its policies deleted) on both nodes, the webhook's two
    replicas Ready, one on each; the objects applied, for the test to read."""
    if not ARCHIVE.exists():
        require_or_skip(f"{ARCHIVE} is not built (make image)")
    tmp_path = tmp_path_factory.mktemp("webhook")
    for name in (node.name, SECOND):
        as_mco_worker(node, name)
        kubectl(node, "label", "--overwrite", "node", name, f"{MASTER}=")
    install = node.install(OVERLAY, ARCHIVE, tmp_path / "install")
    # As the openshift-4.15 overlay does: no policy, the webhook alone confines the agents.
    kubectl(node, "delete", "validatingadmissionpolicy,validatingadmissionpolicybinding", "--all")
    objects = webhook_objects(REPO / "daemonset" / "overlays" / "openshift-4.15", ARCHIVE, tmp_path)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "Secret",  # the service CA's
        "Service",
        "ServiceAccount",
        "ValidatingWebhookConfiguration",
    ], kinds
    manifest = as_manifest(objects)
    try:
        apply_webhook(node, objects)
        yield objects
    finally:
        kubectl(node, "delete", "-f", "-", "--ignore-not-found", "--wait=true", stdin=manifest)
        kubectl(node, "delete", "-k", str(install), "--ignore-not-found", "--wait=true")
        kubectl(node, "uncordon", node.name, SECOND)
        kubectl(node, "label", "node", node.name, f"{MASTER}-")


def _replicas(node: Node) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = get(node, "pods", AGENT_NS)["items"]
    return [
        p
        for p in pods
        if p["metadata"]["labels"].get("app.kubernetes.io/name") == WEBHOOK
        and not p["metadata"].get("deletionTimestamp")
    ]


def _agent_token(node: Node, on: str, tmp_path: Path) -> Path:
    """A kubeconfig with the token the kubelet projected into the agent's pod on ``on``
    (bound to that pod: the webhook finds its node by it)."""
    pods = get(node, "pods", AGENT_NS)["items"]
    (pod,) = (
        p
        for p in pods
        if p["spec"].get("nodeName") == on
        and p["metadata"]["labels"].get("app.kubernetes.io/name") == "drain-guard"
    )
    kubelet = node.workdir if on == node.name else node.workdir / on
    volumes = kubelet / "kubelet" / "pods" / pod["metadata"]["uid"] / "volumes"
    (token,) = volumes.glob("kubernetes.io~projected/kube-api-access-*/token")
    return node.plane.token_kubeconfig(token.read_text(), tmp_path / "agent.kubeconfig")


def _forge_hold(node: Node, kubeconfig: Path, target: str) -> subprocess.CompletedProcess[str]:
    """A hold of ``target``'s drain in the protocol's shape, written with ``kubeconfig``."""
    request = get(node, f"node/{target}")["metadata"]["annotations"][DESIRED_DRAIN]
    patch = {"metadata": {"annotations": {DESIRED_DRAIN: f"hold-{request}", HELD_DRAIN: request}}}
    return subprocess.run(
        [
            "kubectl",
            f"--kubeconfig={kubeconfig}",
            "patch",
            "node",
            target,
            "--type=merge",
            "-p",
            json.dumps(patch),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def _refused_by_the_webhook(node: Node, forged: subprocess.CompletedProcess[str]) -> None:
    assert forged.returncode != 0, forged.stdout
    assert 'admission webhook "agents.drain-guard.io" denied the request' in forged.stderr, (
        forged.stderr
    )
    assert f"only the Node it runs on ({node.name})" in forged.stderr, forged.stderr


def test_two_replicas_serve_the_api_server_through_the_service(
    node: Node, webhook: list[Obj], tmp_path: Path
) -> None:
    """Two replicas, one on each node (the anti-affinity), Ready through their HTTPS probes
    with the service CA's certificate; the budget allows one disruption. The agent of the node
    with a build pod holds its drain (the webhook admits it) and releases it; its own token
    forging a hold on the other Node is refused by the webhook, which says why."""
    replicas = _replicas(node)
    assert sorted(p["spec"]["nodeName"] for p in replicas) == sorted([node.name, SECOND])
    assert all(c["ready"] for p in replicas for c in p["status"]["containerStatuses"]), replicas
    wait_jsonpath(node, f"pdb/{WEBHOOK}", ".status.disruptionsAllowed", "1", AGENT_NS)
    wait_service_endpoints(f"{AGENT_NS}/{WEBHOOK}:https", 2)

    build_pod(node, "build-webhook", node.name)
    request = request_drain(node, node.name)
    wait_held(node, request, node.name)
    kubectl(node, "delete", "-n", MCO_NS, "pod", "build-webhook", "--wait=true")
    wait_released(node, request, node.name)

    request_drain(node, SECOND)
    forged = _forge_hold(node, _agent_token(node, node.name, tmp_path), SECOND)
    _refused_by_the_webhook(node, forged)
    assert HELD_DRAIN not in get(node, f"node/{SECOND}")["metadata"]["annotations"]


def _connects(node: Node, pod: str, address: str, port: int) -> bool:
    """Whether ``pod`` opens a TCP connection to ``address:port`` within 3 s (refused, or a
    dropped SYN's time-out, is False)."""
    probe = f"import socket; socket.create_connection(({address!r}, {port}), timeout=3).close()"
    done = subprocess.run(
        [
            "kubectl",
            f"--kubeconfig={node.plane.admin_kubeconfig}",
            "exec",
            "-n",
            NAMESPACE,
            pod,
            "--",
            "python3",
            "-c",
            probe,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 or re.search(r"TimeoutError|ConnectionRefused", done.stderr), (
        done.stderr
    )
    return done.returncode == 0


def _until(condition: Callable[[], bool], failure: str) -> None:
    """Until ``condition()`` holds (each try of a probe takes up to 3 s), 60 s at most."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, failure


def test_its_network_policy_admits_the_api_server_and_no_pod(
    node: Node, webhook: list[Obj], tmp_path: Path
) -> None:
    """The webhook's NetworkPolicy as shipped, enforced (kube-router's policy controller,
    ``harness.netpolicy``: the bridge plugin enforces none). A pod that reaches a replica
    before cannot once it is enforced: the policy admits no pod network peer. The replicas
    are then replaced, the other node cordoned, so that every connection to the one left is
    new and judged: the kubelet's probes make it Ready and the API server's call through the
    Service reaches it (its log has the forged hold's denial), while the pod still cannot.
    What admits the node's own traffic here is kube-router's rule for a pod's own node, not
    the policy's OVN-Kubernetes label, which nothing carries here."""
    (first,) = (p for p in _replicas(node) if p["spec"]["nodeName"] == node.name)
    (box,) = first["spec"]["containers"]
    (port,) = box["ports"]
    sleeper = ["python3", "-c", "import time; time.sleep(3600)"]
    run_pod(
        node,
        "netpol-probe",
        {"image": box["image"], "imagePullPolicy": "Never", "command": sleeper},
    )
    enforcer = None

    def refused(pod: dict[str, Any]) -> bool:
        return not _connects(node, "netpol-probe", pod["status"]["podIP"], port["containerPort"])

    try:
        assert not refused(first)
        binary = enforcer_binary(REPO)
        if not binary.exists():
            require_or_skip(f"{binary} is not built (make network-policy-enforcer)")
        enforcer = Enforcer.start(node, binary, tmp_path / "enforcer")
        _until(lambda: refused(first), "the pod still reaches the webhook")

        kubectl(node, "cordon", SECOND)
        replicas = f"app.kubernetes.io/name={WEBHOOK}"
        kubectl(node, "delete", "-n", AGENT_NS, "pod", "-l", replicas, "--wait=true")
        _until(
            lambda: any(p["status"].get("phase") == "Running" for p in _replicas(node)),
            "no replica replaced",
        )
        (new,) = (p for p in _replicas(node) if p["status"].get("phase") == "Running")
        assert new["spec"]["nodeName"] == node.name
        name = new["metadata"]["name"]
        wait_ready(node, name, AGENT_NS)
        wait_service_endpoints(f"{AGENT_NS}/{WEBHOOK}:https", 1)
        new = get(node, f"pod/{name}", AGENT_NS)
        _until(lambda: refused(new), "the pod reaches the new replica")
        request_drain(node, SECOND)
        forged = _forge_hold(node, _agent_token(node, node.name, tmp_path), SECOND)
        _refused_by_the_webhook(node, forged)
        log = kubectl(node, "logs", "-n", AGENT_NS, name)
        assert f"only the Node it runs on ({node.name})" in log
    finally:
        left = enforcer.stop() if enforcer is not None else []
        kubectl(node, "uncordon", SECOND)
        wait_rollout(node, f"deploy/{WEBHOOK}", AGENT_NS)
        delete_pod(node, "netpol-probe")
        assert not left, left


def test_with_one_replica_gone_the_budget_and_the_other_keep_admission(
    node: Node, webhook: list[Obj], tmp_path: Path
) -> None:
    """One replica's pod deleted and its node cordoned (its replacement stays Pending: the
    other node has a replica, the anti-affinity forbids a second there): the budget refuses
    the remaining replica's eviction (429), and that replica alone still admits the agent's
    hold and refuses the forged one; uncordoned, the replacement starts."""
    (gone,) = (p for p in _replicas(node) if p["spec"]["nodeName"] == SECOND)
    kubectl(node, "cordon", SECOND)
    kubectl(node, "delete", "-n", AGENT_NS, "pod", gone["metadata"]["name"], "--wait=true")
    (left,) = (p for p in _replicas(node) if p["status"].get("phase") == "Running")
    assert left["spec"]["nodeName"] == node.name
    wait_jsonpath(node, f"pdb/{WEBHOOK}", ".status.disruptionsAllowed", "0", AGENT_NS)
    wait_service_endpoints(f"{AGENT_NS}/{WEBHOOK}:https", 1)

    refused = evict(node, left["metadata"]["name"], AGENT_NS)
    assert refused.returncode != 0
    assert "disruption budget" in refused.stderr, refused.stderr
    assert get(node, f"pod/{left['metadata']['name']}", AGENT_NS)["status"]["phase"] == "Running"

    build_pod(node, "build-webhook-one", node.name)
    request = request_drain(node, node.name)
    wait_held(node, request, node.name)
    request_drain(node, SECOND)
    forged = _forge_hold(node, _agent_token(node, node.name, tmp_path), SECOND)
    _refused_by_the_webhook(node, forged)
    log = kubectl(node, "logs", "-n", AGENT_NS, left["metadata"]["name"])
    assert f"only the Node it runs on ({node.name})" in log
    kubectl(node, "delete", "-n", MCO_NS, "pod", "build-webhook-one", "--wait=true")
    wait_released(node, request, node.name)

    kubectl(node, "uncordon", SECOND)
    wait_rollout(node, f"deploy/{WEBHOOK}", AGENT_NS)
    wait_jsonpath(node, f"pdb/{WEBHOOK}", ".status.disruptionsAllowed", "1", AGENT_NS)
