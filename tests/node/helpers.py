"""Helpers for the tests on the node: kubectl as its admin, a pod run to Ready."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from drain_guard_sim.harness.controlplane import ControlPlaneError
from drain_guard_sim.harness.node import Node

NAMESPACE = "default"


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
    kubectl(node, "wait", "-n", NAMESPACE, "--for=condition=Ready", f"pod/{name}", "--timeout=120s")
    got: dict[str, Any] = json.loads(
        kubectl(node, "get", "-n", NAMESPACE, "pod", name, "-o", "json")
    )
    return got


def delete_pod(node: Node, name: str) -> None:
    """Delete a pod and return once it is gone (its containers stopped by the kubelet)."""
    kubectl(node, "delete", "-n", NAMESPACE, "pod", name, "--wait=true", "--timeout=120s")


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
    for procs in Path("/sys/fs/cgroup/pids/kubepods").glob(
        f"**/pod{pod['metadata']['uid']}/{container_id}/cgroup.procs"
    ):
        return [int(pid) for pid in procs.read_text().split()]
    raise AssertionError(f"no cgroup for container {container} of {pod['metadata']['name']}")
