"""Regression: a watch event queued when a bookmark fell due was never sent.

Found by the soak: after some hundreds of events the agent's pod watch stopped delivering
(the simulator's watcher queue held one event, the stream stayed open, and the agent let a
drain through with a build pod on the node). The watch loop computed a zero wait whenever a
bookmark was due but events were queued (bookmarks wait for an empty queue), and
``wait_for(queue.get(), 0)`` cancels the get before it runs: the loop spun, sending nothing.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from drain_guard_sim.apiserver.server import SimApiServer


async def test_events_are_sent_while_bookmarks_fall_due() -> None:
    async with SimApiServer(bookmark_interval=0.005) as api:
        api.create("namespaces", {"metadata": {"name": "ns"}})
        url = f"{api.url}/api/v1/namespaces/ns/configmaps?watch=true&allowWatchBookmarks=true"
        headers = {"Authorization": f"Bearer {api.token()}"}
        seen: list[str] = []
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
            for i in range(40):
                api.create("configmaps", {"metadata": {"name": f"cm-{i}", "namespace": "ns"}})
                await asyncio.sleep(0.004)  # events land as bookmarks fall due
            async with asyncio.timeout(10):
                while len(seen) < 40:
                    event = json.loads(await resp.content.readline())
                    if event["type"] == "ADDED":
                        seen.append(event["object"]["metadata"]["name"])
        assert seen == [f"cm-{i}" for i in range(40)]
