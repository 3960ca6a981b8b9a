"""The agent as its own process on the real control plane: the hold protocol through the real
API server's compare-and-swap and watches, not the simulator's model of them.

The agent runs as ``system:masters`` here: what these tests prove is the protocol (JSON Patch
``test``, resourceVersion conflicts, the pod watch by ``spec.nodeName``); its rights are
proven with its own account's token in ``test_rights.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import WAIT
from tests.controlplane.nodes import (
    DRAIN_B,
    add_build_pod,
    create_worker,
    mcd_request,
    set_phase,
    wait_annotation,
)
from tests.helpers import CONFIG_A, IMAGE_A, IMAGE_B, MCO_NS, metric, spawn

CONFIG_C = "rendered-worker-" + "c" * 32
#: New MCD requests at most, until another writer gets between the agent's read and write.
ROUNDS = 20
DRAIN_C = f"drain-{CONFIG_C}"


async def start(
    plane: ControlPlane, node: str, tmp_path: Path, started: list[AgentProcess]
) -> AgentProcess:
    """``drain-guard run`` for ``node`` with a kubeconfig naming the real API server, once it
    has listed both watches and made its first decision."""
    host = HostFS(tmp_path / f"host-{len(started)}", IMAGE_A)
    return await spawn(node, plane.admin_kubeconfig, host, started=started)


async def test_hold_supersede_and_release_through_the_real_compare_and_swap(
    control_plane: ControlPlane,
    admin: client.ApiClient,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    node = await create_worker(admin)
    pod = await add_build_pod(admin, node)
    agent = await start(control_plane, node, tmp_path, agents)

    await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    held = await wait_annotation(
        admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
    )
    assert held[protocol.HELD_DRAIN] == DRAIN_B
    assert held[protocol.HOLD_REASONS] == "build-pod"
    assert f"{MCO_NS}/{pod}" in held[protocol.HOLD_DETAIL]
    assert held[protocol.LAST_APPLIED_DRAIN] == f"uncordon-{CONFIG_A}"

    # The MCD writes a newer request over the hold (last writer wins): the agent holds that one.
    await mcd_request(admin, node, DRAIN_C)
    held = await wait_annotation(
        admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_C
    )
    assert held[protocol.HELD_DRAIN] == DRAIN_C
    await agent.wait_log(lambda r: r.get("outcome") == "hold" and r.get("request") == DRAIN_C)

    # The build ends: the request goes back byte for byte, and nothing of the hold stays.
    await set_phase(admin, pod, "Succeeded")
    released = await wait_annotation(admin, node, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_C)
    assert not [k for k in released if k in protocol.OWNED_KEYS]
    await agent.wait_log(lambda r: r.get("outcome") == "release:safe")
    assert await agent.stop() == 0


async def test_a_build_pod_on_another_node_is_not_in_the_agents_watch(
    control_plane: ControlPlane,
    admin: client.ApiClient,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """The pod watch is the API server's fieldSelector spec.nodeName: a build pod bound to
    another Node never reaches the agent, so a real update passes."""
    node, other = await create_worker(admin), await create_worker(admin)
    await add_build_pod(admin, other)
    agent = await start(control_plane, node, tmp_path, agents)
    await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    record = await agent.wait_log(lambda r: r.get("request") == DRAIN_B)
    assert record["outcome"] == "pass"
    # A build pod bound to the agent's own Node afterwards arrives by the watch, and the same
    # agent holds the next request for it.
    await add_build_pod(admin, node)
    await mcd_request(admin, node, DRAIN_C, **{protocol.DESIRED_IMAGE: IMAGE_B})
    held = await wait_annotation(
        admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_C
    )
    assert held[protocol.HOLD_REASONS] == "build-pod"


async def test_a_restarted_agent_resumes_the_hold_it_finds(
    control_plane: ControlPlane,
    admin: client.ApiClient,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    node = await create_worker(admin)
    pod = await add_build_pod(admin, node)
    first = await start(control_plane, node, tmp_path, agents)
    await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    held = await wait_annotation(
        admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
    )
    await first.wait_log(lambda r: r.get("outcome") == "hold")
    await first.kill()  # a node's crash: no release on the way out

    second = await start(control_plane, node, tmp_path, agents)
    resumed = await second.wait_log(lambda r: r.get("message") == "resuming hold found on the node")
    assert resumed["heldSince"] == held[protocol.HELD_SINCE]
    await second.wait_log(lambda r: r.get("outcome") == "holding")
    after = await client.CoreV1Api(admin).read_node(node)
    # Resumed as it is, not written again: the Node is the one the first agent left.
    assert after.metadata.annotations == held

    await set_phase(admin, pod, "Succeeded")
    await wait_annotation(admin, node, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    await second.wait_log(lambda r: r.get("outcome") == "release:safe")


async def test_a_concurrent_writer_loses_the_agent_its_compare_and_swap(
    control_plane: ControlPlane,
    admin: client.ApiClient,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """On a Node never drained (no lastAppliedDrain) the hold's patch tests the
    resourceVersion: another writer's updates in between make the real API server refuse it,
    and the agent reads the Node again and decides again until its hold lands, leaving the
    other writer's annotation as that writer left it."""
    node = await create_worker(admin, last_applied=False)
    await add_build_pod(admin, node)
    agent = await start(control_plane, node, tmp_path, agents)
    core = client.CoreV1Api(admin)
    writes = 0

    async def write_on() -> None:
        nonlocal writes
        while True:
            writes += 1
            body = {"metadata": {"annotations": {"example.com/writer": str(writes)}}}
            await core.patch_node(node, body)

    def lost_or_held(request: str) -> Callable[[dict[str, Any]], bool]:
        def match(record: dict[str, Any]) -> bool:
            message = str(record.get("message"))
            held = record.get("outcome") == "hold" and record.get("request") == request
            return held or message.startswith("compare-and-swap lost")

        return match

    writer = asyncio.create_task(write_on())
    try:
        # Whether the other writer gets in between is a race: each new request from the MCD
        # is another chance, and a hold that lands first simply makes way for the next one.
        for attempt in range(ROUNDS):
            request = f"drain-rendered-worker-{attempt:032d}"
            start_at = len(agent.records)
            await mcd_request(admin, node, request, **{protocol.DESIRED_IMAGE: IMAGE_B})
            found = await agent.wait_log(lost_or_held(request), start=start_at)
            if str(found["message"]).startswith("compare-and-swap lost"):
                break
        else:
            pytest.fail(f"no compare-and-swap lost in {ROUNDS} requests")
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
    assert "422" in found["message"] or "409" in found["message"], found
    held = await wait_annotation(
        admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + request
    )
    assert held[protocol.HELD_DRAIN] == request
    # The other writer's annotation is as it left it (its last patch may have been cut off).
    assert held["example.com/writer"] in (str(writes), str(writes - 1))


async def test_a_watch_whose_resource_version_is_compacted_away_lists_again(
    control_plane: ControlPlane,
    admin: client.ApiClient,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """etcd compacted past the agent's resource versions and the API server restarted, as an
    upgrade does: its watch cache starts at etcd's current revision and etcd no longer has the
    older ones. Each of the agent's watches is renewed from where it was, gets the real 410
    Gone, lists again, and the agent holds the next request as before. (The restart alone
    gives the 410 too: the cache cannot serve a version older than its start.)"""
    node = await create_worker(admin)
    await add_build_pod(admin, node)
    agent = await start(control_plane, node, tmp_path, agents)
    # A write the agent's watches do not see: etcd's revision moves past theirs.
    await create_worker(admin)
    control_plane.compact()
    await asyncio.to_thread(control_plane.restart_apiserver)

    def expired(watch: str) -> Callable[[dict[str, Any]], bool]:
        return lambda r: str(r.get("message")) == f"watch of {watch} expired (410), listing again"

    for watch in (f"node {node}", f"pods on node {node} in {MCO_NS}"):
        await agent.wait_log(expired(watch), timeout=WAIT)
    assert (
        await metric(agent, "drain_guard_watch_restarts_total", resource="node", reason="expired")
        >= 1
    )
    await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    held = await wait_annotation(
        admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
    )
    assert held[protocol.HOLD_REASONS] == "build-pod"
