"""Node writers besides MCO: the kubelet's status reports and other controllers' labels.

On a real cluster MCO's actors are not the only ones writing Nodes, and MCO 4.15's drain
controller queues a node 5 s after *any* Node update (4.16 from PR 4484 of 2024-07-27 and
later only when ``desiredDrain`` changes), and every MCO node controller queues the pool when
a node's labels change. So a write by someone else in the 5 s before a drain request moves
the cordon earlier, and a label change can put a node-controller sync anywhere.

- :class:`Kubelet` reports its node's status every ``nodeStatusReportFrequency`` (5 min in
  the kubelet.yaml MCO renders for every pool; it also reports at once on a change, which
  the simulated nodes never have), a PATCH of ``nodes/status`` refreshing the Ready
  condition's ``lastHeartbeatTime``, as ``system:node:<name>``, first at a random phase;
- :func:`label_node` is another controller's label write (node-feature-discovery's
  ``nfd-master`` here).
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from pathlib import Path

from drain_guard_sim.actors.mco import Actor, JsonObj, Timings, read_json
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.timestamps import rfc3339

__all__ = ["NFD_USER", "Kubelet", "label_patch"]

NFD_USER = "system:serviceaccount:openshift-nfd:nfd-master"


def label_patch(key: str, value: str) -> JsonObj:
    """The strategic-merge patch a controller labelling a node sends."""
    return {"metadata": {"labels": {key: value}}}


class Kubelet(Actor):
    """The status reports of ``node``'s kubelet (only what writes the Node)."""

    actor_name = "kubelet"

    def __init__(
        self, kubeconfig: Path, timeline: Timeline, timings: Timings, node: str, seed: int
    ) -> None:
        super().__init__(kubeconfig, timeline, timings)
        self.node_name = node
        self._rng = random.Random(f"{seed}:{node}")

    async def started(self) -> None:
        self.spawn(self._loop(), f"kubelet-{self.node_name}")

    async def _loop(self) -> None:
        period = self.timings.s(self.timings.kubelet_status_report)
        await asyncio.sleep(self._rng.uniform(0, period))
        while True:
            await self.report_status()
            await asyncio.sleep(period)

    async def report_status(self) -> None:
        """One status report: the Ready condition with a fresh heartbeat."""
        node = await self.get_node(self.node_name)
        now = rfc3339(datetime.now(UTC))
        conditions = [
            {**c, "lastHeartbeatTime": now} if c.get("type") == "Ready" else c
            for c in (node.get("status") or {}).get("conditions") or []
        ]
        await read_json(
            await self.core.patch_node_status(
                self.node_name,
                {"status": {"conditions": conditions}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )
