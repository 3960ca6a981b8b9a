"""Fixtures for the API simulator's fidelity suite: an empty simulator and real clients.

The fixtures are named ``sim`` and ``kube`` (not ``api``) so they never shadow the
project-wide ``api`` fixture of ``tests/conftest.py`` for other tests in this folder.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.apiserver import ADMIN, SimApiServer

NS = "default"


@pytest.fixture
async def sim() -> AsyncIterator[SimApiServer]:
    """An empty simulator with short bookmark intervals."""
    async with SimApiServer(bookmark_interval=0.3, seed=1) as server:
        yield server


@pytest.fixture
async def kube(sim: SimApiServer) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio ApiClient for ``system:admin``, loaded from a written kubeconfig."""
    from kubernetes_asyncio import config

    path = sim.kubeconfig(ADMIN)
    api_client = await config.new_client_from_config(config_file=str(path))
    async with api_client:
        yield api_client


@pytest.fixture
async def http(sim: SimApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    """A raw aiohttp session with the admin's bearer token, to see bytes on the wire."""
    headers = {"Authorization": f"Bearer {sim.token(ADMIN)}"}
    async with aiohttp.ClientSession(base_url=sim.url, headers=headers) as session:
        yield session


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
