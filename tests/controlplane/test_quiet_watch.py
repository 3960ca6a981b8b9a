"""An idle agent on a quiet cluster whose etcd sends no progress notification (etcd's default
interval is 10 minutes; kubeadm sets 5 s, and the ``control_plane`` fixture does too).

kube-apiserver's watch cache sends a watch a bookmark only once the cache's resourceVersion
is past the watch's start (tests/conformance/test_bookmarks.py): an event of the resource
anywhere in the cluster, or an etcd progress notification, moves it. Here nothing moves it:
the agent's Node and pod watches get no event and no bookmark, however long they run. The
agent took that silence for a frozen stream and failed ``/readyz``; it now checks a quiet
watch by one LIST of what it watches, finds it current, and stays ready with the same watch
(its requests read in kube-apiserver's audit log, as tests/controlplane/test_watch_renewal.py
does).

The agent assumes a bookmark about once a bookmark period (``BOOKMARK_PERIOD``, kube-
apiserver's one minute). Its real value would make this test wait minutes, so the agent
runs here with a shorter one, set by this test's launcher in the agent's process before its
command line is read (``SHORT_PERIOD_AGENT``): the product has no flag or variable for it,
since a real API server's frequency is not the operator's to choose.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_agent
from drain_guard_sim.harness.audit import AUDITED_GROUP
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.conformance.client import Client, JsonObj
from tests.controlplane.helpers import api_client, unique
from tests.controlplane.nodes import add_build_pod, create_worker, shared_namespace, until
from tests.controlplane.test_watch_renewal import Request, agent_requests
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


#: Seconds a bookmark watch runs: its bookmark is due 2 s before the end, past etcd's 5 s.
WATCH_SECONDS = "12"


async def _watch_after_a_write_elsewhere(plane: ControlPlane) -> list[JsonObj]:
    """Every event of a watch of a node's pods (none: the node has none) from their list's
    resourceVersion, while a ConfigMap written after the list moves etcd's revision on but
    not the pods' watch cache: only an etcd progress notification brings it there."""
    async with Client(plane.admin_kubeconfig) as admin:
        selector = f"spec.nodeName={unique('podless')}"
        listed = await admin.ok("GET", "/api/v1/pods", params={"fieldSelector": selector})
        config_map = {"metadata": {"name": unique("elsewhere")}}
        await admin.ok("POST", "/api/v1/namespaces/default/configmaps", config_map)
        watch = admin.watch(
            "/api/v1/pods",
            fieldSelector=selector,
            resourceVersion=str(listed["metadata"]["resourceVersion"]),
            allowWatchBookmarks="true",
            timeoutSeconds=WATCH_SECONDS,
        )
        return [event async for event in watch]


async def test_without_progress_notifications_an_idle_watch_gets_no_bookmark(
    control_plane: ControlPlane, control_plane_quiet: ControlPlane
) -> None:
    """The premise: on the kubeadm-like plane (5 s) the bookmark before the deadline comes;
    on the quiet plane (etcd's default, 10 minutes) the same watch ends without one."""
    with_notifications = await _watch_after_a_write_elsewhere(control_plane)
    # One or two: the cache schedules it in one-second buckets (tests/conformance).
    assert with_notifications, "no bookmark with etcd's progress notifications"
    assert {e["type"] for e in with_notifications} == {"BOOKMARK"}
    assert await _watch_after_a_write_elsewhere(control_plane_quiet) == []


#: Checks of each quiet watch to see before the test ends: each one 1.5 periods of silence.
CHECKS = 3


async def test_an_idle_agent_on_a_quiet_cluster_stays_ready_on_the_same_watches(
    control_plane_quiet: ControlPlane, tmp_path: Path
) -> None:
    async with api_client(control_plane_quiet.admin_kubeconfig) as admin:
        await shared_namespace(admin, MCO_NS)
        node = await create_worker(admin)
        await add_build_pod(admin, node)
        kubeconfig = control_plane_quiet.user_kubeconfig(
            "quiet-agent", ["system:masters", AUDITED_GROUP], tmp_path / "agent.kubeconfig"
        )
        selectors = {"nodes": f"metadata.name={node}", "pods": f"spec.nodeName={node}"}

        def requests(resource: str, verb: str) -> list[Request]:
            return [
                r
                for r in agent_requests(control_plane_quiet.audit_log, "quiet-agent")
                if r.resource == resource
                and r.field_selector == selectors[resource]
                and r.verb == verb
            ]

        agents: list[AgentProcess] = []
        answers: list[tuple[int, str]] = []
        try:
            host = HostFS(tmp_path / "host", IMAGE_A)
            agent = await spawn_agent(node, kubeconfig, host, program=SHORT_PERIOD_AGENT)
            agents.append(agent)
            await agent.wait_synced(WAIT)

            async def checked() -> bool:
                # /readyz all along, a few times a quiet period, until it fails or enough
                # checks were made (the first LIST of each watch is its start).
                answers.append(await agent.http("/readyz"))
                await asyncio.sleep(PERIOD / 8)
                unready = any(status != 200 for status, _ in answers)
                return unready or all(len(requests(r, "list")) > CHECKS for r in selectors)

            await until(checked)
        finally:
            await reap(agents)
    assert [why for status, why in answers if status != 200] == []
    for resource in selectors:
        # One watch each, never renewed: the checks found it current every time.
        assert len(requests(resource, "watch")) == 1, requests(resource, "watch")
        assert {r.code for r in requests(resource, "list")} == {200}
