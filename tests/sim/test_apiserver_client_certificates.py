"""Client certificates in the simulator, as kube-apiserver takes them (its x509 authenticator:
the subject's CN is the user, each O a group, verified on every request), used by kubectl
through a kubeconfig naming the certificate and key files, as the kubelet's does.

A node's certificate makes it that node's identity (the Node authorizer and NodeRestriction);
a refused one (``refuse_certificate``: expired, for the API server) is a 401 on the next
request, also on a connection already open; a client without one still uses its token.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from drain_guard_sim.apiserver import nodeauth
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.tls import ServingCert
from tests.helpers import require_tool

NODE_USER = "system:node:worker-0"


@pytest.fixture
async def tls_sim(tmp_path: Path) -> AsyncIterator[SimApiServer]:
    async with SimApiServer(tls=ServingCert.generate(tmp_path / "tls")) as server:
        for name in ("worker-0", "worker-1"):
            server.create("nodes", {"metadata": {"name": name}, "spec": {}})
        yield server


def _pair(sim: SimApiServer, path: Path) -> Path:
    path.write_bytes(sim.client_certificate(NODE_USER, [nodeauth.NODES_GROUP]))
    path.chmod(0o600)
    return path


def _kubeconfig(sim: SimApiServer, pair: Path, path: Path) -> Path:
    """A kubeconfig as the kubelet's: the certificate and key by path, one file for both."""
    config = yaml.safe_load(sim.kubeconfig("unused", path).read_text())
    config["users"][0]["user"] = {"client-certificate": str(pair), "client-key": str(pair)}
    path.write_text(yaml.safe_dump(config))
    return path


async def _kubectl(kubeconfig: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        require_tool("kubectl"),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_kubectl_with_a_node_certificate_is_that_node(
    tls_sim: SimApiServer, tmp_path: Path
) -> None:
    kubeconfig = _kubeconfig(tls_sim, _pair(tls_sim, tmp_path / "pair.pem"), tmp_path / "kc")
    patch = ["--type", "merge", "-p", '{"metadata":{"annotations":{"probe":"x"}}}']
    code, out = await _kubectl(kubeconfig, "patch", "node", "worker-0", *patch)
    assert code == 0, out
    writes = [w for w in tls_sim.writes("nodes") if w.obj["metadata"]["name"] == "worker-0"]
    assert writes[-1].user == NODE_USER
    code, out = await _kubectl(kubeconfig, "patch", "node", "worker-1", *patch)
    assert code == 1
    assert 'node "worker-0" is not allowed to modify node "worker-1"' in out


async def test_a_refused_certificate_is_a_401_on_an_open_connection_too(
    tls_sim: SimApiServer, tmp_path: Path
) -> None:
    pair = _pair(tls_sim, tmp_path / "pair.pem")
    assert tls_sim.tls is not None
    context = ssl.create_default_context(cafile=str(tls_sim.tls.ca_file))
    context.load_cert_chain(pair, pair)
    connector = aiohttp.TCPConnector(ssl=context, limit=1)  # one connection, kept alive
    async with aiohttp.ClientSession(base_url=tls_sim.url, connector=connector) as session:
        async with session.get("/api/v1/nodes/worker-0") as resp:
            assert resp.status == 200
        tls_sim.refuse_certificate(pair.read_bytes())
        async with session.get("/api/v1/nodes/worker-0") as resp:
            assert resp.status == 401
            assert (await resp.json())["reason"] == "Unauthorized"
    code, out = await _kubectl(_kubeconfig(tls_sim, pair, tmp_path / "kc"), "get", "nodes")
    assert code == 1
    assert "You must be logged in to the server" in out  # kubectl's words for a 401


async def test_a_client_without_a_certificate_uses_its_token(tls_sim: SimApiServer) -> None:
    assert tls_sim.tls is not None
    context = ssl.create_default_context(cafile=str(tls_sim.tls.ca_file))
    headers = {"Authorization": f"Bearer {tls_sim.add_node_user('worker-1')}"}
    async with (
        aiohttp.ClientSession(base_url=tls_sim.url, headers=headers) as session,
        session.get("/api/v1/nodes/worker-0", ssl=context) as resp,
    ):
        assert resp.status == 200
    assert tls_sim.request_log[-1][1] == "system:node:worker-1"
