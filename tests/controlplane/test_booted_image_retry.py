"""Issue 35 F4: a booted image that cannot be read at start is read again until it is known.

The agent starts on the real API server with its host's ostree origin file missing (as for
a moment at boot), says so in ``/status`` (the error and since when), and once the file is
back, without any event of the Node or its pods to wake it, reads the image again and holds
the MCD's drain for the very image the node runs (``noop-image``). Before, the error was kept
until the boot changed: the guard stayed off for the life of the process and the drain went
through.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.nodes import DRAIN_B, create_worker, mcd_request, wait_annotation
from tests.helpers import IMAGE_A, reap, spawn


async def test_an_origin_missing_at_start_is_read_again_and_the_noop_drain_held(
    control_plane: ControlPlane, admin: client.ApiClient, tmp_path: Path
) -> None:
    node = await create_worker(admin)
    host = HostFS(tmp_path / "host", IMAGE_A)
    origin = host.origin_file()
    kept = origin.read_text()
    origin.unlink()
    started: list[AgentProcess] = []
    try:
        agent = await spawn(node, control_plane.admin_kubeconfig, host, started=started)
        code, body = await agent.http("/status")
        assert code == 200, body
        image = json.loads(body)["image"]
        assert image["bootedDigest"] is None
        assert "origin" in image["bootedError"], image
        assert protocol.parse_rfc3339(image["bootedErrorSince"]) is not None
        origin.write_text(kept)
        # The MCD asks to drain for the image the node already runs (a no-op update).
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_A})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        assert held[protocol.HOLD_REASONS] == "noop-image"
        code, body = await agent.http("/status")
        image = json.loads(body)["image"]
        assert (image["bootedError"], image["bootedErrorSince"]) == (None, None)
    finally:
        await reap(started)
