"""Which pods can hold a drain (the build-pod scope), and which pods the agent is sent at all."""

from __future__ import annotations

import json
from typing import Any

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    AGENT_USER,
    CONFIG_B,
    IMAGE_B,
    MCO_NS,
    NODE,
    StartAgent,
    add_build_pod,
    agent_writes,
    mcd_request,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"
TENANT = "tenant-a"
OTHER = "worker-1"


def add_pod(api: SimApiServer, namespace: str, name: str, node: str, **labels: str) -> None:
    api.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"},
        },
        namespace,
    )


def tenant_build_label(api: SimApiServer) -> None:
    """An ordinary user's pod, bound to the node by its own spec.nodeName, carrying only the
    label OpenShift Build pods have."""
    api.create("namespaces", {"metadata": {"name": TENANT}})
    add_pod(api, TENANT, "not-a-build", NODE, **{"openshift.io/build.name": "x"})


async def test_a_labelled_pod_outside_mco_holds_nothing_by_default(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    tenant_build_label(api)
    agent = await start_agent()
    rv = mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    passed = await agent.wait_log(lambda r: r.get("outcome") == "pass")
    assert passed["request"] == DRAIN_B
    assert agent_writes(api, since=rv, resource="nodes") == []
    status, body = await agent.http("/status")
    doc = json.loads(body)
    assert (status, doc["buildPods"]) == (200, [])
    assert doc["scope"] == {
        "buildPodNamespaces": [MCO_NS],
        "podWatchNamespace": MCO_NS,
        "blockingPodNamespaces": [],
        "blockingWatchNamespaces": [],
    }
    assert "not-a-build" not in json.dumps(doc)


async def test_a_labelled_pod_holds_when_its_namespace_is_opted_in(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    tenant_build_label(api)
    agent = await start_agent("--build-pod-namespace", TENANT)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert ann[protocol.HOLD_REASONS] == "build-pod"
    assert f"{TENANT}/not-a-build" in ann[protocol.HOLD_DETAIL]
    _, body = await agent.http("/status")
    assert json.loads(body)["scope"] == {
        "buildPodNamespaces": [MCO_NS, TENANT],
        "podWatchNamespace": "*",
        "blockingPodNamespaces": [],
        "blockingWatchNamespaces": [],
    }


async def test_the_agent_is_sent_no_pod_of_another_node(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Every pod the simulator serves the agent, in lists and watch events, is one of its node's
    in MCO's namespace; other nodes' machine-config-daemon pods, and tenants' pods, never."""
    served: list[dict[str, Any]] = []

    def record(user: str, resource: str, obj: dict[str, Any]) -> None:
        if user == AGENT_USER and resource == "pods":
            served.append(obj)

    api.serve_hooks.append(record)
    api.create("namespaces", {"metadata": {"name": TENANT}})
    for node in (NODE, OTHER):
        add_pod(api, MCO_NS, f"machine-config-daemon-{node}", node, **{"k8s-app": "mcd"})
        add_pod(api, TENANT, f"web-{node}", node, app="web")
    await start_agent()
    # While it runs: another node's daemon pod is replaced, tenants' pods change, and a
    # build pod comes and goes on the agent's node (the shield lists by its labels).
    api.delete("pods", f"machine-config-daemon-{OTHER}", MCO_NS)
    add_pod(api, MCO_NS, f"machine-config-daemon-{OTHER}-2", OTHER, **{"k8s-app": "mcd"})
    api.patch("pods", f"web-{OTHER}", {"metadata": {"labels": {"v": "2"}}}, TENANT)
    api.patch("pods", f"web-{NODE}", {"metadata": {"labels": {"v": "2"}}}, TENANT)
    add_build_pod(api)
    budget = await api.wait_for(
        lambda: api.list("poddisruptionbudgets", MCO_NS, label_selector="drain-guard.io/node"),
        timeout=15,
    )
    assert budget  # the shield saw the build pod: everything written before it was served
    assert {(p["metadata"]["namespace"], p["spec"]["nodeName"]) for p in served} == {(MCO_NS, NODE)}
    assert {p["metadata"]["name"] for p in served} == {f"machine-config-daemon-{NODE}", "build-pod"}
