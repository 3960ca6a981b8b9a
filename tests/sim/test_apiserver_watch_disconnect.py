"""Regression: a watch client that goes away made the simulator print a traceback.

The agent's reboot or the demo's shutdown closes its watches; the simulator's next write to
such a stream raised aiohttp's ``ClientConnectionResetError``, which the request handler
passed on, and aiohttp logged it as an unhandled error, traceback included ("Error handling
request"), into the demo's output (issue 25). A client that hangs up is normal: the stream
ends quietly, as kube-apiserver's does.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from drain_guard_sim.apiserver.server import SimApiServer


async def test_a_watch_whose_client_hung_up_ends_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    async with SimApiServer() as api:
        api.create("namespaces", {"metadata": {"name": "ns"}})
        url = f"{api.url}/api/v1/namespaces/ns/configmaps?watch=true"
        headers = {"Authorization": f"Bearer {api.token()}"}
        async with aiohttp.ClientSession() as session:
            resp = await session.get(url, headers=headers)
            assert resp.status == 200
            resp.close()  # the client hangs up with the stream open
        # Events for the gone client: the first write or two may still reach the socket
        # buffer; one of them meets the closed connection.
        for i in range(50):
            api.create("configmaps", {"metadata": {"name": f"cm-{i}", "namespace": "ns"}})
            await asyncio.sleep(0.01)
        await api.wait_for(lambda: not api.store.watchers, timeout=30)  # the stream ended
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
