"""kube.call_api, the one way the agent makes a (non-watch) API call: what its callers (the
controller's and the shield's ``Kube.call``, the list of every list-watch, the Event recorder)
see; and ``Kube.call``, which counts it."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s

from drain_guard import cli
from drain_guard.core.operations import Operation
from drain_guard.kube.call import KubeError, call_api
from drain_guard.kube.client import Kube
from drain_guard.kube.listwatch import WatchCache
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.health import Health
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from tests.helpers import NODE, WAIT


@pytest.fixture
async def core(api: SimApiServer) -> AsyncIterator[k8s.CoreV1Api]:
    async with api.api_client(ADMIN) as api_client:
        yield k8s.CoreV1Api(api_client)


async def test_the_body_of_a_success(core: k8s.CoreV1Api) -> None:
    body = await call_api(core.read_node, NODE)
    assert body["metadata"]["name"] == NODE


async def test_an_error_carries_the_servers_message(core: k8s.CoreV1Api) -> None:
    with pytest.raises(KubeError) as info:
        await call_api(core.read_node, "nope")
    assert (info.value.status, info.value.reason) == (404, 'nodes "nope" not found')
    assert info.value.retry_after is None


async def test_a_429_carries_retry_after(api: SimApiServer, core: k8s.CoreV1Api) -> None:
    api.faults.error(429, retry_after=7, verb="get", resource="nodes", times=1)
    with pytest.raises(KubeError) as info:
        await call_api(core.read_node, NODE)
    assert (info.value.status, info.value.retry_after) == (429, 7.0)


async def test_a_transport_error_is_status_0() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: the connection is refused
        config = k8s.Configuration(host=f"http://127.0.0.1:{port}")
        async with k8s.ApiClient(configuration=config) as api_client:
            with pytest.raises(KubeError) as info:
                await call_api(k8s.CoreV1Api(api_client).read_node, NODE)
    assert info.value.status == 0
    assert "ClientConnectorError" in info.value.reason


async def test_kube_call_counts_an_answer_as_contact_and_anything_else_as_an_error(
    api: SimApiServer,
) -> None:
    metrics = Metrics()
    counters = Health(metrics)
    async with api.api_client(ADMIN) as api_client:
        kube = Kube(api_client, counters)
        core = k8s.CoreV1Api(api_client)
        with pytest.raises(KubeError):
            await kube.call(Operation.POD_GET, core.read_namespaced_pod, "nope", "default")
        assert counters.last_contact is not None  # a 404 is an answer: absent
        counters.last_contact = None
        api.faults.error(500, verb="get", resource="pods", times=1)
        with pytest.raises(KubeError):
            await kube.call(Operation.POD_GET, core.read_namespaced_pod, "nope", "default")
    assert counters.last_contact is None
    errors = metrics.registry.get_sample_value(
        "drain_guard_api_errors_total", {"operation": "pod_get"}
    )
    assert errors == 1


# Issue 14: timeouts gave empty messages ("watch of node failed ()", "error: 0 TimeoutError: ").
# Every error names what failed and why. The request timeout is shortened here; the simulator
# answers later than it.


@pytest.fixture
def short_timeout(api: SimApiServer, monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr("drain_guard.kube.call.REQUEST_TIMEOUT", 0.2)
    monkeypatch.setattr("drain_guard.kube.client.REQUEST_TIMEOUT", 0.2)
    api.faults.latency(3.0, verb="get", resource="nodes")
    api.faults.latency(3.0, verb="list", resource="nodes")
    return 0.2


async def test_a_timeout_names_the_call_and_says_it_timed_out(
    core: k8s.CoreV1Api, short_timeout: float
) -> None:
    with pytest.raises(KubeError) as info:
        await call_api(core.read_node, NODE)
    assert str(info.value) == (
        f"no answer: read_node: TimeoutError: no answer within {short_timeout:g}s"
    )


async def test_a_watch_that_times_out_says_which_call_and_why(
    api: SimApiServer, short_timeout: float, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="drain_guard.kube")
    logged = asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.set()

    seen = Seen(logging.WARNING)
    logging.getLogger("drain_guard.kube").addHandler(seen)
    async with api.api_client(ADMIN) as api_client:
        watch = asyncio.create_task(Kube(api_client).watch_node(NODE, WatchCache()))
        try:
            async with asyncio.timeout(WAIT):
                await logged.wait()
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            logging.getLogger("drain_guard.kube").removeHandler(seen)
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"watch of node {NODE}: API unreachable since ")
    assert (
        f"(list failed: no answer: list_node: TimeoutError: no answer within {short_timeout:g}s)"
        in message
    )


async def test_the_cli_names_the_call_that_timed_out(
    api: SimApiServer,
    short_timeout: float,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_env: None,
) -> None:
    kubeconfig = api.kubeconfig(ADMIN, tmp_path / "kubeconfig")
    argv = ["status", "--node-name", NODE, "--kubeconfig", str(kubeconfig)]
    code = await asyncio.to_thread(cli.main, argv)  # its own event loop; the simulator's runs
    assert (code, capsys.readouterr().err) == (
        1,
        "drain-guard status: error: no answer: read_node: TimeoutError:"
        f" no answer within {short_timeout:g}s\n",
    )
