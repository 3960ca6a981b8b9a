"""Rotated and revoked credentials (issue 14): on a 401 the agent reads its credentials again,
for every request (calls, lists, watches), and keeps working without a restart; a 401 the
re-read does not cure is one ERROR line and a gauge, and the retries keep their backoff.

The simulator answers a token it does not know (replaced by ``add_user``) with kube-apiserver's
401 ``Unauthorized`` Status: an invalid bearer token is never taken for anonymous. A watch
already open stays open, as on a real server, which authenticates a request once, when it
starts; cutting the watches makes the agent send new requests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes_asyncio.config import incluster_config

from drain_guard import protocol
from drain_guard.kube.client import Kube
from drain_guard.kube.counters import NullCounters
from drain_guard.kube.listwatch import WatchCache
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.seedobjects import worker_node
from tests.helpers import (
    AGENT_USER,
    CONFIG_A,
    CONFIG_B,
    IMAGE_A,
    IMAGE_B,
    MCO_NS,
    NODE,
    WAIT,
    add_build_pod,
    agent_writes,
    mcd_request,
    metric,
    node_annotations,
    spawn,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"


def _kubeconfig(api: SimApiServer, tmp_path: Path, how: str) -> tuple[Path, Path]:
    """The agent's kubeconfig, and the file a new token is written to: the token file it
    names (``tokenFile``), or the kubeconfig itself (a token in it, as in a systemd
    credential: the file the agent was given is rewritten)."""
    path = tmp_path / "kubeconfig"
    if how == "token-file":
        token_file = tmp_path / "token"
        return api.kubeconfig(AGENT_USER, path, token_file=token_file), token_file
    return api.kubeconfig(AGENT_USER, path), path


def _refusals(api: SimApiServer) -> int:
    return sum(1 for *_, status in api.request_log if status == 401)


def _renew(api: SimApiServer, kubeconfig: Path, written: Path) -> None:
    """A new token for the agent: the old one is refused from now on, the new one is written."""
    token = api.add_user(AGENT_USER)
    if written == kubeconfig:
        api.kubeconfig(AGENT_USER, kubeconfig, token=token)
    else:
        written.write_text(token)


@pytest.mark.parametrize("how", ["token-file", "kubeconfig"])
async def test_a_rotated_token_is_read_again_and_the_hold_kept_without_a_restart(
    api: SimApiServer, host: HostFS, tmp_path: Path, agents: list[AgentProcess], how: str
) -> None:
    kubeconfig, written = _kubeconfig(api, tmp_path, how)
    agent = await spawn(NODE, kubeconfig, host, started=agents)
    add_build_pod(api)
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)

    _renew(api, kubeconfig, written)
    rv, mark = api.resource_version, len(agent.records)
    api.cut_watches(user=AGENT_USER)  # each watch (Node, pods, budgets) renews: 401
    renewed = await agent.wait_log(
        lambda r: "agent credentials refused (401); read them again" in str(r["message"]),
        start=mark,
    )
    assert renewed["message"].endswith(f"from kubeconfig {kubeconfig}: renewed")
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B  # still held

    # It goes on acting on what it sees: the build ends, the hold is released (a Node write).
    api.delete("pods", "build-pod", MCO_NS)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    assert agent_writes(api, since=rv, resource="nodes")
    assert agent.proc.returncode is None
    # The three refused watches read the credentials once between them.
    assert await metric(agent, "drain_guard_credential_reads_total", identity="agent") == 1
    assert await metric(agent, "drain_guard_credentials_refused", identity="agent") == 0
    assert [r for r in agent.records if r["level"] == "ERROR"] == []


async def test_a_401_the_re_read_does_not_cure_is_reported_once_and_retried_with_backoff(
    api: SimApiServer, host: HostFS, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    kubeconfig, token_file = _kubeconfig(api, tmp_path, "token-file")
    agent = await spawn(NODE, kubeconfig, host, "--log-level", "DEBUG", started=agents)
    api.add_user(AGENT_USER)  # revoked, and nothing new in the file
    mark = len(agent.records)
    api.cut_watches(user=AGENT_USER)
    refused = await agent.wait_log(lambda r: r["level"] == "ERROR", start=mark)
    assert refused["message"].startswith(
        "the API server refuses the agent credentials (401 Unauthorized), also as read again"
        f" from kubeconfig {kubeconfig}: renew them there"
    )
    for _ in range(3):  # the Node watch retries on, with backoff
        start = len(agent.records)
        await agent.wait_log(
            lambda r: (
                str(r["message"]).startswith(f"watch of node {NODE}: watch failed again")
                or str(r["message"]).startswith(f"watch of node {NODE}: list failed again")
            ),
            start=start,
        )
    assert [r for r in agent.records if r["level"] == "ERROR"] == [refused]
    assert await metric(agent, "drain_guard_credentials_refused", identity="agent") == 1
    # Each refusal was one request and one read: nothing is sent again with what was refused.
    before = _refusals(api)
    reads = await metric(agent, "drain_guard_credential_reads_total", identity="agent")
    assert 3 <= before <= reads <= _refusals(api)

    token_file.write_text(api.token(AGENT_USER))
    accepted = await agent.wait_log(
        lambda r: r["message"] == "the API server accepts the agent credentials again",
        start=mark,
        timeout=WAIT * 2,  # the next retry of a watch, up to its backoff away
    )
    assert accepted["level"] == "WARNING"
    assert await metric(agent, "drain_guard_credentials_refused", identity="agent") == 0
    assert agent.proc.returncode is None


class _Reads(NullCounters):
    def __init__(self) -> None:
        self.reads: list[str] = []
        self.refused: list[tuple[str, bool]] = []

    def credentials_read(self, identity: str) -> None:
        self.reads.append(identity)

    def credentials_refused(self, identity: str, refused: bool) -> None:
        self.refused.append((identity, refused))


async def test_in_a_pod_the_renewed_service_account_token_is_read_again_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-cluster (no kubeconfig), the kubelet renews the projected token in its file; the
    library itself reads it again once a minute only. A list, a watch and a call each meet a
    401 once and go through on the token read again."""
    tls = ServingCert.generate(tmp_path / "tls")
    async with SimApiServer(tls=tls) as api:
        api.create("nodes", worker_node(NODE, CONFIG_A, IMAGE_A))
        token = tmp_path / "token"
        token.write_text(api.token(AGENT_USER))
        monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tls.ca_file))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
        counters = _Reads()
        kube = await Kube.connect(None, counters)
        cache = WatchCache()
        watch = asyncio.create_task(kube.watch_node(NODE, cache))
        try:
            token.write_text(api.add_user(AGENT_USER))  # before the first list
            async with asyncio.timeout(WAIT):
                while not cache.node_synced:
                    await cache.changed.wait()
                    cache.changed.clear()
            assert counters.reads == ["agent"]

            token.write_text(api.add_user(AGENT_USER))
            api.cut_watches()  # the watch is sent again: 401, read, sent again
            api.patch("nodes", NODE, {"metadata": {"annotations": {"seen": "yes"}}})
            async with asyncio.timeout(WAIT):
                while cache.node is None or "seen" not in cache.node.annotations:
                    await cache.changed.wait()
                    cache.changed.clear()
            assert counters.reads == ["agent"] * 2

            token.write_text(api.add_user(AGENT_USER))
            assert await kube.get_node(NODE) is not None  # a call
            assert counters.reads == ["agent"] * 3
            assert counters.refused == []
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            await kube.close()


async def test_other_credentials_are_checked_for_confinement_at_once(
    api: SimApiServer, host: HostFS, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    """Issue 36: the confinement self-check runs once an hour, and again as soon as the agent
    takes up other credentials (another token may be another identity's rights)."""
    api.create("nodes", worker_node("worker-1", CONFIG_A, IMAGE_A))
    kubeconfig, token_file = _kubeconfig(api, tmp_path, "token-file")
    agent = await spawn(NODE, kubeconfig, host, started=agents)
    first = await agent.wait_log(lambda r: "confinement self-check" in str(r["message"]))
    assert first["confined"] is False  # the simulator authorizes everything

    def own_node_only(
        group: str, resource: str, verb: str, namespace: str | None, name: str | None
    ) -> bool:
        if resource == "serviceaccounts/token":
            return False
        return not (resource == "nodes" and verb == "patch" and name != NODE)

    api.restrict(AGENT_USER, own_node_only)  # granted to the new token: no check sees it yet
    _renew(api, kubeconfig, token_file)
    api.cut_watches(user=AGENT_USER)  # 401, read again: renewed
    checked = await agent.wait_log(lambda r: r.get("confined") is True)
    assert "a dry-run write to Node worker-1 was denied" in checked["message"]
    assert await metric(agent, "drain_guard_confined") == 1
