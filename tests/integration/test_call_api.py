"""kube.call_api, the one way the agent makes a (non-watch) API call: what its callers (the
controller's and the shield's ``Kube.call``, the list of every list-watch, the Event recorder)
see; and ``Kube.call``, which counts it."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s

from drain_guard.kube import Kube, KubeError, call_api
from drain_guard.metrics import MetricCounters, Metrics
from drain_guard_sim.apiserver import ADMIN, SimApiServer
from tests.helpers import NODE


@pytest.fixture
async def core(api: SimApiServer) -> AsyncIterator[k8s.CoreV1Api]:
    async with api.api_client(ADMIN) as api_client:
        yield k8s.CoreV1Api(api_client)


async def test_the_body_of_a_success(core: k8s.CoreV1Api) -> None:
    body = await call_api(core.read_node, NODE)
    assert body["metadata"]["name"] == NODE


async def test_an_error_carries_the_servers_message(core: k8s.CoreV1Api) -> None:
    with pytest.raises(KubeError) as info:
        await call_api(core.read_node, "nope")
    assert (info.value.status, info.value.reason) == (404, 'nodes "nope" not found')
    assert info.value.retry_after is None


async def test_a_429_carries_retry_after(api: SimApiServer, core: k8s.CoreV1Api) -> None:
    api.faults.error(429, retry_after=7, verb="get", resource="nodes", times=1)
    with pytest.raises(KubeError) as info:
        await call_api(core.read_node, NODE)
    assert (info.value.status, info.value.retry_after) == (429, 7.0)


async def test_a_transport_error_is_status_0() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: the connection is refused
        config = k8s.Configuration(host=f"http://127.0.0.1:{port}")
        async with k8s.ApiClient(configuration=config) as api_client:
            with pytest.raises(KubeError) as info:
                await call_api(k8s.CoreV1Api(api_client).read_node, NODE)
    assert info.value.status == 0
    assert "ClientConnectorError" in info.value.reason


async def test_kube_call_counts_an_answer_as_contact_and_anything_else_as_an_error(
    api: SimApiServer,
) -> None:
    counters = MetricCounters(Metrics())
    async with api.api_client(ADMIN) as api_client:
        kube = Kube(api_client, counters)
        core = k8s.CoreV1Api(api_client)
        with pytest.raises(KubeError):
            await kube.call("pod_get", core.read_namespaced_pod, "nope", "default")
        assert counters.last_contact is not None  # a 404 is an answer: absent
        counters.last_contact = None
        api.faults.error(500, verb="get", resource="pods", times=1)
        with pytest.raises(KubeError):
            await kube.call("pod_get", core.read_namespaced_pod, "nope", "default")
    assert counters.last_contact is None
    errors = counters.metrics.registry.get_sample_value(
        "drain_guard_api_errors_total", {"operation": "pod_get"}
    )
    assert errors == 1
