"""Shared fixtures: the API simulator with one worker Node, and the agent as a subprocess.

The agent always runs as its own process (``python -m drain_guard run``), talking to the simulator
through the real kubernetes_asyncio client with its own identity, so what is tested is what
ships. Waits are event-driven: on the simulator's write log, or on the agent's log lines.
The helpers the tests import are in ``tests/helpers.py``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane, default_bin_dir, missing_binaries
from drain_guard_sim.harness.seedobjects import worker_node
from tests.helpers import (
    AGENT_USER,
    CONFIG_A,
    IMAGE_A,
    MCO_NS,
    NODE,
    StartAgent,
    reap,
    require_or_skip,
    spawn,
)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a venv without it still runs
def pytest_xdist_auto_num_workers() -> int:
    """``-n auto`` (``make test``): two workers per CPU. The suite waits on agents, simulators
    and subprocesses far more than it computes (a quarter of a core in one process), so twice
    the CPUs keeps them busy. Each worker starts its own control plane if it gets a test that
    needs one (about 9 s, 4 s of CPU and 400 MiB): the tests share nothing across workers."""
    return 2 * (os.cpu_count() or 1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test on the real control plane ``controlplane`` (``-m controlplane``)."""
    for item in items:
        if {
            "control_plane",
            "control_plane_1_31",
            "control_plane_quiet",
            "control_plane_mco",
            "control_plane_no_policy",
        } & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.controlplane)


def _control_plane(
    tmp_path_factory: pytest.TempPathFactory,
    emulated_version: str | None = None,
    progress_notify_interval: str = "5s",
    *,
    policies: bool = True,
) -> Iterator[ControlPlane]:
    bin_dir = default_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        require_or_skip(f"{', '.join(missing)} not built in {bin_dir} (make control-plane)")
    workdir = tmp_path_factory.mktemp(f"control-plane-{emulated_version or 'current'}")
    with ControlPlane.start(
        bin_dir,
        workdir,
        emulated_version=emulated_version,
        progress_notify_interval=progress_notify_interval,
        policies=policies,
    ) as plane:
        yield plane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The real control plane (etcd, kube-apiserver, kube-controller-manager) at the version
    tools/control-plane pins, one per test worker: each test works in its own namespace and
    Node names (tests/controlplane/helpers.py)."""
    yield from _control_plane(tmp_path_factory)


@pytest.fixture(scope="session")
def control_plane_1_31(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The same binaries emulating Kubernetes 1.31 (OpenShift 4.18), the lowest they can: the
    Node authorizer without AuthorizeNodeWithSelectors (alpha, off, in 1.31), for the rights
    that differ. Started only by the tests that ask for it."""
    yield from _control_plane(tmp_path_factory, "1.31")


@pytest.fixture(scope="session")
def control_plane_quiet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane whose etcd keeps its default progress-notify interval (10 minutes, not
    kubeadm's 5 s): an idle resource's watch cache stays where it is, and a watch of it gets
    no bookmark. Apart from ``control_plane``, whose tests' writes would move it on; only
    tests/controlplane/test_quiet_watch.py uses it, each test watching from its own list."""
    yield from _control_plane(tmp_path_factory, progress_notify_interval="10m")


@pytest.fixture(scope="session")
def control_plane_mco(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane whose MCO CRDs are structural, one MCO version's at a time
    (tests/controlplane/mco.py swaps them): apart from ``control_plane``, whose tests create
    the simulator's open CRDs of the same names. Started only by the tests that ask for it."""
    yield from _control_plane(tmp_path_factory)


@pytest.fixture(scope="session")
def control_plane_no_policy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane that serves and enforces no ValidatingAdmissionPolicy, as Kubernetes
    1.28/1.29 (OpenShift 4.15/4.16): what confines an account there is an admission webhook
    or nothing. Apart from ``control_plane``, whose tests leave policies in force; started
    only by the tests that ask for it."""
    yield from _control_plane(tmp_path_factory, policies=False)


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
async def agents() -> AsyncIterator[list[AgentProcess]]:
    """Agents a test starts itself (``spawn(..., started=agents)``), stopped afterwards."""
    started: list[AgentProcess] = []
    yield started
    await reap(started)


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run CLI code in-process without the caller's drain-guard environment."""
    for key in list(os.environ):
        if key.startswith("DRAIN_GUARD_") or key in ("NODE_NAME", "KUBECONFIG"):
            monkeypatch.delenv(key)
