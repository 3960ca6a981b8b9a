"""Helpers for the tests on the node: kubectl as its admin, the waits (a pod Ready, a
workload's rollout, a field's value: each kubectl on a watch), an eviction as a drain posts
it, the Node kept as MCO's daemon keeps a worker, build pods and drain requests."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from drain_guard_sim.harness.node import Node
from drain_guard_sim.harness.nodeimages import PAUSE_IMAGE
from drain_guard_sim.harness.processes import ControlPlaneError
from tests.deploy.tools import REPO

NAMESPACE = "default"
ARCHIVE = REPO / "build" / "image" / "drain-guard.oci.tar"
OVERLAY = REPO / "daemonset" / "overlays" / "kubernetes"
#: The user's kustomization directory, as docs/install.md names it.
USER_DIR = "my-drain-guard"
AGENT_NS = "drain-guard"
MCO_NS = "openshift-machine-config-operator"
MCO = "machineconfiguration.openshift.io"
DESIRED_DRAIN = f"{MCO}/desiredDrain"
HELD_DRAIN = "drain-guard.io/held-drain"
BUILD_LABEL = "openshift.io/build.name"
_configs = itertools.count()


def kubectl(node: Node, *args: str, stdin: str | None = None) -> str:
    """kubectl as the cluster's admin; a failure fails the test with its error output."""
    try:
        return node.kubectl(*args, stdin=stdin)
    except ControlPlaneError as error:
        raise AssertionError(str(error)) from None


def run_pod(node: Node, name: str, container: dict[str, Any]) -> dict[str, Any]:
    """Create a pod of one container and return it once Ready (kubectl wait: a watch)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", **container}],
            "terminationGracePeriodSeconds": 1,
        },
    }
    kubectl(node, "apply", "-f", "-", stdin=json.dumps(pod))
    wait_ready(node, name, NAMESPACE)
    got: dict[str, Any] = json.loads(
        kubectl(node, "get", "-n", NAMESPACE, "pod", name, "-o", "json")
    )
    return got


def delete_pod(node: Node, name: str) -> None:
    """Delete a pod and return once it is gone (its containers stopped by the kubelet)."""
    kubectl(node, "delete", "-n", NAMESPACE, "pod", name, "--wait=true", "--timeout=120s")


def wait_ready(node: Node, pod: str, namespace: str) -> None:
    """Return once the pod is Ready (its readiness probes passed): kubectl wait, on a watch."""
    kubectl(node, "wait", "-n", namespace, "--for=condition=Ready", f"pod/{pod}", "--timeout=120s")


def wait_rollout(node: Node, workload: str, namespace: str) -> None:
    """Return once ``workload`` (``ds/NAME``, ``deploy/NAME``) has rolled out: every replica
    updated and available (kubectl rollout status, on a watch)."""
    kubectl(node, "rollout", "status", "-n", namespace, workload, "--timeout=180s")


def _service_endpoints(port: str) -> int:
    """kube-proxy's endpoints for a Service's port (``NAMESPACE/SERVICE:PORT``, as its iptables
    rules name it): what a call to the Service's address reaches."""
    rules = subprocess.run(
        ["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True
    ).stdout
    return sum(
        1
        for line in rules.splitlines()
        if line.startswith("-A KUBE-SEP-") and port in line and "-j DNAT" in line
    )


def wait_service_endpoints(port: str, count: int) -> None:
    """Until kube-proxy has ``count`` endpoints for the Service's port: a condition polled,
    since kube-proxy reports its rules nowhere else."""
    deadline = time.monotonic() + 60
    while _service_endpoints(port) != count:
        assert time.monotonic() < deadline, f"kube-proxy has {_service_endpoints(port)} endpoints"
        time.sleep(0.2)


def evict(node: Node, pod: str, namespace: str) -> subprocess.CompletedProcess[str]:
    """POST the pod's eviction as a drain does (kubectl drain, MCO's drain controller), as the
    admin; the test reads the answer (a refusal is a non-zero exit with the Status)."""
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    return subprocess.run(
        [
            "kubectl",
            f"--kubeconfig={node.plane.admin_kubeconfig}",
            "create",
            "--raw",
            f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction",
            "-f",
            "-",
        ],
        input=json.dumps(eviction),
        capture_output=True,
        text=True,
        check=False,
    )


def wait_jsonpath(node: Node, target: str, path: str, value: str, namespace: str = "") -> None:
    """Return once ``target``'s field at ``path`` (kubectl's JSONPath) equals ``value``:
    kubectl wait, on a watch."""
    where = ["-n", namespace] if namespace else []
    kubectl(node, "wait", *where, target, f"--for=jsonpath={{{path}}}={value}", "--timeout=120s")


def get(node: Node, target: str, namespace: str = "") -> dict[str, Any]:
    where = ["-n", namespace] if namespace else []
    found: dict[str, Any] = json.loads(kubectl(node, "get", *where, target, "-o", "json"))
    return found


def container_pids(pod: dict[str, Any], container: str) -> list[int]:
    """The host pids of a running container of ``pod``, from the kubelet's cgroups."""
    (status,) = (s for s in pod["status"]["containerStatuses"] if s["name"] == container)
    container_id = status["containerID"].split("://", 1)[1]
    # kubepods/…: the node's; kubepods-NAME/kubepods/…: an added node's (its cgroup root).
    for procs in Path("/sys/fs/cgroup/pids").glob(
        f"kubepods*/**/pod{pod['metadata']['uid']}/{container_id}/cgroup.procs"
    ):
        return [int(pid) for pid in procs.read_text().split()]
    raise AssertionError(f"no cgroup for container {container} of {pod['metadata']['name']}")


def escaped(key: str) -> str:
    """An annotation's JSONPath for kubectl."""
    return ".metadata.annotations." + key.replace(".", "\\.")


def _config() -> str:
    return f"rendered-worker-{next(_configs):032x}"


def as_mco_worker(node: Node, name: str) -> None:
    """The Node ``name`` as MCO's daemon keeps a worker that finished its last update."""
    config = _config()
    kubectl(node, "label", "--overwrite", "node", name, "node-role.kubernetes.io/worker=")
    kubectl(
        node,
        "annotate",
        "--overwrite",
        "node",
        name,
        f"{MCO}/currentConfig={config}",
        f"{MCO}/desiredConfig={config}",
        f"{MCO}/state=Done",
        f"{DESIRED_DRAIN}=uncordon-{config}",
        f"{MCO}/lastAppliedDrain=uncordon-{config}",
    )


def build_pod(node: Node, name: str, on: str) -> None:
    """A build pod (the pause image under MCO's build label) running on the Node ``on``."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": MCO_NS, "labels": {BUILD_LABEL: name}},
        "spec": {
            "nodeName": on,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "build", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        },
    }
    kubectl(node, "apply", "-f", "-", stdin=json.dumps(pod))
    wait_ready(node, name, MCO_NS)


def request_drain(node: Node, on: str) -> str:
    """Ask for a drain of the Node ``on`` as MCO's daemon does for a new config; the
    request's value."""
    config = _config()
    kubectl(
        node,
        "annotate",
        "--overwrite",
        "node",
        on,
        f"{MCO}/desiredConfig={config}",
        f"{DESIRED_DRAIN}=drain-{config}",
    )
    return f"drain-{config}"


def wait_held(node: Node, request: str, on: str) -> None:
    wait_jsonpath(node, f"node/{on}", escaped(HELD_DRAIN), request)
    wait_jsonpath(node, f"node/{on}", escaped(DESIRED_DRAIN), f"hold-{request}")


def wait_released(node: Node, request: str, on: str) -> None:
    wait_jsonpath(node, f"node/{on}", escaped(DESIRED_DRAIN), request)
