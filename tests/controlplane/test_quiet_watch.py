"""An idle agent on a quiet cluster whose etcd sends no progress notification (etcd's default
interval is 10 minutes; kubeadm sets 5 s, and the ``control_plane`` fixture does too).

kube-apiserver's watch cache sends a watch a bookmark only once the cache's resourceVersion
is past the watch's start (tests/conformance/test_bookmarks.py): an event of the resource
anywhere in the cluster, or an etcd progress notification, moves it. Here nothing moves it:
the agent's Node and pod watches get no event and no bookmark, however long they run.

The agent assumes a bookmark about once a bookmark period (``BOOKMARK_PERIOD``, kube-
apiserver's one minute). Its real value would make this test wait minutes, so the agent
runs here with a shorter one, set by this test's launcher in the agent's process before its
command line is read (``SHORT_PERIOD_AGENT``): the product has no flag or variable for it,
since a real API server's frequency is not the operator's to choose.
"""

from __future__ import annotations

import sys
from pathlib import Path

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_agent
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client
from tests.controlplane.nodes import add_build_pod, create_worker, shared_namespace, until
from tests.helpers import IMAGE_A, MCO_NS, WAIT, reap

#: Seconds: the bookmark period the agent assumes here (silent at 1.5, renewed at 2).
PERIOD = 2.0
#: ``python -m drain_guard`` with ``listwatch.BOOKMARK_PERIOD`` set to PERIOD first.
SHORT_PERIOD_AGENT = (
    sys.executable,
    "-c",
    "import runpy, drain_guard.kube.listwatch as lw;"
    f" lw.BOOKMARK_PERIOD = {PERIOD};"
    " runpy.run_module('drain_guard', run_name='__main__', alter_sys=True)",
)


async def test_an_idle_agent_on_a_quiet_cluster_goes_unready_with_a_silent_watch(
    control_plane_quiet: ControlPlane, tmp_path: Path
) -> None:
    async with api_client(control_plane_quiet.admin_kubeconfig) as admin:
        await shared_namespace(admin, MCO_NS)
        node = await create_worker(admin)
        await add_build_pod(admin, node)
        kubeconfig = control_plane_quiet.user_kubeconfig(
            "quiet-agent", ["system:masters"], tmp_path / "agent.kubeconfig"
        )
        agents: list[AgentProcess] = []
        try:
            host = HostFS(tmp_path / "host", IMAGE_A)
            agent = await spawn_agent(node, kubeconfig, host, program=SHORT_PERIOD_AGENT)
            agents.append(agent)
            await agent.wait_synced(WAIT)

            async def unready() -> str | None:
                status, body = await agent.http("/readyz")
                return body if status == 503 else None

            why = await until(unready)
            assert "watch silent since" in why, why
            assert f"no event or bookmark for {1.5 * PERIOD:g}s" in why, why
        finally:
            await reap(agents)
