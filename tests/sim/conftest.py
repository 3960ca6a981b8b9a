"""Fixtures for the API simulator's fidelity suite: an empty simulator and real clients.

The fixtures are named ``sim`` and ``kube`` (not ``api``) so they never shadow the
project-wide ``api`` fixture of ``tests/conftest.py`` for other tests in this folder.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from kubernetes_asyncio import client

from drain_guard_sim.apiserver.server import ADMIN, SimApiServer


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
