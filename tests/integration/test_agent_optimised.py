"""The agent as deployed runs optimised (``PYTHONOPTIMIZE=2``, the image's and the systemd
unit's setting: no asserts, no docstrings) and still does its whole job."""

from __future__ import annotations

import subprocess
import sys

import psutil

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    AGENT_USER,
    CONFIG_B,
    IMAGE_B,
    MCO_NS,
    WAIT,
    StartAgent,
    add_build_pod,
    mcd_request,
    wait_annotation,
)

OPTIMISED = {"PYTHONOPTIMIZE": "2"}
DRAIN_B = f"drain-{CONFIG_B}"


def test_the_setting_strips_docstrings_and_asserts() -> None:
    code = "import drain_guard.cli as c; print(sys.flags.optimize, c.__doc__)"
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}"],
        env={**OPTIMISED, "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["2", "None"]


async def test_the_optimised_agent_holds_shields_and_releases(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent(env=OPTIMISED)
    assert psutil.Process(agent.pid).environ().get("PYTHONOPTIMIZE") == "2"
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert ann[protocol.HOLD_REASONS] == "build-pod"
    await api.wait_for(
        lambda: any(w.verb == "create" for w in api.writes("poddisruptionbudgets")), timeout=WAIT
    )
    await api.wait_for(
        lambda: any(w.user == AGENT_USER for w in api.writes("events")), timeout=WAIT
    )

    pod = api.get("pods", "build-pod", MCO_NS)
    pod["status"]["phase"] = "Succeeded"
    api.update("pods", pod, MCO_NS, subresource="status")
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert await agent.stop() == 0
