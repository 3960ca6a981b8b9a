"""Operator-declared blocking pods (``--blocking-pod-selector``) and the node label
``drain-guard.io/block-drains``, on the simulator: held while they last, released after."""

from __future__ import annotations

import json
from typing import Any

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    AGENT_USER,
    CONFIG_B,
    IMAGE_B,
    NODE,
    StartAgent,
    agent_writes,
    mcd_request,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"
HELD = "hold-" + DRAIN_B
BATCH = "batch"
TENANT = "tenant-a"


def add_pod(api: SimApiServer, namespace: str, name: str, phase: str, **labels: str) -> None:
    api.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase},
        },
        namespace,
    )


def set_phase(api: SimApiServer, namespace: str, name: str, phase: str) -> None:
    pod = api.get("pods", name, namespace)
    pod["status"]["phase"] = phase
    api.update("pods", pod, namespace, subresource="status")


def namespaces(api: SimApiServer) -> None:
    for name in (BATCH, TENANT):
        api.create("namespaces", {"metadata": {"name": name}})


BLOCKING = ("--blocking-pod-selector", "app=etl", "--blocking-pod-namespace", BATCH)


async def test_a_running_blocking_pod_holds_until_it_completes(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    namespaces(api)
    add_pod(api, BATCH, "etl-1", "Running", app="etl")
    agent = await start_agent(*BLOCKING)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)
    assert ann[protocol.HOLD_REASONS] == "blocking-pod"
    assert ann[protocol.HOLD_DETAIL] == f"blocking-pod: blocking pod {BATCH}/etl-1"
    _, body = await agent.http("/status")
    scope = json.loads(body)["scope"]
    assert (scope["blockingPodNamespaces"], scope["blockingWatchNamespaces"]) == ([BATCH], [BATCH])
    assert json.loads(body)["releasesWhen"] == [
        f"blocking-pod: when blocking pod {BATCH}/etl-1 stops running"
        " (completes, fails or is deleted)"
    ]
    set_phase(api, BATCH, "etl-1", "Succeeded")
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    released = await agent.wait_log(lambda r: r.get("outcome") == "safe")
    assert released["request"] == DRAIN_B


async def test_completed_pending_and_unopted_pods_never_hold(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    served: set[str] = set()

    def record(user: str, resource: str, obj: dict[str, Any]) -> None:
        if user == AGENT_USER and resource == "pods":
            served.add(obj["metadata"]["namespace"])

    api.serve_hooks.append(record)
    namespaces(api)
    add_pod(api, BATCH, "etl-done", "Succeeded", app="etl")
    add_pod(api, BATCH, "etl-failed", "Failed", app="etl")
    add_pod(api, BATCH, "etl-next", "Pending", app="etl")
    add_pod(api, TENANT, "etl-copy", "Running", app="etl")  # not opted in
    agent = await start_agent(*BLOCKING)
    rv = mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    passed = await agent.wait_log(lambda r: r.get("outcome") == "pass")
    assert passed["request"] == DRAIN_B
    assert agent_writes(api, since=rv, resource="nodes") == []
    # One watch in MCO's namespace, one in the opted-in one: the tenant's pod is never sent.
    assert served == {BATCH}


async def test_the_block_drains_label_holds_until_removed(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    api.patch("nodes", NODE, {"metadata": {"labels": {protocol.BLOCK_DRAINS_LABEL: "backup"}}})
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)
    assert ann[protocol.HOLD_REASONS] == "node-label"
    assert (
        ann[protocol.HOLD_DETAIL] == f"node-label: node label {protocol.BLOCK_DRAINS_LABEL}=backup"
    )
    api.patch("nodes", NODE, {"metadata": {"labels": {protocol.BLOCK_DRAINS_LABEL: None}}})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    released = await agent.wait_log(lambda r: r.get("outcome") == "safe")
    assert released["request"] == DRAIN_B
