"""The in-process API: event-driven waits on the write log, lifecycle, no leaked tasks."""

from __future__ import annotations

import asyncio

import pytest

from drain_guard_sim.apiserver.server import SimApiServer, sim_apiserver
from tests.sim.helpers import NS, node, pod


async def test_wait_for_wakes_on_the_write_not_by_polling(sim: SimApiServer) -> None:
    sim.create("nodes", node("n"))

    async def later() -> None:
        await asyncio.sleep(0.05)
        sim.patch("nodes", "n", {"metadata": {"labels": {"ready": "yes"}}})

    task = asyncio.create_task(later())
    labels = await sim.wait_for(lambda: sim.get("nodes", "n")["metadata"].get("labels"), timeout=5)
    assert labels == {"ready": "yes"}
    await task


async def test_wait_for_times_out(sim: SimApiServer) -> None:
    with pytest.raises(TimeoutError):
        await sim.wait_for(lambda: sim.try_get("nodes", "never"), timeout=0.1)


async def test_wait_for_write_returns_the_matching_record(sim: SimApiServer) -> None:
    since = sim.resource_version

    async def later() -> None:
        await asyncio.sleep(0.01)
        sim.create("pods", pod("a"), NS, user="kubelet")
        sim.delete("pods", "a", NS, user="mcc")

    task = asyncio.create_task(later())
    record = await sim.wait_for_write(
        lambda w: w.resource == "pods" and w.verb == "delete", since=since, timeout=5
    )
    await task
    assert (record.user, record.name, record.namespace) == ("mcc", "a", NS)
    assert record.after is None
    assert record.before is not None
    assert record.obj["metadata"]["name"] == "a"
    assert record.gr == "pods"
    assert record.wall.tzinfo is not None


async def test_write_log_covers_every_mutation_in_order(sim: SimApiServer) -> None:
    sim.create("nodes", node("n"))
    sim.update("nodes", {**sim.get("nodes", "n"), "spec": {"unschedulable": True}})
    sim.patch("nodes", "n", {"metadata": {"labels": {"a": "b"}}}, patch_type="merge")
    sim.patch("nodes", "n", [{"op": "add", "path": "/metadata/labels/c", "value": "d"}],
              patch_type="json")  # fmt: skip
    sim.delete("nodes", "n")
    log = sim.writes("nodes")
    assert [w.verb for w in log] == ["create", "update", "patch", "patch", "delete"]
    assert [w.rv for w in log] == sorted(w.rv for w in log)
    assert len({w.rv for w in sim.write_log}) == len(sim.write_log)


async def test_context_manager_and_clean_shutdown() -> None:
    before = set(asyncio.all_tasks())
    async with sim_apiserver() as sim:
        sim.create("nodes", node("n"))
        async with sim.api_client() as api_client:
            from kubernetes_asyncio import client, watch

            async with watch.Watch() as w:
                async for _ in w.stream(client.CoreV1Api(api_client).list_node, timeout_seconds=1):
                    w.stop()
    await asyncio.sleep(0)
    leaked = {t for t in asyncio.all_tasks() - before if not t.done()}
    assert leaked == set()


async def test_start_stop_explicitly_and_kubeconfig_file(tmp_path: object) -> None:
    sim = SimApiServer()
    await sim.start()
    try:
        assert sim.port > 0
        path = sim.kubeconfig("someone")
        text = path.read_text()
        assert sim.url in text
        assert sim.token("someone") in text
    finally:
        await sim.stop()
    assert not path.exists()
