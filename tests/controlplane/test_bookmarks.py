"""The real kube-apiserver's bookmarks, read by the agent's list-watch (issue 20).

kube-apiserver bookmarks a watch about once a minute and two seconds before the watch's
``timeoutSeconds``. The agent asks 600 s, so on the real server its first bookmark would come
after a minute; here the agent's own list-watch (``ListWatch``, in-process, through the real
client) asks 5 s, the one thing changed, and the pre-timeout bookmark comes within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kubernetes_asyncio import client

from drain_guard.kube.counters import NullCounters
from drain_guard.kube.listwatch import ListWatch, WatchCache
from drain_guard.kube.operations import Watched
from tests.controlplane.helpers import WAIT
from tests.controlplane.nodes import create_worker


class _Answers(NullCounters):
    """No metrics; an event on each answer of the server (a list, a watch's start, an event,
    a bookmark), after which the list-watch's resourceVersion may have moved."""

    def __init__(self) -> None:
        self.answered = asyncio.Event()

    def api_contact(self) -> None:
        self.answered.set()


async def test_a_real_bookmark_moves_the_watch_past_writes_it_does_not_see(
    admin: client.ApiClient,
) -> None:
    """The watch selects one Node; another Node is written. Only a bookmark can carry the
    watch's resourceVersion past that write (no event of its Node, no second list), so that a
    renewal starts from there: an idle watch's version does not fall behind, out of etcd's
    compaction window. Resource versions are compared as numbers: the real server's are
    etcd revisions."""
    core = client.CoreV1Api(admin)
    node = await create_worker(admin)
    node_version = (await core.read_node(node)).metadata.resource_version
    lists = 0

    async def list_node(**kwargs: Any) -> Any:
        nonlocal lists
        lists += 0 if kwargs.get("watch") else 1
        return await core.list_node(**kwargs)

    cache = WatchCache()
    counters = _Answers()
    watch = ListWatch(
        resource=Watched.NODE,
        list_fn=list_node,
        field_selector=f"metadata.name={node}",
        replace=cache.replace_node,
        apply=cache.apply_node,
        counters=counters,
        name=f"node {node}",
        watch_timeout=5,
    )

    async def until_version_reaches(version: int) -> None:
        async with asyncio.timeout(WAIT):
            while watch.resource_version is None or int(watch.resource_version) < version:
                counters.answered.clear()
                await counters.answered.wait()

    task = asyncio.create_task(watch.run())
    try:
        await until_version_reaches(int(node_version))
        assert cache.node is not None
        assert cache.node.name == node
        other = await create_worker(admin)  # a write this watch does not see
        other_version = int((await core.read_node(other)).metadata.resource_version)
        await until_version_reaches(other_version)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert lists == 1
    # No event of its Node came (the cache holds it as created): a bookmark moved the version.
    assert cache.node.resource_version == node_version
