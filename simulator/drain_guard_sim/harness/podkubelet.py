"""The kubelets' part in the seed's cluster on a real API server, which has no kubelet: the end
of a pod's deletion."""

from __future__ import annotations

import contextlib
from pathlib import Path

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.mco import Actor, JsonObj, Timings, read_json
from drain_guard_sim.actors.timeline import Timeline


class PodKubelet(Actor):
    """The kubelets' end of a pod's deletion on ``nodes``: a real API server marks a bound pod
    deleted (an eviction too) and keeps it until its kubelet has stopped it; here it stops at
    once (the pod is deleted with grace period 0)."""

    actor_name = "kubelet"

    def __init__(
        self, kubeconfig: Path, timeline: Timeline, timings: Timings, nodes: list[str]
    ) -> None:
        super().__init__(kubeconfig, timeline, timings)
        self.nodes = set(nodes)

    async def started(self) -> None:
        pods = Informer(self.core.list_pod_for_all_namespaces, self._on_pod)
        self.spawn(pods.run(), "kubelet-pods")
        await pods.synced.wait()

    def _on_pod(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        meta = obj["metadata"]
        bound_here = (obj.get("spec") or {}).get("nodeName") in self.nodes
        if etype != "DELETED" and meta.get("deletionTimestamp") and bound_here:
            self.spawn(self._stopped(meta["namespace"], meta["name"]), f"stop-{meta['name']}")

    async def _stopped(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiException):  # gone already
            await read_json(
                await self.core.delete_namespaced_pod(
                    name, namespace, grace_period_seconds=0, _preload_content=False
                )
            )
