"""The central shield as ``daemonset/overlays/systemd`` ships it, on the real node: its
Deployment with the kube-rbac-proxy sidecar (``make kube-rbac-proxy-image``: v0.19.1, built
here from the Go module proxy, which serves no later version; the manifest pins v0.21.0 from
quay.io, and every flag it passes is v0.19.1's too), Ready through the real kubelet's probes,
which pass the proxy unauthenticated; its /metrics through the proxy only with the token of
the identity the shipped Roles let scrape (the platform Prometheus's account), refused
without a token and with another account's; and its budget on a build pod, confined by the
overlay's admission policy, refusing the pod's eviction until the pod goes.

The overlay is rendered in a user's kustomization with both images set to the local ones, as
docs/install.md has a user point them at a mirror; the service CA is played
(``harness.nodeshield``).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from drain_guard_sim.harness.node import Node
from drain_guard_sim.harness.nodeshield import SHIELD, Shield, shield_objects
from drain_guard_sim.harness.nodewebhook import as_manifest
from tests.deploy.tools import REPO
from tests.helpers import require_or_skip
from tests.node.helpers import (
    AGENT_NS,
    ARCHIVE,
    MCO_NS,
    build_pod,
    evict,
    get,
    kubectl,
    wait_jsonpath,
    wait_rollout,
)

PROXY_ARCHIVE = REPO / "build" / "image" / "kube-rbac-proxy.oci.tar"
#: The version ``make kube-rbac-proxy-image`` builds (its script's VERSION).
PROXY_BUILT = re.findall(
    r"^VERSION=(v[0-9.]+)$", (REPO / "scripts" / "build-kube-rbac-proxy.sh").read_text(), re.M
)[0]
SYSTEMD = REPO / "daemonset" / "overlays" / "systemd"
MASTER = "node-role.kubernetes.io/master"
#: The platform Prometheus's account: the one the shipped Role drain-guard-metrics lets scrape.
MONITORING_NS = "openshift-monitoring"
PROMETHEUS = "prometheus-k8s"
BUILD = "build-shield"


@pytest.fixture(scope="module")
def shield(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shield]:
    """The systemd overlay's central shield applied, its pod Ready on the node (labelled a
    control-plane node, as its node selector asks), and the platform Prometheus's account."""
    for archive, target in ((ARCHIVE, "image"), (PROXY_ARCHIVE, "kube-rbac-proxy-image")):
        if not archive.exists():
            require_or_skip(f"{archive} is not built (make {target})")
    shipped = shield_objects(SYSTEMD, ARCHIVE, PROXY_ARCHIVE, tmp_path_factory.mktemp("shield"))
    kinds = sorted(o["kind"] for o in shipped.objects)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Role",
        "Role",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "Secret",  # the service CA's
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ], kinds
    # "Into an existing namespace drain-guard" (the overlay), and MCO's, where build pods run.
    namespaces = [AGENT_NS, MCO_NS, MONITORING_NS]
    kubectl(node, "create", "namespace", AGENT_NS)
    kubectl(node, "create", "namespace", MCO_NS)
    kubectl(node, "create", "namespace", MONITORING_NS)
    kubectl(node, "create", "serviceaccount", "-n", MONITORING_NS, PROMETHEUS)
    kubectl(node, "label", "--overwrite", "node", node.name, f"{MASTER}=")
    node.import_image(ARCHIVE)
    node.import_image(PROXY_ARCHIVE)
    manifest = as_manifest(shipped.objects)
    try:
        kubectl(node, "apply", "-f", "-", stdin=manifest)
        wait_rollout(node, f"deploy/{SHIELD}", AGENT_NS)
        yield shipped
    finally:
        kubectl(node, "delete", "-f", "-", "--ignore-not-found", "--wait=true", stdin=manifest)
        kubectl(node, "delete", "namespace", *namespaces, "--ignore-not-found", "--wait=true")
        kubectl(node, "label", "node", node.name, f"{MASTER}-")


def _shield_pod(node: Node) -> dict[str, Any]:
    pods: list[dict[str, Any]] = get(node, "pods", AGENT_NS)["items"]
    (pod,) = (p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/name") == SHIELD)
    return pod


def _fetch(shield: Shield, address: str, path: str, token: str | None) -> tuple[int, str]:
    """GET ``path`` from the sidecar at ``address`` (the pod's IP, over the node's bridge),
    checking its certificate as the Service's name against the service CA; the status and
    body."""
    host = f"{SHIELD}.{AGENT_NS}.svc"
    headers = ["-H", f"Authorization: Bearer {token}"] if token else []
    done = subprocess.run(
        [
            "curl",
            "--silent",
            "--show-error",
            "--noproxy",
            "*",
            "--cacert",
            str(shield.cert.ca_file),
            "--resolve",
            f"{host}:8443:{address}",
            *headers,
            "--write-out",
            "\n%{http_code}",
            f"https://{host}:8443{path}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


def test_the_shield_is_ready_and_its_metrics_go_to_the_platform_prometheus_only(
    node: Node, shield: Shield
) -> None:
    """Both containers Ready through the kubelet's HTTPS probes (the proxy passes /healthz
    and /readyz unauthenticated), with the shipped arguments and no restart; /metrics refused
    without a token (401) and with an account the shipped Roles do not name (403), served
    with the platform Prometheus's token."""
    pod = _shield_pod(node)
    statuses = pod["status"]["containerStatuses"]
    assert sorted((s["name"], s["ready"]) for s in statuses) == [
        (SHIELD, True),
        ("kube-rbac-proxy", True),
    ], statuses
    (proxy,) = (s for s in statuses if s["name"] == "kube-rbac-proxy")
    assert proxy["image"].endswith(f"localhost/kube-rbac-proxy:{PROXY_BUILT}"), proxy["image"]
    # The shipped flags, every one taken by the built version (it exits on a flag it does not
    # know).
    assert proxy["restartCount"] == 0, proxy
    (deployment,) = (o for o in shield.objects if o["kind"] == "Deployment")
    shipped = {c["name"]: c["args"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    running = {c["name"]: c["args"] for c in pod["spec"]["containers"]}
    assert running == shipped, running
    address = pod["status"]["podIP"]

    assert _fetch(shield, address, "/healthz", None)[0] == 200
    assert _fetch(shield, address, "/metrics", None)[0] == 401
    other = kubectl(node, "create", "token", "-n", AGENT_NS, "default").strip()
    assert _fetch(shield, address, "/metrics", other)[0] == 403
    prometheus = kubectl(node, "create", "token", "-n", MONITORING_NS, PROMETHEUS).strip()
    status, body = _fetch(shield, address, "/metrics", prometheus)
    assert status == 200, body
    assert "\ndrain_guard_shield_budgets " in body, body


def test_a_build_pod_gets_the_shields_budget_which_refuses_its_eviction(
    node: Node, shield: Shield
) -> None:
    """A build pod on the node gets the central shield's budget (owned by the pod, admitted
    by the shield's confinement policy); the pod's eviction is refused (429); the budget goes
    with the pod."""
    build_pod(node, BUILD, node.name)
    budget = f"pdb/drain-guard-{BUILD}"
    kubectl(node, "wait", "-n", MCO_NS, "--for=create", budget, "--timeout=120s")
    wait_jsonpath(node, budget, ".status.currentHealthy", "1", MCO_NS)
    wait_jsonpath(node, budget, ".status.disruptionsAllowed", "0", MCO_NS)
    (owner,) = get(node, budget, MCO_NS)["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Pod", BUILD), owner

    refused = evict(node, BUILD, MCO_NS)
    assert refused.returncode != 0, refused.stdout
    assert "429" in refused.stderr or "TooManyRequests" in refused.stderr, refused.stderr
    assert "disruption budget" in refused.stderr, refused.stderr
    assert get(node, f"pod/{BUILD}", MCO_NS)["status"]["phase"] == "Running"

    kubectl(node, "delete", "-n", MCO_NS, "pod", BUILD, "--wait=true")
    kubectl(node, "wait", "-n", MCO_NS, "--for=delete", budget, "--timeout=120s")
