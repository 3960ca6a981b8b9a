"""Issue 35 F1: no hold outlives ``--max-hold`` whatever the 4.15/4.16 admission webhook does.

The ``openshift-4.15`` overlay, in a namespace of the test's own (``test_webhook.py``'s
set-up), with ``drain-guard webhook`` on loopback behind a small HTTPS proxy that can answer
late: the ValidatingWebhookConfiguration names the proxy, which relays each review to the
webhook after the delay the test sets. The agent runs as its DaemonSet's pod, with a token
bound to it, on a Node labelled ``drain-guard.io/block-drains`` (a hold that only max-hold
ends). It holds the drain while the webhook answers; then the webhook

- hangs: its process stopped with SIGSTOP (connections accepted, never answered),
- is slow inside its 5 s ``timeoutSeconds`` (2.5 s) or beyond it (7 s),
- refuses connections (the proxy's port closed),

and the hold must be released at max-hold, with outcome ``expired``, no later than the
issue's bound: max-hold plus 30 s from ``held-since``. With the agent's 2 s write timeout
of before, only the last case released: the API server cancelled every abandoned release
before the release entry's ``failurePolicy: Ignore`` could apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client, bound_kubeconfig, own_namespace, unique
from tests.controlplane.nodes import mcd_request, wait_annotation
from tests.controlplane.test_webhook import (
    LAST_APPLIED,
    REQUEST,
    _agent_pod,
    _create,
    _node,
    _pointed_at,
    install_with_webhook,
)
from tests.helpers import IMAGE_A, reap, spawn

MAX_HOLD = timedelta(seconds=8)
#: The issue's bound: no hold older than max-hold plus this, counted from held-since.
BOUND = timedelta(seconds=30)


@dataclass
class SlowProxy:
    """HTTPS in front of the webhook: each review is relayed after ``delay`` seconds."""

    upstream: str
    ca_file: Path
    delay: float = 0.0
    port: int = 0
    #: Reviews the webhook answered through the proxy.
    answered: int = 0
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    async def start(self, cert: ServingCert) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=self.ca_file))
        )
        app = web.Application()
        app.router.add_post("/validate", self._relay)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(cert.cert_file, cert.key_file)
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=serving)
        await site.start()
        server: Any = site._server  # the bound port: aiohttp has no public accessor
        self.port = int(server.sockets[0].getsockname()[1])

    async def _relay(self, request: web.Request) -> web.Response:
        body = await request.read()
        await asyncio.sleep(self.delay)
        assert self._session is not None
        async with self._session.post(
            self.upstream, data=body, headers={"Content-Type": "application/json"}
        ) as answer:
            self.answered += 1
            return web.Response(
                status=answer.status, body=await answer.read(), content_type="application/json"
            )

    async def close(self) -> None:
        """Close the port: the API server's next call is refused."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass
class Install:
    admin: client.ApiClient
    plane: ControlPlane
    namespace: str
    account: str
    daemonset: Any
    webhook: AgentProcess
    proxy: SlowProxy


@pytest.fixture
async def install(control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Install]:
    """The overlay applied in a namespace of its own, its webhook behind the proxy."""
    prefix = unique("p") + "-"
    started: list[AgentProcess] = []
    async with api_client(control_plane.admin_kubeconfig) as admin:
        namespace = await own_namespace(admin, "dg")
        objects, daemonset, webhook, cert = await install_with_webhook(
            control_plane, admin, tmp_path, namespace, prefix
        )
        started.append(webhook)
        proxy = SlowProxy("", cert.ca_file)
        configurations = client.AdmissionregistrationV1Api(admin)
        try:
            await webhook.wait_log(lambda r: str(r.get("message", "")).startswith("listening"))
            proxy.upstream = f"https://127.0.0.1:{webhook.port}/validate"
            await proxy.start(cert)
            (configuration,) = (o for o in objects if o["kind"] == "ValidatingWebhookConfiguration")
            await _create(
                admin,
                _pointed_at(
                    configuration,
                    f"https://127.0.0.1:{proxy.port}/validate",
                    cert.ca_file.read_bytes(),
                    namespace,
                ),
            )
            yield Install(
                admin, control_plane, namespace, f"{prefix}drain-guard", daemonset, webhook, proxy
            )
        finally:
            if webhook.running:
                os.kill(webhook.pid, signal.SIGCONT)
            await reap(started)
            await proxy.close()
            with contextlib.suppress(ApiException):
                await configurations.delete_validating_webhook_configuration(f"{prefix}drain-guard")


async def _annotations(admin: client.ApiClient, node: str) -> dict[str, str]:
    found: Any = await client.CoreV1Api(admin).read_node(node)
    return dict(found.metadata.annotations or {})


async def _until_released(admin: client.ApiClient, node: str, deadline: datetime) -> bool:
    """Whether the MCD's request is back in desiredDrain before ``deadline`` (wall clock)."""
    while datetime.now(UTC) < deadline:
        if (await _annotations(admin, node)).get(protocol.DESIRED_DRAIN) == REQUEST:
            return True
        await asyncio.sleep(0.2)
    return False


#: What the webhook does once the hold is in place.
WEBHOOK_FAULTS = ("hung", "slow-inside", "slow-beyond", "refusing")


@pytest.mark.parametrize("webhook", WEBHOOK_FAULTS)
async def test_a_hold_is_released_at_max_hold_whatever_the_webhook_does(
    install: Install, webhook: str, tmp_path: Path
) -> None:
    await released_behind(install, webhook, tmp_path)


async def released_behind(install: Install, webhook: str, tmp_path: Path) -> str:
    """A hold taken while the webhook answers is released at max-hold once it does
    ``webhook`` (one of WEBHOOK_FAULTS), within the issue's bound (also tests/chaos's
    repeated run); returns the Node's name."""
    admin = install.admin
    core: Any = client.CoreV1Api(admin)
    node = unique("worker")
    await core.create_node(_node(node, drain=LAST_APPLIED))
    await core.patch_node(node, {"metadata": {"labels": {protocol.BLOCK_DRAINS_LABEL: "test"}}})
    pod = await _agent_pod(admin, install.namespace, install.account, install.daemonset, node)
    kubeconfig = await bound_kubeconfig(
        admin,
        install.plane,
        tmp_path / "agent",
        install.namespace,
        install.account,
        pod,
        expiration_seconds=600,
    )
    started: list[AgentProcess] = []
    try:
        agent = await spawn(
            node,
            kubeconfig,
            HostFS(tmp_path / "host", IMAGE_A),
            "--max-hold",
            f"{MAX_HOLD.total_seconds():g}s",
            started=started,
        )
        # The MCD asks; the webhook answers; the agent holds (node-label: only max-hold ends it).
        await mcd_request(admin, node, REQUEST)
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + REQUEST
        )
        since = protocol.parse_rfc3339(held[protocol.HELD_SINCE])
        answered = install.proxy.answered

        if webhook == "hung":
            os.kill(install.webhook.pid, signal.SIGSTOP)
        elif webhook == "slow-inside":
            install.proxy.delay = 2.5
        elif webhook == "slow-beyond":
            install.proxy.delay = 7.0
        else:
            await install.proxy.close()

        released = await _until_released(admin, node, since + MAX_HOLD + BOUND)
        assert released, (
            f"the hold of {REQUEST} outlived max-hold + {BOUND} behind a {webhook} webhook:\n"
            + agent.log_text()
        )
        after = await _annotations(admin, node)
        assert after[protocol.RELEASED] == REQUEST  # an expiry marks the request released
        assert protocol.HELD_DRAIN not in after
        ended = await agent.wait_log(lambda r: r.get("message") == "hold ended")
        assert ended["outcome"] == "expired", ended
        if webhook == "slow-inside":  # the webhook, not the failurePolicy, admitted it
            assert install.proxy.answered > answered
        return node
    finally:
        await reap(started)
