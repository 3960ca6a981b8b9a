"""The agent's watch renewals on the real API server: each watch ends at the
``timeoutSeconds`` the agent asked (``--watch-timeout``), after the watch cache's bookmark
2 s before its end, and the agent resumes it from the bookmark's resourceVersion: no second
LIST, no 410, and an event written across the renewals still reaches it.

What the agent sends is read in kube-apiserver's audit log: the agent's identity is in
``AUDITED_GROUP``, whose every request the control plane logs (verb, URI with its query,
response code), and no other request is logged for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.audit import AUDITED_GROUP
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import unique
from tests.controlplane.nodes import (
    DRAIN_B,
    add_build_pod,
    create_worker,
    mcd_request,
    until,
    wait_annotation,
)
from tests.helpers import IMAGE_A, IMAGE_B, MCO_NS, reap, spawn

#: Seconds between two writes elsewhere (another Node's label, a pod on it): a cluster's
#: other objects, which move the watch caches on so that a bookmark is due (the real server
#: sends one only past what the watch delivered: tests/conformance/test_bookmarks.py).
ELSEWHERE_EVERY = 0.5


@dataclass(frozen=True)
class Request:
    """One of the agent's LISTs or watches of Nodes or pods, as the audit log has it."""

    verb: str
    resource: str
    field_selector: str
    resource_version: int | None
    code: int


def agent_requests(log: Path, user: str) -> list[Request]:
    """The agent's completed or started LISTs and watches of Nodes and pods, in order (a watch
    once: its ``ResponseStarted``, or its ``ResponseComplete`` if it never started)."""
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event["user"]["username"] != user
            or event["verb"] not in ("list", "watch")
            or ref.get("resource") not in ("nodes", "pods")
            or ref.get("subresource")
            or event["auditID"] in seen
        ):
            continue
        seen[event["auditID"]] = (event["stageTimestamp"], event)
    requests = []
    for _, event in sorted(seen.values(), key=lambda pair: pair[0]):
        query = parse_qs(urlsplit(event["requestURI"]).query)
        version = query.get("resourceVersion", [""])[0]
        requests.append(
            Request(
                event["verb"],
                event["objectRef"]["resource"],
                query.get("fieldSelector", [""])[0],
                int(version) if version else None,
                int(event["responseStatus"]["code"]),
            )
        )
    return requests


@contextlib.asynccontextmanager
async def busy_elsewhere(admin: client.ApiClient) -> AsyncIterator[None]:
    """While the block runs, another Node's label and a pod bound to it change every
    ELSEWHERE_EVERY seconds."""
    core = client.CoreV1Api(admin)
    other = await create_worker(admin)

    async def write() -> None:
        for n in itertools.count():
            await core.patch_node(other, {"metadata": {"labels": {"example.com/n": str(n)}}})
            pod: Any = {
                "metadata": {"name": unique("elsewhere")},
                "spec": {"nodeName": other, "containers": [{"name": "c", "image": "x"}]},
            }
            await core.create_namespaced_pod(MCO_NS, pod)
            await asyncio.sleep(ELSEWHERE_EVERY)

    writer = asyncio.create_task(write())
    try:
        yield
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer


def renewed_past_its_start(requests: list[Request], resource: str) -> bool:
    """Whether a watch of ``resource`` was renewed from a resourceVersion past the first
    watch's (the list's): with no event of the agent's own, only a bookmark moves it."""
    versions = [
        r.resource_version for r in requests if r.verb == "watch" and r.resource == resource
    ]
    return any(v is not None and versions[0] is not None and v > versions[0] for v in versions)


async def test_the_agent_renews_its_watches_from_bookmarks_without_listing_again(
    control_plane: ControlPlane, admin: client.ApiClient, tmp_path: Path
) -> None:
    node = await create_worker(admin)
    user = unique("audited-agent")
    kubeconfig = control_plane.user_kubeconfig(
        user, ["system:masters", AUDITED_GROUP], tmp_path / "agent.kubeconfig"
    )
    agents: list[AgentProcess] = []
    try:
        host = HostFS(tmp_path / "host", IMAGE_A)
        await spawn(node, kubeconfig, host, "--watch-timeout", "5s", started=agents)

        async def renewed() -> bool:
            requests = agent_requests(control_plane.audit_log, user)
            return all(renewed_past_its_start(requests, r) for r in ("nodes", "pods"))

        async with busy_elsewhere(admin):
            await until(renewed)
        # A build pod and a drain request while the watches keep renewing: both arrive.
        await add_build_pod(admin, node)
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        assert held[protocol.HOLD_REASONS] == "build-pod"
    finally:
        await reap(agents)
    requests = agent_requests(control_plane.audit_log, user)
    for resource, selector in (
        ("nodes", f"metadata.name={node}"),
        ("pods", f"spec.nodeName={node}"),
    ):
        # The watch's own requests (the confinement self-check lists another Node apart).
        mine = [r for r in requests if r.resource == resource and r.field_selector == selector]
        assert [r.verb for r in mine].count("list") == 1, mine
        assert mine[0].verb == "list"
        watches = [r for r in mine if r.verb == "watch"]
        assert len(watches) >= 2, mine
        assert {r.code for r in mine} == {200}, mine  # never a 410
        versions = [w.resource_version or 0 for w in watches]
        assert 0 not in versions, mine  # every watch from a resourceVersion
        assert versions == sorted(versions), mine
