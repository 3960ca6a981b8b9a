"""The conformance suite's fixtures: ``server`` is each API server in turn (the simulator's,
then the real control plane's), ``admin`` a client of it, ``ns`` a namespace of the test's own.

The real control plane is one per test worker (tests/conftest.py's ``control_plane``);
each test works in its own namespace and names its Nodes after it, so tests never meet.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance.client import Client
from tests.conformance.servers import RealServer, Server, sim_server

SERVERS = ("sim", "real")


@pytest.fixture(params=SERVERS)
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    if request.param == "sim":
        async with sim_server(tmp_path / "sim") as sim:
            yield sim
        return
    yield RealServer(request.getfixturevalue("control_plane"))


@pytest.fixture
async def admin(server: Server) -> AsyncIterator[Client]:
    async with Client(server.admin_kubeconfig) as client:
        yield client


@pytest.fixture
async def ns(server: Server, admin: Client) -> AsyncIterator[str]:
    """A namespace of the test's own (its Nodes are named ``<ns>-...``), deleted afterwards."""
    name = f"conf-{secrets.token_hex(4)}"
    await admin.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    await server.namespace_ready(admin, name)
    yield name
    await admin.delete(f"/api/v1/namespaces/{name}")
