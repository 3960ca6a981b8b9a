"""Issue 34: no pod can take the 4.15/4.16 admission webhook down with a flood of bodies.

The ``openshift-4.15`` overlay applied on the real kube-apiserver, its webhook on loopback
(``test_webhook_release.py``'s set-up, the relay without delay). Fifty connections of the
test's own send the webhook's port oversized AdmissionReview bodies, some with their length
declared, some chunked, reconnecting as each is refused, as a pod that reached the port could
(the NetworkPolicy keeps pods out on a cluster; here nothing does). Meanwhile the agent's
writes, made with a token bound to its pod, must be decided by the webhook itself within the
entry's ``timeoutSeconds``: its own Node's hold allowed, another Node's write refused by
``agents.drain-guard.io`` and never ``failed calling webhook``; and the webhook's peak
resident memory stays under the Deployment's limit. Before the fix (3 MiB bodies accepted and
parsed on the event loop) the writes failed on the webhook's timeout and the memory passed the
limit. Loopback only; the flood stops and its connections close before the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard.protocol import Reason
from tests.controlplane.helpers import api_client, bound_kubeconfig, unique
from tests.controlplane.test_webhook import (
    JSON_PATCH,
    LAST_APPLIED,
    REQUEST,
    _agent_pod,
    _node,
    _rendered,
    _status,
)
from tests.controlplane.test_webhook_release import Install, install
from tests.deploy.tools import Obj

__all__ = ["install"]  # the fixture, from test_webhook_release

CONNECTIONS = 50
#: Each body a valid JSON array of empty arrays, as the issue's: cheap to send, dear to parse.
BODY_BYTES = 3_000_000
CHUNK = 64 * 1024
DRAIN = protocol.annotation_path(protocol.DESIRED_DRAIN)
#: The MCD's requests the agent holds, one a round (none is lastAppliedDrain: that one no
#: agent may hold).
REQUESTS = [f"{REQUEST}{n}" for n in ("", "1", "2")]


def _bomb(size: int) -> bytes:
    """A JSON array of ``size`` bytes whose every element is an empty array."""
    count = (size - 2) // 3
    body = b"[" + b"[]," * count
    return body[:-1] + b" " * (size - len(body)) + b"]"


@dataclass
class Flood:
    """Hostile connections to the webhook's port, counting what it refused."""

    port: int
    ca_file: Path
    sent: int = 0
    answered: int = 0
    refused: int = 0
    #: Set once as many bodies were sent whole or cut off by an answer as there are
    #: connections: the flood is under way.
    underway: asyncio.Event = field(default_factory=asyncio.Event)

    async def connection(self, chunked: bool, stop: asyncio.Event) -> None:
        context = ssl.create_default_context(cafile=self.ca_file)
        body = _bomb(BODY_BYTES)
        framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % len(body)
        while not stop.is_set():
            with contextlib.suppress(OSError, ssl.SSLError, asyncio.IncompleteReadError):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, ssl=context, server_hostname="127.0.0.1"
                )
                try:
                    writer.write(
                        b"POST /validate HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Type: application/json\r\n" + framing + b"\r\n\r\n"
                    )
                    answer = asyncio.ensure_future(reader.readline())
                    for start in range(0, len(body), CHUNK):
                        if answer.done() or stop.is_set():
                            break
                        piece = body[start : start + CHUNK]
                        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                        await writer.drain()
                    self.sent += 1
                    if self.sent >= CONNECTIONS:
                        self.underway.set()
                    status = await answer
                    self.answered += 1
                    self.refused += status.split()[1:2] in ([b"413"], [b"408"])
                finally:
                    writer.close()
                    with contextlib.suppress(OSError, ssl.SSLError):
                        await writer.wait_closed()


def _peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def _memory_limit_mib(objects: list[Obj]) -> float:
    (deployment,) = (o for o in objects if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    limit = str(container["resources"]["limits"]["memory"])
    assert limit.endswith("Mi"), limit
    return float(limit.removesuffix("Mi"))


async def test_the_webhook_answers_the_api_server_through_a_flood_of_oversized_bodies(
    install: Install, tmp_path: Path
) -> None:
    admin = install.admin
    core: Any = client.CoreV1Api(admin)
    own, other = unique("worker"), unique("worker")
    for name in (own, other):
        await core.create_node(_node(name))
    pod = await _agent_pod(admin, install.namespace, install.account, install.daemonset, own)
    kubeconfig = await bound_kubeconfig(
        admin,
        install.plane,
        tmp_path / "agent",
        install.namespace,
        install.account,
        pod,
        expiration_seconds=600,
    )
    limit = _memory_limit_mib(_rendered(tmp_path / "again", install.namespace, "x-"))
    assert install.webhook.port is not None
    flood = Flood(install.webhook.port, install.proxy.ca_file)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(flood.connection(i % 2 == 1, stop)) for i in range(CONNECTIONS)]
    try:
        await flood.underway.wait()
        async with api_client(kubeconfig) as agent:
            nodes: Any = client.CoreV1Api(agent)
            for drain in REQUESTS:
                # The MCD asks, the agent holds; and it writes another Node: decided by the
                # webhook, each within the entry's timeout, or failed by its failurePolicy.
                now = datetime.now(UTC)
                ends = now + timedelta(minutes=45)
                hold = protocol.hold_patch(
                    drain, LAST_APPLIED, "0", [Reason.MANUAL], now, "flood", expires=ends
                )
                await core.patch_node(
                    own, {"metadata": {"annotations": {protocol.DESIRED_DRAIN: drain}}}
                )
                status, message = await _status(
                    nodes.patch_node(own, hold, _content_type=JSON_PATCH)
                )
                assert status == 200, message
                forged = [{"op": "replace", "path": DRAIN, "value": "hold-" + drain}]
                status, message = await _status(
                    nodes.patch_node(other, forged, _content_type=JSON_PATCH)
                )
                assert status == 403, message
                assert "failed calling webhook" not in message, message
                assert "agents.drain-guard.io" in message, message
        answered, refused = flood.answered, flood.refused
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert refused == answered, (refused, answered)  # none parsed: each refused unread
    peak = _peak_rss_mib(install.webhook.pid)
    assert peak < limit, f"the webhook's peak RSS {peak:.0f} MiB is over its {limit:g}Mi limit"
