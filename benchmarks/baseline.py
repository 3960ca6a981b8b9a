"""The obvious alternative a user would script: poll the Node every few seconds and hold.

``kubectl get node`` in a loop, through the same client and the same decision as the agent, so
that the comparison isolates one thing: polling versus watching. Each poll GETs the Node; when
a drain request is pending the script also lists the node's pods (``kubectl get pods
--field-selector spec.nodeName=…``) for the build-pod guard, then applies the same
compare-and-swap JSON Patch the agent would.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from drain_guard import guards, protocol
from drain_guard.core.pods import Pod
from drain_guard.core.selectors import default_build_pod_selectors
from drain_guard.decision.decide import decide
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Applied, Kube
from drain_guard.kube.credentials import load_api_client
from drain_guard.node import host

MAX_HOLD = timedelta(minutes=45)


class Poller:
    """Polls one Node every ``interval`` seconds and holds its drain requests like the agent."""

    def __init__(
        self, node: str, kubeconfig: Path, host_root: Path, cmdline_file: Path, interval: float
    ) -> None:
        self.node = node
        self.kubeconfig = kubeconfig
        self.host_root = host_root
        self.cmdline_file = cmdline_file
        self.interval = interval
        self.holds = 0
        # The guards of an agent with default settings (``guards.registry``).
        self._guards: tuple[guards.Guard, ...] = (
            guards.BuildPodGuard(default_build_pod_selectors()),
            guards.NoopImageGuard(),
            guards.ManualGuard(),
            guards.NodeLabelGuard(),
        )
        self._task: asyncio.Task[None] | None = None
        self._kube: Kube | None = None

    async def start(self) -> None:
        self._kube = Kube(await load_api_client(str(self.kubeconfig)))
        self._task = asyncio.create_task(self._loop(), name=f"poller-{self.node}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._kube is not None:
            await self._kube.close()

    async def _loop(self) -> None:
        assert self._kube is not None
        booted = await asyncio.to_thread(
            host.read_booted_image, str(self.host_root), str(self.cmdline_file)
        )
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            with contextlib.suppress(KubeError):  # a script would try again at the next tick
                await self._poll(self._kube, booted)
            next_at += self.interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))

    async def _poll(self, kube: Kube, booted: guards.BootedImage) -> None:
        node = await kube.get_node(self.node)
        if node is None:
            return
        ann = node.annotations
        desired = ann.get(protocol.DESIRED_DRAIN)
        request = protocol.parse_drain_request(desired)
        if request.verb is not protocol.Verb.DRAIN or desired == ann.get(
            protocol.LAST_APPLIED_DRAIN
        ):
            return
        pods = await self._pods(kube)
        view = guards.NodeView(
            name=node.name,
            annotations=ann,
            pods=pods,
            booted=booted,
            now=datetime.now(UTC),
            resource_version=node.resource_version,
        )
        decision = decide(view, self._guards, MAX_HOLD)
        held = decision.hold_written
        if decision.patch and held is not None and held.starts:
            result = await kube.patch_node_json(node.name, decision.patch)
            if isinstance(result, Applied):
                self.holds += 1

    async def _pods(self, kube: Kube) -> tuple[Pod, ...]:
        core: Any = kube.core
        resp = await core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node}", _preload_content=False
        )
        async with resp:
            body: dict[str, Any] = await resp.json(content_type=None)
        return tuple(Pod.from_dict(item) for item in body.get("items") or ())
