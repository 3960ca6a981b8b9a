"""The objects the conformance tests create, as valid for a real API server as for the
simulator (no kubelet on either: a test plays the kubelet through the status subresource)."""

from __future__ import annotations

from typing import Any

from tests.conformance.client import Client, JsonObj


def pods_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def pod(name: str, node: str, labels: dict[str, str] | None = None) -> JsonObj:
    """A pod bound to ``node``; grace period 0, so that its deletion (an eviction's too) is
    immediate on both servers: with no kubelet, a real server would otherwise keep it
    terminating for ever."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.example/busybox:1"}],
        },
    }


def node(name: str, labels: dict[str, str] | None = None) -> JsonObj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}


async def create_pod(
    admin: Client,
    ns: str,
    name: str,
    node_name: str,
    *,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    ready: bool = True,
) -> JsonObj:
    """Create a pod and give it a status as its kubelet would (the status subresource)."""
    await admin.ok("POST", pods_path(ns), pod(name, node_name, labels))
    return await set_pod_status(admin, ns, name, phase=phase, ready=ready)


async def set_pod_status(admin: Client, ns: str, name: str, *, phase: str, ready: bool) -> JsonObj:
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return await admin.ok(
        "PATCH",
        pods_path(ns, name) + "/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )


def budget(name: str, labels: dict[str, str], **spec: Any) -> JsonObj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": labels}, **spec},
    }


def eviction(name: str, **delete_options: Any) -> JsonObj:
    body: JsonObj = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body
