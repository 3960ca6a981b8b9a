"""``drain-guard webhook`` as a process: AdmissionReviews over TLS, as the API server sends
them, decided with the pods it looks up in the simulator with its own identity; the TLS
profile's flags; no decision (503, the failurePolicy's call) when it cannot look a pod up.

The real API server calling it is tests/controlplane's; here the requests are the API
server's shape, built by the test.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from drain_guard import protocol
from drain_guard.confine.admission import POD_NAME_EXTRA, POD_UID_EXTRA
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_webhook
from tests.helpers import NODE, reap

AGENT = "system:serviceaccount:drain-guard:drain-guard"
WEBHOOK_USER = "system:serviceaccount:drain-guard:drain-guard-webhook"
POD = "drain-guard-x7k2p"


@pytest.fixture
def cert(tmp_path: Path) -> ServingCert:
    return ServingCert.generate(tmp_path / "tls")


@pytest.fixture
async def agent_pod(api: SimApiServer) -> str:
    """The agent's pod on NODE, as the DaemonSet controller makes it; its uid."""
    pod = api.create(
        "pods",
        {
            "metadata": {
                "name": POD,
                "namespace": "drain-guard",
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "drain-guard",
                        "uid": "ds-uid",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": NODE,
                "serviceAccountName": "drain-guard",
                "containers": [{"name": "drain-guard", "image": "drain-guard"}],
            },
        },
    )
    uid: str = pod["metadata"]["uid"]
    return uid


@pytest.fixture
async def webhook(
    api: SimApiServer, cert: ServingCert, tmp_path: Path
) -> AsyncIterator[AgentProcess]:
    kubeconfig = api.kubeconfig(WEBHOOK_USER, tmp_path / "webhook-kubeconfig")
    process = await spawn_webhook(kubeconfig, cert.cert_file, cert.key_file)
    await process.wait_log(lambda r: str(r.get("message", "")).startswith("listening on"))
    yield process
    await reap([process])


def node_update(name: str, old_drain: str, new_drain: str, **added: str) -> dict[str, Any]:
    def node(drain: str, extra: dict[str, str]) -> dict[str, Any]:
        annotations = {protocol.DESIRED_DRAIN: drain, **extra}
        return {"metadata": {"name": name, "annotations": annotations}, "spec": {}}

    return {
        "operation": "UPDATE",
        "resource": {"group": "", "version": "v1", "resource": "nodes"},
        "name": name,
        "object": node(new_drain, added),
        "oldObject": node(old_drain, {}),
    }


def review(request: dict[str, Any], extra: dict[str, list[str]]) -> dict[str, Any]:
    request = {"uid": "r-1", "userInfo": {"username": AGENT, "extra": extra}, **request}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


async def post(
    process: AgentProcess,
    cert: ServingCert,
    body: dict[str, Any],
    ctx: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, Any] | str]:
    ctx = ctx or ssl.create_default_context(cafile=str(cert.ca_file))
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"https://127.0.0.1:{process.port}/validate", json=body, ssl=ctx) as resp,
    ):
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


HOLD = ("drain-rendered-worker-1", "hold-drain-rendered-worker-1")


async def test_it_allows_the_agents_hold_of_its_own_node_and_denies_another(
    webhook: AgentProcess, cert: ServingCert, agent_pod: str
) -> None:
    extra = {POD_NAME_EXTRA: [POD], POD_UID_EXTRA: [agent_pod]}
    own = node_update(NODE, *HOLD, **{protocol.HELD_DRAIN: HOLD[0]})
    status, body = await post(webhook, cert, review(own, extra))
    assert status == 200
    assert isinstance(body, dict)
    assert body["response"] == {"uid": "r-1", "allowed": True}
    other = node_update("worker-1", *HOLD, **{protocol.HELD_DRAIN: HOLD[0]})
    status, body = await post(webhook, cert, review(other, extra))
    assert isinstance(body, dict)
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 403
    assert f"only the Node it runs on ({NODE})" in body["response"]["status"]["message"]
    # A token of a pod that is gone (another uid): denied, whatever the Node.
    stale = {POD_NAME_EXTRA: [POD], POD_UID_EXTRA: ["a-deleted-pods-uid"]}
    status, body = await post(webhook, cert, review(own, stale))
    assert isinstance(body, dict)
    assert "replaced" in body["response"]["status"]["message"]
    await webhook.wait_line("denied UPDATE nodes worker-1 by " + AGENT)


async def test_it_does_not_decide_when_it_cannot_look_the_pod_up(
    api: SimApiServer, cert: ServingCert, agent_pod: str, tmp_path: Path
) -> None:
    """A webhook whose own token the API server refuses answers 503: the API server then
    applies the entry's failurePolicy, instead of the webhook guessing."""
    kubeconfig = api.kubeconfig(WEBHOOK_USER, tmp_path / "bad", token="not-a-known-token")
    process = await spawn_webhook(kubeconfig, cert.cert_file, cert.key_file)
    try:
        await process.wait_log(lambda r: str(r.get("message", "")).startswith("listening on"))
        extra = {POD_NAME_EXTRA: [POD], POD_UID_EXTRA: [agent_pod]}
        own = node_update(NODE, *HOLD, **{protocol.HELD_DRAIN: HOLD[0]})
        status, body = await post(process, cert, review(own, extra))
        assert status == 503
        assert f"pod drain-guard/{POD}" in str(body)
    finally:
        await reap([process])


async def test_it_serves_the_tls_profile_it_is_given(
    api: SimApiServer, cert: ServingCert, tmp_path: Path
) -> None:
    """Intermediate (the default): TLS 1.2 with the profile's ECDHE suites only; Modern
    (``--tls-min-version=VersionTLS13``): no TLS 1.2 at all."""
    kubeconfig = api.kubeconfig(WEBHOOK_USER, tmp_path / "webhook-kubeconfig")
    intermediate = await spawn_webhook(kubeconfig, cert.cert_file, cert.key_file)
    modern = await spawn_webhook(
        kubeconfig, cert.cert_file, cert.key_file, "--tls-min-version=VersionTLS13"
    )
    try:
        for process in (intermediate, modern):
            await process.wait_log(lambda r: str(r.get("message", "")).startswith("listening"))

        def tls12(ciphers: str) -> ssl.SSLContext:
            ctx = ssl.create_default_context(cafile=str(cert.ca_file))
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_ciphers(ciphers)
            return ctx

        probe = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
        status, _ = await post(intermediate, cert, probe, tls12("ECDHE-ECDSA-AES128-GCM-SHA256"))
        assert status == 400  # through TLS, and no request in it
        with pytest.raises(aiohttp.ClientConnectorError):  # CBC is not in the profile
            await post(intermediate, cert, probe, tls12("ECDHE-ECDSA-AES128-SHA256"))
        with pytest.raises(aiohttp.ClientConnectorError):
            await post(modern, cert, probe, tls12("ECDHE-ECDSA-AES128-GCM-SHA256"))
        status, _ = await post(modern, cert, probe)
        assert status == 400
    finally:
        await reap([intermediate, modern])


async def test_a_bad_flag_is_one_line_and_exit_2(api: SimApiServer, cert: ServingCert) -> None:
    process = await spawn_webhook(
        api.kubeconfig(WEBHOOK_USER),
        cert.cert_file,
        cert.key_file,
        "--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA",
    )
    assert await process.proc.wait() == 2
    await process.closed()
    assert [r["message"] for r in process.records] == [
        "--tls-cipher-suites: unsupported suite TLS_RSA_WITH_RC4_128_SHA"
    ]
