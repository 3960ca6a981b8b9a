"""The agent's API clients never read the environment's proxy settings (issue 36): a proxy is
taken from the kubeconfig (``proxy-url``) only.

aiohttp with ``trust_env=True`` (the library's default) looks the proxy variables up, and reads
``~/.netrc``, in a thread on every request; it would also send the agent's bearer token through
whatever proxy the environment names. The proxy here is a real forwarding HTTP proxy on
loopback that records what it carries: with the variables set, the agent must still talk to
the API server directly; with ``proxy-url`` in its kubeconfig, through the proxy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from drain_guard.kube.client import Kube
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess
from tests.helpers import AGENT_USER, NODE, spawn


class ForwardingProxy:
    """A plain-HTTP forwarding proxy on loopback that records each request line it forwards."""

    def __init__(self) -> None:
        self.forwarded: list[str] = []
        self.url = ""

    async def _forward(self, request: web.Request) -> web.Response:
        self.forwarded.append(f"{request.method} {request.url}")
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.request(
                request.method, request.url, headers=request.headers, data=await request.read()
            ) as upstream,
        ):
            return web.Response(
                status=upstream.status,
                body=await upstream.read(),
                content_type=upstream.content_type,
            )

    async def __aenter__(self) -> ForwardingProxy:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardingProxy]:
    async with ForwardingProxy() as started:
        yield started


def _proxy_environment(url: str) -> dict[str, str]:
    """Every variable aiohttp would read, naming ``url``, and nothing exempt from it."""
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")
    env = {name: url for name in names} | {name.lower(): url for name in names}
    return env | {"NO_PROXY": "", "no_proxy": ""}


async def test_the_agent_ignores_the_environments_proxy_variables(
    api: SimApiServer,
    host: HostFS,
    tmp_path: Path,
    proxy: ForwardingProxy,
    agents: list[AgentProcess],
) -> None:
    kubeconfig = api.kubeconfig(AGENT_USER, tmp_path / "kubeconfig")
    env = _proxy_environment(proxy.url)
    agent = await spawn(NODE, kubeconfig, host, started=agents, env=env)  # lists, watches
    status, _ = await agent.http("/healthz")
    assert status == 200
    assert proxy.forwarded == []
    assert any(user == AGENT_USER for _, user, *_ in api.request_log)


async def test_a_proxy_url_in_the_kubeconfig_is_used(
    api: SimApiServer,
    tmp_path: Path,
    proxy: ForwardingProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in _proxy_environment("http://127.0.0.1:9").items():  # a closed port
        monkeypatch.setenv(name, value)
    kubeconfig = api.kubeconfig(AGENT_USER, tmp_path / "kubeconfig")
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["proxy-url"] = proxy.url
    kubeconfig.write_text(yaml.safe_dump(config))
    kube = await Kube.connect(str(kubeconfig))
    try:
        node = await kube.get_node(NODE)
    finally:
        await kube.close()
    assert node is not None
    assert node.name == NODE
    assert proxy.forwarded == [f"GET {api.url}/api/v1/nodes/{NODE}"]
