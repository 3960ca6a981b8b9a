"""Issue 35 F2: a step of the wall clock neither lengthens nor shortens a hold.

The agent runs under libfaketime (Debian's ``libfaketime``, ``LD_PRELOAD``) with its wall
clock read from a file the test rewrites (``FAKETIME_TIMESTAMP_FILE``, read again each
second; the agent's ``/status`` shows when the step took) and its monotonic clock left alone
(``FAKETIME_DONT_FAKE_MONOTONIC``): the test steps the agent's clock as NTP or an operator
would, and nothing else's. The agent holds a drain on the real API server
(the node-label guard: only max-hold ends the hold), 5 s before its end the clock is
stepped back 4 min, back 90 s (inside the 2-minute skew allowance) or forward an hour, and
the hold must end with outcome ``expired`` at max-hold, as the test's own clock counts it
from ``held-since``: not before, and not later than the agent's reaction allows. Before,
stepped back 90 s it lasted max-hold plus the step, back 4 min its clock restarted (max-hold
more), and stepped forward it ended at once.
"""

from __future__ import annotations

import asyncio
import glob
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.nodes import (
    DRAIN_B,
    create_worker,
    mcd_request,
    read_annotations,
    wait_annotation,
)
from tests.helpers import IMAGE_A, IMAGE_B, reap, require_or_skip, spawn

MAX_HOLD = timedelta(seconds=20)
#: The steps of the agent's wall clock, in seconds.
STEPS = (-240, -90, 3600)
#: How late the release may come after max-hold: the agent's reaction on a loaded machine
#: (tighter than the issue's 30 s, which a hold restarted 5 s before its end would meet).
BOUND = timedelta(seconds=8)
#: The step comes when the hold has this much left: a hold whose clock restarted there
#: would last max-hold more.
STEP_WITH_LEFT = 5


def _libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        require_or_skip("libfaketime is not installed (scripts/system-deps.sh installs it)")
    return found[0]


async def _status(agent: AgentProcess) -> dict[str, Any]:
    code, body = await agent.http("/status")
    assert code == 200, body
    doc: dict[str, Any] = json.loads(body)
    return doc


async def _until_left(agent: AgentProcess, seconds: int) -> None:
    """Until the agent's /status says its hold has at most ``seconds`` left."""
    async with asyncio.timeout(MAX_HOLD.total_seconds() + 30):
        while True:
            # None until the agent has taken in its own hold's write (the test may see the
            # hold on the Node first).
            left = (await _status(agent))["timeLeftSeconds"]
            if left is not None and left <= seconds:
                return
            await asyncio.sleep(0.2)


async def _until_stepped(agent: AgentProcess, step: timedelta) -> None:
    """Until the agent's clock shows the step (its /status ``generatedAt``)."""
    async with asyncio.timeout(30):
        while True:
            shown = protocol.parse_rfc3339((await _status(agent))["generatedAt"])
            if abs(shown - datetime.now(UTC) - step) < timedelta(seconds=10):
                return
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("step", STEPS, ids=["back-4m", "back-90s", "forward-1h"])
async def test_a_step_of_the_agents_wall_clock_neither_lengthens_nor_shortens_its_hold(
    control_plane: ControlPlane, admin: client.ApiClient, tmp_path: Path, step: int
) -> None:
    await held_through_a_step(control_plane, admin, tmp_path, step)


async def held_through_a_step(
    control_plane: ControlPlane, admin: client.ApiClient, tmp_path: Path, step: int
) -> str:
    """The agent's clock stepped by ``step`` seconds 5 s before its hold's end: the hold ends
    at max-hold (also tests/chaos's repeated run); returns the Node's name."""
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    env = {
        "LD_PRELOAD": _libfaketime(),
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_CACHE_DURATION": "1",  # the file is read again each second
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    node = await create_worker(admin)
    await client.CoreV1Api(admin).patch_node(
        node, {"metadata": {"labels": {protocol.BLOCK_DRAINS_LABEL: "test"}}}
    )
    started: list[AgentProcess] = []
    try:
        agent = await spawn(
            node,
            control_plane.admin_kubeconfig,
            HostFS(tmp_path / "host", IMAGE_A),
            "--max-hold",
            f"{MAX_HOLD.total_seconds():g}s",
            started=started,
            env=env,
        )
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        # Written before the step, by the agent's clock then: the test's clock (second
        # precision, so the hold may end up to a second before since + max-hold).
        since = protocol.parse_rfc3339(held[protocol.HELD_SINCE])
        await _until_left(agent, STEP_WITH_LEFT)
        offset.write_text(f"{step:+d}\n")
        await _until_stepped(agent, timedelta(seconds=step))
        # Another writer's change wakes the agent at once, as the kubelet's status reports do
        # on a real Node: it decides on the stepped clock now, not at its max-hold timer.
        await client.CoreV1Api(admin).patch_node(
            node, {"metadata": {"labels": {"example.com/after-the-step": "1"}}}
        )

        released_at = None
        while datetime.now(UTC) < since + MAX_HOLD + BOUND:
            if (await read_annotations(admin, node)).get(protocol.DESIRED_DRAIN) == DRAIN_B:
                released_at = datetime.now(UTC)
                break
            await asyncio.sleep(0.2)
        assert released_at is not None, (
            f"the hold outlived max-hold + {BOUND} with the clock stepped {step:+d}s:\n"
            + agent.log_text()
        )
        assert released_at >= since + MAX_HOLD - timedelta(seconds=1), (
            f"released {released_at - since} after held-since, before max-hold, with the clock"
            f" stepped {step:+d}s:\n" + agent.log_text()
        )
        ended = await agent.wait_log(lambda r: r.get("message") == "hold ended")
        assert ended["outcome"] == "expired", ended
        assert MAX_HOLD.total_seconds() - 1 <= ended["heldSeconds"] < (MAX_HOLD + BOUND).seconds
        return node
    finally:
        await reap(started)
