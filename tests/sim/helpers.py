"""Helpers of the simulator's fidelity suite (its fixtures are in ``conftest.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.mco import REGISTRY_NAMESPACE

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
