"""Issue 35: a SIGKILLed agent's temporary files do not pile up.

The Kubernetes library writes a kubeconfig's inline certificate data (the control plane's
``certificate-authority-data``) to a temporary file and removes it at exit; an agent killed
with SIGKILL never exits, and each killed start left one in the temporary directory (in the
DaemonSet an emptyDir, which outlives the container). Now each agent writes them in a
directory of its own that it holds locked, and a start removes those of agents that are gone
(not those of agents that run).
Real agents on the real API server, really killed, with a temporary directory of the test's.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes_asyncio import client

from drain_guard.kube import scratch
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.nodes import create_worker
from tests.helpers import IMAGE_A, reap, spawn

KILLS = 3


def _files(directory: Path) -> list[Path]:
    """The library's files (not the scratch directories' markers)."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != scratch.MARKER)


async def test_the_files_of_killed_agents_are_removed_and_a_stopped_agent_leaves_none(
    control_plane: ControlPlane, admin: client.ApiClient, tmp_path: Path
) -> None:
    node = await create_worker(admin)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {"TMPDIR": str(temporary)}
    host = HostFS(tmp_path / "host", IMAGE_A)
    started: list[AgentProcess] = []
    try:
        for kill in range(KILLS):
            agent = await spawn(
                node, control_plane.admin_kubeconfig, host, started=started, env=env
            )
            # The live agent's certificate file, and nothing of the agents killed before it.
            assert len(_files(temporary)) == 1, (kill, _files(temporary))
            await agent.kill()
            assert _files(temporary), "a killed agent's file is left (the next start's to remove)"
        last = await spawn(node, control_plane.admin_kubeconfig, host, started=started, env=env)
        # Another agent starting beside it keeps the live one's file.
        other = await spawn(
            await create_worker(admin),
            control_plane.admin_kubeconfig,
            HostFS(tmp_path / "other", IMAGE_A),
            started=started,
            env=env,
        )
        assert len(_files(temporary)) == 2, _files(temporary)
        assert await last.stop() == 0
        assert await other.stop() == 0
        assert list(temporary.iterdir()) == []
    finally:
        await reap(started)
