"""Helpers for the tests on the node: kubectl as its admin, a pod run to Ready."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from drain_guard_sim.harness.node import Node

NAMESPACE = "default"


def kubectl(node: Node, *args: str, stdin: str | None = None) -> str:
    """kubectl as the cluster's admin; raises with its error output when it fails."""
    done = subprocess.run(
        ["kubectl", f"--kubeconfig={node.plane.admin_kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


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
