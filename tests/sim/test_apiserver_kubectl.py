"""kubectl reads from the simulator through the kubeconfig it writes (``require_tool``: skipped
without kubectl on a developer's machine, failed in CI).

client-go sends no credentials to an ``http://`` server, so kubectl reads as
``system:anonymous``, which the simulator (like a server with anonymous auth and a read-only
role) allows for get, list and watch.
"""

from __future__ import annotations

import asyncio

import pytest
import yaml

from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import require_tool
from tests.sim.helpers import pod


async def kubectl(sim: SimApiServer, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        require_tool("kubectl"),
        "--kubeconfig",
        str(sim.kubeconfig("viewer")),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


@pytest.fixture
def cluster(sim: SimApiServer) -> SimApiServer:
    sim.create(
        "nodes",
        {
            "metadata": {"name": "worker-0", "labels": {"node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": True},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.28.7+sim"},
            },
        },
    )
    sim.create("pods", pod("build-pod", namespace="openshift-machine-config-operator"))
    sim.create("pods", pod("web", namespace="default"))
    return sim


async def test_kubectl_get_nodes(cluster: SimApiServer) -> None:
    out = await kubectl(cluster, "get", "nodes")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert row.split()[:3] == ["worker-0", "Ready,SchedulingDisabled", "worker"]
    assert row.split()[-1] == "v1.28.7+sim"


async def test_kubectl_get_pods_all_namespaces(cluster: SimApiServer) -> None:
    out = await kubectl(cluster, "get", "pods", "-A")
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [(cells[0], cells[1], cells[3]) for cells in lines[1:]] == [
        ("default", "web", "Running"),
        ("openshift-machine-config-operator", "build-pod", "Running"),
    ]


async def test_kubectl_get_node_yaml(cluster: SimApiServer) -> None:
    obj = yaml.safe_load(await kubectl(cluster, "get", "node", "worker-0", "-o", "yaml"))
    assert obj == cluster.get("nodes", "worker-0")


async def test_kubectl_custom_resources_and_field_selectors(cluster: SimApiServer) -> None:
    cluster.create("machineconfigs", {"metadata": {"name": "99-worker"}, "spec": {}})
    out = await kubectl(cluster, "get", "machineconfigs")
    assert out.split()[:3] == ["NAME", "AGE", "99-worker"]
    out = await kubectl(
        cluster, "get", "pods", "-A", "--field-selector", "metadata.namespace=default", "-o",
        "name",
    )  # fmt: skip
    assert out.split() == ["pod/web"]
    assert cluster.request_count(user="system:anonymous", verb="list") == 2
