"""Fault injection and request accounting, seen through kubernetes_asyncio."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.apiserver.server import SimApiServer
from tests.sim.helpers import consume, node, status_body


async def test_error_fault_500_and_removal(sim: SimApiServer, kube: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube)
    fault = sim.faults.error(500, verb="list", resource="nodes")
    with pytest.raises(ApiException) as info:
        await v1.list_node()
    assert info.value.status == 500
    body = status_body(info.value)
    assert body["reason"] == "InternalError"
    assert body["kind"] == "Status"
    await v1.create_node(node("n"))  # other verbs unaffected
    sim.faults.remove(fault)
    assert len((await v1.list_node()).items) == 1
    assert fault.fired == 1


async def test_429_fault_carries_retry_after(sim: SimApiServer, kube: client.ApiClient) -> None:
    sim.faults.error(429, retry_after=3, resource="nodes", times=1)
    v1 = client.CoreV1Api(kube)
    with pytest.raises(ApiException) as info:
        await v1.list_node()
    assert info.value.status == 429
    assert info.value.headers is not None
    assert info.value.headers["Retry-After"] == "3"
    assert status_body(info.value)["details"] == {"retryAfterSeconds": 3}
    await v1.list_node()  # times=1: gone after firing once
    assert sim.faults.rules == ()


async def test_faults_limited_to_a_user(sim: SimApiServer) -> None:
    sim.faults.error(503, user="victim")
    async with sim.api_client("victim") as victim, sim.api_client("bystander") as bystander:
        with pytest.raises(ApiException) as info:
            await client.CoreV1Api(victim).list_node()
        assert info.value.status == 503
        await client.CoreV1Api(bystander).list_node()


async def test_latency_fault(sim: SimApiServer, kube: client.ApiClient) -> None:
    sim.faults.latency(0.3, verb="get", resource="nodes")
    sim.create("nodes", node("n"))
    v1 = client.CoreV1Api(kube)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await v1.read_node("n")
    assert loop.time() - started >= 0.3
    started = loop.time()
    await v1.list_node()
    assert loop.time() - started < 0.3


async def test_probability_is_seeded_and_replays() -> None:
    outcomes = []
    for _ in range(2):
        async with SimApiServer(seed=42) as sim:
            sim.faults.error(500, probability=0.5, resource="nodes")
            run = []
            async with sim.api_client() as api_client:
                for _ in range(20):
                    try:
                        await client.CoreV1Api(api_client).list_node()
                        run.append(True)
                    except ApiException:
                        run.append(False)
            outcomes.append(run)
    assert outcomes[0] == outcomes[1]
    assert 0 < outcomes[0].count(False) < 20


async def test_forced_410_on_the_next_watch(sim: SimApiServer, kube: client.ApiClient) -> None:
    sim.create("nodes", node("n"))
    rv = str(sim.resource_version)
    sim.faults.expire_watches(times=1, resource="nodes")
    v1 = client.CoreV1Api(kube)
    with pytest.raises(ApiException) as info:
        await consume(v1.list_node, resource_version=rv, timeout_seconds=2)
    assert info.value.status == 410
    events = []
    async with watch.Watch() as w:  # the next one is served normally
        async for event in w.stream(v1.list_node, resource_version=rv, timeout_seconds=1):
            events.append(event)  # pragma: no cover
    assert events == []


async def test_cut_and_abort_watches(sim: SimApiServer, http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1/nodes", params={"watch": "true"}) as resp:
        assert sim.open_watches == 1  # registered before the response headers were sent
        assert sim.cut_watches() == 1
        assert await resp.content.read() == b""


async def test_request_counters_per_user_verb_resource(sim: SimApiServer) -> None:
    sim.create("nodes", node("n"))
    async with sim.api_client("agent") as api_client:
        v1 = client.CoreV1Api(api_client)
        await v1.read_node("n")
        await v1.read_node("n")
        await v1.list_node()
        await v1.patch_node_status("n", {"status": {"phase": "x"}})
        async with watch.Watch() as w:
            async for _ in w.stream(v1.list_node, timeout_seconds=1):
                pass
    assert sim.requests[("agent", "get", "nodes")] == 2
    assert sim.requests[("agent", "list", "nodes")] == 1
    assert sim.requests[("agent", "watch", "nodes")] == 1
    assert sim.requests[("agent", "patch", "nodes/status")] == 1
    assert sim.request_count(user="agent") == 5
    assert sim.request_count(user="agent", verb="get") == 2
