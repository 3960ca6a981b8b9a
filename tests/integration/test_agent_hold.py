"""The agent as a process against the simulator: hold, no hold, release."""

from __future__ import annotations

from agent import protocol
from agent.sim.apiserver import SimApiServer
from tests.conftest import (
    CONFIG_B,
    IMAGE_B,
    StartAgent,
    add_build_pod,
    mcd_request,
    node_annotations,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"


async def test_holds_while_a_build_pod_runs_and_releases_when_it_finishes(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert ann[protocol.HELD_DRAIN] == DRAIN_B
    assert ann[protocol.HOLD_REASONS] == "build-pod"
    assert "build-pod" in ann[protocol.HOLD_DETAIL]

    pod = api.get("pods", "build-pod", "openshift-machine-config-operator")
    pod["status"]["phase"] = "Succeeded"
    api.update("pods", pod, "openshift-machine-config-operator", subresource="status")
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert not any(k.startswith(protocol.DG_PREFIX) for k in ann if k != protocol.RELEASED)
    assert await agent.stop() == 0
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == DRAIN_B
