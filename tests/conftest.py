"""Shared fixtures: the API simulator with one worker Node, and the agent as a subprocess.

The agent always runs as its own process (``python -m drain_guard run``), talking to the simulator
through the real kubernetes_asyncio client with its own identity, so what is tested is what
ships. Waits are event-driven: on the simulator's write log, or on the agent's log lines.
The helpers the tests import are in ``tests/helpers.py``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from drain_guard_sim.agentproc import AgentProcess
from drain_guard_sim.apiserver import SimApiServer
from drain_guard_sim.cluster import worker_node
from drain_guard_sim.hostfs import HostFS
from tests.helpers import AGENT_USER, CONFIG_A, IMAGE_A, MCO_NS, NODE, StartAgent, reap, spawn


@pytest.fixture
async def api() -> AsyncIterator[SimApiServer]:
    """The simulator with a layered, idle worker Node booted into IMAGE_A."""
    async with SimApiServer() as server:
        server.create("namespaces", {"metadata": {"name": MCO_NS}})
        server.create("namespaces", {"metadata": {"name": "drain-guard"}})
        server.create("nodes", worker_node(NODE, CONFIG_A, IMAGE_A))
        yield server


@pytest.fixture
def host(tmp_path: Path) -> HostFS:
    return HostFS(tmp_path / "host", IMAGE_A)


@pytest.fixture
async def start_agent(api: SimApiServer, host: HostFS, tmp_path: Path) -> AsyncIterator[StartAgent]:
    """Start agents for NODE (as the test asks), and make sure they are gone afterwards."""
    kubeconfig = api.kubeconfig(AGENT_USER, tmp_path / "agent-kubeconfig")
    started: list[AgentProcess] = []

    async def start(
        *extra: str, ready: bool = True, env: dict[str, str] | None = None
    ) -> AgentProcess:
        return await spawn(NODE, kubeconfig, host, *extra, started=started, ready=ready, env=env)

    yield start
    await reap(started)


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run CLI code in-process without the caller's drain-guard environment."""
    for key in list(os.environ):
        if key.startswith("DRAIN_GUARD_") or key in ("NODE_NAME", "KUBECONFIG"):
            monkeypatch.delenv(key)
