"""Watch semantics through kubernetes_asyncio's Watch and on the wire, as a real server has them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.apiserver.server import SimApiServer
from tests.sim.helpers import NS, consume, node, pod


async def read_events(resp: aiohttp.ClientResponse, n: int | None = None) -> list[dict[str, Any]]:
    """Newline-delimited JSON events until ``n`` of them or the end of the stream."""
    events: list[dict[str, Any]] = []
    while n is None or len(events) < n:
        line = await resp.content.readline()
        if not line:
            break
        events.append(json.loads(line))
    return events


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["type"], e["object"]["metadata"].get("name")) for e in events]


async def test_watch_without_resource_version_starts_with_synthetic_added_events(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.create("nodes", node("a"))
    sim.create("nodes", node("b"))
    async with http.get("/api/v1/nodes", params={"watch": "true"}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("application/json")
        assert resp.headers.get("Transfer-Encoding") == "chunked"
        first = await read_events(resp, 2)
        sim.patch("nodes", "a", {"metadata": {"labels": {"x": "1"}}})
        sim.delete("nodes", "b")
        rest = await read_events(resp, 2)
    assert summary(first) == [("ADDED", "a"), ("ADDED", "b")]
    assert summary(rest) == [("MODIFIED", "a"), ("DELETED", "b")]
    assert int(rest[1]["object"]["metadata"]["resourceVersion"]) == sim.resource_version


async def test_watch_from_resource_version_replays_only_later_events(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    sim.create("pods", pod("p1"), NS)
    rv = sim.resource_version
    sim.create("pods", pod("p2"), NS)
    sim.patch("pods", "p1", {"metadata": {"labels": {"a": "b"}}}, NS)
    sim.create("nodes", node("n"))  # another resource: not in this watch
    v1 = client.CoreV1Api(kube)
    seen = []
    async with watch.Watch() as w:
        async for event in w.stream(
            v1.list_namespaced_pod, NS, resource_version=str(rv), timeout_seconds=5
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 2:
                sim.delete("pods", "p2", NS)
            if len(seen) == 3:
                w.stop()
    assert seen == [("ADDED", "p2"), ("MODIFIED", "p1"), ("DELETED", "p2")]


async def test_watch_true_spellings(sim: SimApiServer, http: aiohttp.ClientSession) -> None:
    sim.create("nodes", node("a"))
    for value in ("true", "1", "True"):
        async with http.get(
            "/api/v1/nodes", params={"watch": value, "timeoutSeconds": "1"}
        ) as resp:
            assert summary(await read_events(resp)) == [("ADDED", "a")]
    async with http.get("/api/v1/nodes", params={"watch": "false"}) as resp:
        assert (await resp.json())["kind"] == "NodeList"


async def test_timeout_seconds_ends_the_stream(sim: SimApiServer, kube: client.ApiClient) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = []
    async with watch.Watch() as w:
        async for event in w.stream(client.CoreV1Api(kube).list_node, timeout_seconds=1):
            events.append(event)  # pragma: no cover - nothing happens
    assert events == []
    assert 0.9 <= loop.time() - started < 3
    assert sim.open_watches == 0


async def test_bookmarks_carry_only_the_resource_version(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.create("nodes", node("a"))
    rv = sim.resource_version
    async with http.get(
        "/api/v1/nodes",
        params={
            "watch": "1",
            "resourceVersion": str(rv),
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "10",
        },
    ) as resp:
        (bookmark,) = await read_events(resp, 1)
        sim.create("nodes", node("b"))
        added, bookmark2 = await read_events(resp, 2)
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(rv), "creationTimestamp": None},
        },
    }
    assert added["type"] == "ADDED"
    assert bookmark2["type"] == "BOOKMARK"
    assert bookmark2["object"]["metadata"]["resourceVersion"] == str(sim.resource_version)


async def test_kubernetes_asyncio_watch_follows_bookmarks(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    types = []
    async with watch.Watch() as w:
        async for event in w.stream(
            client.CoreV1Api(kube).list_node, allow_watch_bookmarks=True, timeout_seconds=5
        ):
            types.append(event["type"])
            if event["type"] == "BOOKMARK":
                w.stop()
    assert types == ["BOOKMARK"]
    assert w.resource_version == str(sim.resource_version)


async def test_compacted_resource_version_gets_one_410_error_event(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.create("nodes", node("a"))
    old = sim.resource_version
    sim.create("nodes", node("b"))
    sim.compact()
    async with http.get(
        "/api/v1/nodes", params={"watch": "true", "resourceVersion": str(old)}
    ) as resp:
        assert resp.status == 200  # the error travels inside the stream
        events = await read_events(resp)
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({sim.resource_version})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]
    # the current resourceVersion is still inside the window
    async with http.get(
        "/api/v1/nodes",
        params={"watch": "true", "resourceVersion": str(sim.resource_version),
                "timeoutSeconds": "1"},
    ) as resp:  # fmt: skip
        assert await read_events(resp) == []


async def test_kubernetes_asyncio_watch_raises_410_after_compact(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    sim.create("nodes", node("a"))
    old = str(sim.resource_version)
    sim.create("nodes", node("b"))
    sim.compact()
    v1 = client.CoreV1Api(kube)
    # With timeout_seconds the Watch does not retry a 410.
    with pytest.raises(ApiException) as info:
        await consume(v1.list_node, resource_version=old, timeout_seconds=5)
    assert info.value.status == 410
    # Without it, it retries once with the same resourceVersion, then raises.
    before = sim.request_count(verb="watch", resource="nodes")
    with pytest.raises(ApiException) as info:
        await consume(v1.list_node, resource_version=old)
    assert info.value.status == 410
    assert sim.request_count(verb="watch", resource="nodes") - before == 2


async def test_field_selector_watch_sends_deleted_when_an_object_leaves(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.create("pods", pod("p", node="worker-0"), NS)
    sim.create("pods", pod("q", node="worker-1"), NS)
    async with http.get(
        "/api/v1/pods", params={"watch": "true", "fieldSelector": "spec.nodeName=worker-0"}
    ) as resp:
        initial = await read_events(resp, 1)
        before_move = sim.get("pods", "p", NS)
        sim.patch("pods", "p", {"spec": {"nodeName": "worker-1"}}, NS)  # leaves
        left = await read_events(resp, 1)
        sim.patch("pods", "q", {"spec": {"nodeName": "worker-0"}}, NS)  # enters
        entered = await read_events(resp, 1)
    assert summary(initial) == [("ADDED", "p")]
    # the cacher's rule: DELETED with the previous object, at the event's resourceVersion
    assert left[0]["type"] == "DELETED"
    assert left[0]["object"]["spec"]["nodeName"] == "worker-0"
    assert (
        left[0]["object"]["metadata"]["resourceVersion"]
        != before_move["metadata"]["resourceVersion"]
    )
    assert summary(entered) == [("ADDED", "q")]


async def test_label_selector_watch(sim: SimApiServer, kube: client.ApiClient) -> None:
    sim.create("pods", pod("a", labels={"app": "web"}), NS)
    sim.create("pods", pod("b", labels={"app": "db"}), NS)
    seen = []
    async with watch.Watch() as w:
        async for event in w.stream(
            client.CoreV1Api(kube).list_pod_for_all_namespaces,
            label_selector="app in (web,api),!canary",
            timeout_seconds=5,
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 1:  # the initial state, then live changes
                sim.create("pods", pod("c", labels={"app": "web", "canary": "1"}), NS)
                sim.patch("pods", "a", {"metadata": {"labels": {"canary": "y"}}}, NS)
                sim.create("pods", pod("done", labels={"app": "api"}), NS)
            if event["object"].metadata.name == "done":
                w.stop()
    assert seen == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "done")]


async def test_cut_watches_ends_streams_and_the_watch_reconnects(
    sim: SimApiServer, kube: client.ApiClient
) -> None:
    sim.create("nodes", node("a"))
    v1 = client.CoreV1Api(kube)
    seen = []
    async with watch.Watch() as w:
        async for event in w.stream(v1.list_node):  # no timeout: reconnects on a clean end
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 1:
                assert sim.cut_watches() == 1
                sim.create("nodes", node("b"))
            if len(seen) == 2:
                w.stop()
    # the reconnect resumes from the last resourceVersion seen: b's ADDED, no duplicate a
    assert seen == [("ADDED", "a"), ("ADDED", "b")]
    assert sim.request_count(verb="watch", resource="nodes") == 2


async def test_aborted_watch_breaks_the_connection(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.create("nodes", node("a"))
    async with http.get("/api/v1/nodes", params={"watch": "true"}) as resp:
        await read_events(resp, 1)
        sim.cut_watches(abort=True)
        with pytest.raises(aiohttp.ClientPayloadError):
            await read_events(resp)


async def test_stop_closes_open_watches() -> None:
    server = SimApiServer()
    await server.start()
    server.create("nodes", node("a"))
    headers = {"Authorization": f"Bearer {server.token()}"}
    async with (
        aiohttp.ClientSession(base_url=server.url, headers=headers) as session,
        session.get("/api/v1/nodes", params={"watch": "true"}) as resp,
    ):
        await read_events(resp, 1)
        assert server.open_watches == 1
        await asyncio.wait_for(server.stop(), 5)
        assert await read_events(resp) == []
    assert server.open_watches == 0


async def test_send_initial_events_ends_with_an_annotated_bookmark(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    sim.create("nodes", node("a"))
    async with http.get(
        "/api/v1/nodes",
        params={
            "watch": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
        },
    ) as resp:
        added, bookmark = await read_events(resp, 2)
    assert added["type"] == "ADDED"
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_a_node_scoped_pod_watch_is_sent_only_its_nodes_pods(
    sim: SimApiServer, http: aiohttp.ClientSession
) -> None:
    """The watch cache's trigger (spec.nodeName): a namespaced watch pinned to a node gets the
    events of that node's pods in its namespace only, and the simulator counts what it sent."""
    sim.create("pods", pod("mine", node="worker-0"), NS)
    sim.create("pods", pod("theirs", node="worker-1"), NS)
    sim.create("pods", pod("elsewhere", node="worker-0", namespace="other"), "other")
    params = {"watch": "true", "fieldSelector": "spec.nodeName=worker-0"}
    async with http.get(f"/api/v1/namespaces/{NS}/pods", params=params) as resp:
        initial = await read_events(resp, 1)
        sim.patch("pods", "theirs", {"metadata": {"labels": {"v": "2"}}}, NS)
        sim.delete("pods", "theirs", NS)
        sim.patch("pods", "elsewhere", {"metadata": {"labels": {"v": "2"}}}, "other")
        sim.create("pods", pod("new", node="worker-1"), NS)
        sim.patch("pods", "mine", {"metadata": {"labels": {"v": "2"}}}, NS)
        sim.delete("pods", "mine", NS)
        rest = await read_events(resp, 2)
    assert summary(initial) == [("ADDED", "mine")]
    assert summary(rest) == [("MODIFIED", "mine"), ("DELETED", "mine")]
    assert sum(n for (_user, res), n in sim.served.items() if res == "pods") == 3
    assert sum(n for (_user, res), n in sim.served_bytes.items() if res == "pods") > 0
