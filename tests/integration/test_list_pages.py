"""Lists come in pages (``limit``/``continue``), as client-go's reflector reads them: the API
server never answers one list of a whole large set at once, and the cache still holds it all."""

from __future__ import annotations

import asyncio
import contextlib

from drain_guard.kube.client import Kube
from drain_guard.kube.listwatch import LIST_PAGE, WatchCache
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import AGENT_USER, MCO_NS, NODE, WAIT


async def test_a_list_larger_than_a_page_is_read_in_pages_into_one_view(
    api: SimApiServer,
) -> None:
    count = 2 * LIST_PAGE + 1
    for i in range(count):
        api.create(
            "pods",
            {
                "metadata": {"name": f"pod-{i:04d}", "namespace": MCO_NS},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
            },
            MCO_NS,
        )
    client = api.api_client(AGENT_USER)
    cache = WatchCache()
    watch = asyncio.create_task(Kube(client).watch_pods(NODE, cache, MCO_NS))
    try:
        async with asyncio.timeout(WAIT):
            while not cache.pods_synced:
                await cache.changed.wait()
                cache.changed.clear()
        assert len(cache.pods) == count
        assert api.requests[(AGENT_USER, "list", "pods")] == 3
        # The watch goes on from the list's snapshot: a pod added now is seen.
        api.create(
            "pods",
            {
                "metadata": {"name": "late", "namespace": MCO_NS},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
            },
            MCO_NS,
        )
        async with asyncio.timeout(WAIT):
            while (MCO_NS, "late") not in cache.pods:
                await cache.changed.wait()
                cache.changed.clear()
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await client.close()
