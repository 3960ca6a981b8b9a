"""Start-up checks: a wrong --daemonset refuses to start, an unknown --node-name is logged."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from drain_guard.runtime.selfcheck import PROBE_ANNOTATION
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import (
    AGENT_POD,
    AGENT_USER,
    NODE,
    WAIT,
    StartAgent,
    add_own_daemonset,
    confinement,
    metric,
    node_annotations,
)


async def _refused(start_agent: StartAgent, *flags: str) -> str:
    """Start the agent, expect exit 2 with one error line; return that line."""
    agent = await start_agent(*flags, ready=False)
    assert await agent.stop(0) == 2, agent.log_text()  # signal 0: just wait for the exit
    errors = [r for r in agent.records if r.get("level") == "ERROR"]
    assert len(errors) == 1, agent.log_text()
    assert not any(r.get("message") == "decision" for r in agent.records)
    return str(errors[0]["message"])


async def test_a_daemonset_that_does_not_exist_refuses_to_start(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Finding 5: a wrong name (a kustomize namePrefix) made every SIGTERM an uninstall."""
    message = await _refused(
        start_agent, "--daemonset", "drain-guard/prefix-drain-guard", "--pod-name", AGENT_POD
    )
    assert "--daemonset drain-guard/prefix-drain-guard: no such DaemonSet" in message


async def test_a_daemonset_that_does_not_own_this_pod_refuses_to_start(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    flags = add_own_daemonset(api, owns_pod=False)
    message = await _refused(start_agent, *flags)
    assert "is controlled by DaemonSet other, not by this DaemonSet" in message


async def test_a_pod_name_that_does_not_exist_refuses_to_start(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_own_daemonset(api)
    message = await _refused(
        start_agent, "--daemonset", "drain-guard/drain-guard", "--pod-name", "elsewhere"
    )
    assert "--pod-name elsewhere: no such pod in namespace drain-guard" in message


async def test_its_own_daemonset_is_accepted(api: SimApiServer, start_agent: StartAgent) -> None:
    agent = await start_agent(*add_own_daemonset(api))
    assert any(r.get("message") == f"DaemonSet drain-guard/drain-guard owns this pod ({AGENT_POD})"
               for r in agent.records)  # fmt: skip


@pytest.mark.parametrize("flags", [(), ("--log-format", "text")])
async def test_an_unknown_node_name_is_logged_at_start(
    api: SimApiServer, start_agent: StartAgent, flags: tuple[str, ...]
) -> None:
    api.delete("nodes", "worker-0")
    agent = await start_agent(*flags, ready=False)
    await agent.wait_line("node worker-0 not found: --node-name (NODE_NAME) names no Node")
    assert agent.proc.returncode is None  # it keeps running: the Node may register later


async def test_failed_start_up_checks_are_one_warning_and_one_recovery_line(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """The check of --node-name retries until the API answers: the log says so once."""
    api.faults.error(503, user=AGENT_USER, verb="get", resource="nodes", times=3)
    agent = await start_agent("--log-level", "DEBUG")
    ours = [r for r in agent.records if r["message"].startswith("checking --node-name: ")]
    assert [r["level"] for r in ours] == ["WARNING", "DEBUG", "DEBUG", "WARNING"]
    assert "API unreachable since" in ours[0]["message"]
    assert "API reachable again after" in ours[-1]["message"]


async def test_a_service_account_that_may_write_every_node_is_reported_unconfined(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """The simulator authorizes service accounts for everything (no admission policy), as an
    OpenShift 4.15 cluster with only the ClusterRole did: the dry run is allowed."""
    api.create("nodes", {"metadata": {"name": "worker-1"}})
    rv = api.resource_version
    agent = await start_agent()
    doc = await confinement(agent)
    assert doc["confined"] is False
    assert "a dry-run write to Node worker-1 was allowed" in doc["detail"]
    assert api.resource_version == rv  # nothing stored
    assert PROBE_ANNOTATION not in node_annotations(api, "worker-1")


async def test_a_single_node_cluster_checks_the_token_request_only(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """No other Node to write to; the TokenRequest is checked still (the simulator allows it,
    as RBAC with a wildcard role would)."""
    agent = await start_agent()
    doc = await confinement(agent)
    assert doc == {
        "confined": False,
        "detail": "no other Node to test against (a single-node cluster); a dry-run"
        " TokenRequest for service account default/default was allowed: this agent can act as"
        " other service accounts (docs/install.md, Every identity and every right)",
    }


async def test_the_confinement_check_runs_again_and_sees_a_change(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Issue 21 item 4: not only at start. Allowed at first (the simulator authorizes
    everything), then RBAC narrowed to the agent's own Node and no TokenRequest: the next
    check reports it confined, in /status, the metric and one new log line."""
    api.create("nodes", {"metadata": {"name": "worker-1"}})
    agent = await start_agent("--confinement-check-interval", "200ms")
    assert (await confinement(agent))["confined"] is False

    def narrowed(
        group: str, resource: str, verb: str, namespace: str | None, name: str | None
    ) -> bool:
        if resource == "serviceaccounts/token":
            return False
        return not (resource == "nodes" and verb == "patch" and name != NODE)

    api.restrict(AGENT_USER, narrowed)
    record = await agent.wait_log(lambda r: r.get("confined") is True)
    assert "a dry-run write to Node worker-1 was denied" in record["message"]
    assert "a dry-run TokenRequest for default/default was denied" in record["message"]
    status, body = await agent.http("/status")
    assert status == 200
    assert json.loads(body)["confinement"]["confined"] is True
    assert await metric(agent, "drain_guard_confined") == 1


def _agent_requests(api: SimApiServer, verb: str, path: str) -> list[int]:
    """The statuses of the agent's ``verb`` requests to ``path``, in order."""
    return [
        status
        for _, user, seen_verb, _, seen_path, status in api.request_log
        if user == AGENT_USER and seen_verb == verb and seen_path == path
    ]


async def _until_requests(api: SimApiServer, verb: str, path: str, count: int) -> None:
    """Until the agent has sent ``count`` ``verb`` requests to ``path``."""
    await api.wait_for(lambda: len(_agent_requests(api, verb, path)) >= count, timeout=WAIT)


async def test_the_confinement_check_lists_nodes_again_only_when_its_node_is_gone(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Issue 36: each check listed Nodes to find one to write to, a third of its requests.
    The Node listed first is written to again while it exists; once deleted (404), another
    is listed and written to."""
    api.create("nodes", {"metadata": {"name": "worker-1"}})
    agent = await start_agent("--confinement-check-interval", "50ms")
    await _until_requests(api, "patch", "/api/v1/nodes/worker-1", 1)
    lists = len(_agent_requests(api, "list", "/api/v1/nodes"))
    await _until_requests(api, "patch", "/api/v1/nodes/worker-1", 5)
    assert len(_agent_requests(api, "list", "/api/v1/nodes")) == lists

    api.delete("nodes", "worker-1")
    api.create("nodes", {"metadata": {"name": "worker-2"}})
    await _until_requests(api, "patch", "/api/v1/nodes/worker-2", 5)
    assert _agent_requests(api, "patch", "/api/v1/nodes/worker-1")[-1] == 404
    assert len(_agent_requests(api, "list", "/api/v1/nodes")) == lists + 1
    assert (await confinement(agent))["confined"] is False


def _unreachable_kubeconfig(api: SimApiServer, path: Path) -> Path:
    """The agent's kubeconfig with the server moved to a loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again on exit: connections are refused
    config = yaml.safe_load(api.kubeconfig(AGENT_USER).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_an_unreachable_api_at_start_is_alive_and_not_ready(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    """Issue 25: the port was closed until the start-up checks passed, so the liveness probe
    failed and an API outage at start became CrashLoopBackOff."""
    kubeconfig = _unreachable_kubeconfig(api, tmp_path / "unreachable")
    agent = await start_agent("--kubeconfig", str(kubeconfig), ready=False)
    await agent.wait_line("checking --node-name: API unreachable since")
    assert await agent.http("/healthz") == (200, "ok\n")
    assert await agent.http("/readyz") == (503, "waiting for the API\n")
    status, body = await agent.http("/status")
    assert (status, json.loads(body)) == (
        200,
        {"phase": "starting", "ready": False, "reason": "waiting for the API"},
    )
    # A SIGTERM during the wait is a clean stop (it was 143 with no line).
    assert await agent.stop() == 0
    assert "stopping (signalled before start-up completed)" in agent.log_text()


async def test_the_endpoint_answers_while_the_api_fails_and_hands_over_when_it_answers(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    fault = api.faults.error(503, user=AGENT_USER)
    agent = await start_agent(ready=False)
    await agent.wait_line("checking --node-name: API unreachable since")
    assert await agent.http("/readyz") == (503, "waiting for the API\n")
    api.faults.remove(fault)
    await agent.wait_synced()
    status, body = await agent.http("/status")
    assert status == 200
    assert json.loads(body)["node"] == NODE


async def test_a_port_in_use_is_one_line_and_exit_2_before_any_api_contact(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    """It was reported only once the API answered, with exit 1."""
    kubeconfig = _unreachable_kubeconfig(api, tmp_path / "unreachable")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        message = await _refused(start_agent, "--kubeconfig", str(kubeconfig), "--listen", listen)
    assert message.startswith(f"cannot listen on {listen}: ")
    assert "address already in use" in message
