"""Helpers of the simulator's fidelity suite (its fixtures are in ``conftest.py``): what more
than one of its test modules uses lives here, never in a test module."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.mco import (
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    MCD_USER,
    REGISTRY_NAMESPACE,
    annotations_of,
)
from drain_guard_sim.apiserver.server import WriteRecord
from drain_guard_sim.harness.cluster import SimCluster

NS = "default"


async def consume(func: Callable[..., Any], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Every event of ``watch.Watch().stream(func, ...)`` until the stream ends."""
    async with watch.Watch() as w:
        return [event async for event in w.stream(func, *args, **kwargs)]


def status_body(err: ApiException) -> dict[str, Any]:
    """The ``Status`` object an ApiException carries."""
    body = json.loads(err.body or b"{}")
    assert isinstance(body, dict)
    return body


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    node: str = "worker-0",
    phase: str = "Running",
    ready: bool = True,
    namespace: str = NS,
) -> Any:
    """A pod manifest with a status, for the in-process API (which keeps status on create)."""
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pdb(
    name: str,
    selector: dict[str, Any] | None,
    *,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    namespace: str = NS,
) -> Any:
    spec: dict[str, Any] = {}
    if selector is not None:
        spec["selector"] = selector
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def node(name: str, **annotations: str) -> Any:
    """A node manifest (typed Any: kubernetes_asyncio's stubs want models, the API takes dicts)."""
    return {"metadata": {"name": name, "annotations": dict(annotations)}, "spec": {}}


#: A budget that makes the image registry's pod unevictable: the drain controller retries.
REGISTRY_BUDGET = pdb(
    "image-registry",
    {"matchLabels": {"docker-registry": "default"}},
    min_available=1,
    namespace=REGISTRY_NAMESPACE,
)


#: A rendered MachineConfig name, as the MCO's actors see one.
CFG = "rendered-worker-0123456789abcdef0123456789abcdef"


def ann(cluster: SimCluster, node: str) -> dict[str, str]:
    return annotations_of(cluster.api.get("nodes", node))


def set_ann(cluster: SimCluster, node: str, **values: str) -> None:
    keys = {
        "desired_drain": DESIRED_DRAIN,
        "last_applied": LAST_APPLIED_DRAIN,
        "desired_config": DESIRED_CONFIG,
    }
    patch = {"metadata": {"annotations": {keys[k]: v for k, v in values.items()}}}
    cluster.api.patch("nodes", node, patch)


def wrote_drain(value: str, node: str = "worker-0") -> Any:
    def match(rec: WriteRecord) -> bool:
        return (
            rec.user == MCD_USER
            and rec.resource == "nodes"
            and rec.name == node
            and annotations_of(rec.after or {}).get(DESIRED_DRAIN) == value
            and annotations_of(rec.before or {}).get(DESIRED_DRAIN) != value
        )

    return match


async def request_and_hold(cluster: SimCluster, node: str, config: str) -> WriteRecord:
    """Give ``node`` a new desired config and, as an agent would, hold the MCD's request."""
    rv = cluster.api.resource_version
    set_ann(cluster, node, desired_config=config)
    request = await cluster.api.wait_for_write(wrote_drain(f"drain-{config}", node), since=rv)
    # Same event-loop turn as the write notification: before the MCC's UpdateDelay fires.
    set_ann(cluster, node, desired_drain=f"hold-drain-{config}")
    return request
