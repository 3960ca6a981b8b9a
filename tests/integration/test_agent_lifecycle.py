"""Restarts and shutdown: holds live on the Node, uninstall releases, rolling updates keep."""

from __future__ import annotations

import argparse
import json
import signal
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from drain_guard import protocol
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Kube, WorkloadState
from drain_guard.programs.runner import shutdown_releases
from drain_guard.runtime.lifecycle import Stopped
from drain_guard.settings.agent import add_run_arguments, settings_from
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess
from tests.helpers import (
    CONFIG_B,
    IMAGE_B,
    NODE,
    StartAgent,
    add_build_pod,
    add_own_daemonset,
    agent_writes,
    mcd_request,
    metric,
    node_annotations,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"


async def _held(
    api: SimApiServer, start_agent: StartAgent, *flags: str
) -> tuple[AgentProcess, dict[str, str]]:
    add_build_pod(api)
    agent = await start_agent(*flags)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    await agent.wait_log(lambda r: r.get("outcome") == "hold")
    return agent, ann


async def test_a_restarted_agent_resumes_the_hold_with_its_age(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    first, ann = await _held(api, start_agent)
    assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    rv = api.resource_version

    second = await start_agent()
    resumed = await second.wait_log(lambda r: r.get("message") == "resuming hold found on the node")
    assert resumed["heldSince"] == ann[protocol.HELD_SINCE]
    await second.wait_log(lambda r: r.get("outcome") == "holding")
    status, body = await second.http("/status")
    assert status == 200
    doc = json.loads(body)
    assert doc["heldRequest"] == DRAIN_B
    assert doc["since"] == ann[protocol.HELD_SINCE]
    assert agent_writes(api, since=rv, resource="nodes") == []  # resumed as is, not written again
    assert await metric(second, "drain_guard_hold_active", reason="build-pod") == 1
    since = protocol.parse_rfc3339(ann[protocol.HELD_SINCE]).timestamp()
    assert await metric(second, "drain_guard_hold_started_timestamp_seconds") == since
    assert await second.stop() == 0  # no --daemonset, no --release-on-exit: kept
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B


async def test_the_age_of_a_resumed_hold_counts_from_held_since(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    first, _ = await _held(api, start_agent)
    assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    # The hold began ten minutes ago (as if the agent had been down that long). With a
    # max-hold of five minutes the new agent must release it at once: had it counted from
    # its own start, nothing would happen for five minutes and the wait below would fail.
    old = protocol.format_rfc3339(datetime.now(UTC) - timedelta(minutes=10))
    api.patch("nodes", NODE, {"metadata": {"annotations": {protocol.HELD_SINCE: old}}})
    second = await start_agent("--max-hold", "5m")
    ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert ann[protocol.RELEASED] == DRAIN_B
    await second.wait_log(lambda r: r.get("outcome") == "release:expired")


async def test_sigterm_during_a_rolling_update_keeps_the_hold(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent, _ = await _held(api, start_agent, *add_own_daemonset(api))
    rv = api.resource_version
    assert await agent.stop() == 0
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert agent_writes(api, since=rv, resource="nodes") == []
    assert any("rolling update" in line for line in agent.lines)


async def test_sigterm_after_the_daemonset_is_deleted_releases(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent, _ = await _held(api, start_agent, *add_own_daemonset(api))
    api.delete("daemonsets", "drain-guard", "drain-guard")
    assert await agent.stop() == 0
    ann = node_annotations(api)
    assert ann[protocol.DESIRED_DRAIN] == DRAIN_B
    assert not any(k in ann for k in protocol.OWNED_KEYS)
    released = [r for r in agent.records if r.get("outcome") == "release:uninstall"]
    assert len(released) == 1


async def test_sigint_with_release_on_exit_releases(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    agent, _ = await _held(api, start_agent, "--release-on-exit")
    assert await agent.stop(signal.SIGINT) == 0
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == DRAIN_B


class _DaemonSetReader:
    """Stands in for Kube where the simulator cannot go: it has no finalizers, so a
    DaemonSet is never seen with a deletionTimestamp there."""

    def __init__(self, state: WorkloadState | KubeError) -> None:
        self.state = state

    async def daemonset_state(self, namespace: str, name: str) -> WorkloadState:
        assert (namespace, name) == ("drain-guard", "drain-guard")
        if isinstance(self.state, KubeError):
            raise self.state
        return self.state


@pytest.mark.parametrize(
    ("state", "release"),
    [
        (WorkloadState.PRESENT, False),
        (WorkloadState.DELETING, True),
        (WorkloadState.ABSENT, True),
        (KubeError(403, "forbidden"), False),
    ],
)
async def test_shutdown_tells_uninstall_from_rolling_update(
    state: WorkloadState | KubeError, release: bool
) -> None:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    settings = settings_from(
        parser.parse_args(["--daemonset", "drain-guard/drain-guard"]),
        {"NODE_NAME": NODE, "POD_NAME": "drain-guard-x7k2p"},
    )
    reader = cast(Kube, _DaemonSetReader(state))
    decided, why = await shutdown_releases(settings, reader, Stopped(0, signalled=True))
    assert decided is release
    assert why
    # A crash is never an uninstall: after an error, even a deleted DaemonSet keeps the hold.
    decided, why = await shutdown_releases(settings, reader, Stopped(1, signalled=False))
    assert decided is False
    assert "stopped by an error, not by a signal: holds are kept" in why


async def test_release_on_exit_releases_only_after_a_signal() -> None:
    """Issue 27: with --release-on-exit (the systemd unit's setting, with Restart=on-failure)
    any unhandled error released the hold while the build pod still ran."""
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    settings = settings_from(parser.parse_args(["--release-on-exit"]), {"NODE_NAME": NODE})
    reader = cast(Kube, _DaemonSetReader(WorkloadState.PRESENT))
    assert (await shutdown_releases(settings, reader, Stopped(0, signalled=True)))[0] is True
    assert (await shutdown_releases(settings, reader, Stopped(1, signalled=False)))[0] is False
