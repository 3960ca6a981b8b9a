"""The ReplicaSet controller's part in the seed's scenario: a Deployment's pod recreated on a
schedulable Node after a drain evicted it (as the machine-os-builder's was in the seed)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.mco import Actor, JsonObj, Timings, read_json
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.harness.seedobjects import READY, pod_object, suffix


class ReplicaSetController(Actor):
    """kube-controller-manager's ReplicaSet controller (and the kubelet) in miniature.

    A deleted ReplicaSet-owned pod comes back, Running, on a schedulable node, preferably
    another one: what happens to the image registry or machine-os-builder when drained.
    """

    actor_name = "replicaset-controller"

    def __init__(self, kubeconfig: Path, timeline: Timeline, timings: Timings) -> None:
        super().__init__(kubeconfig, timeline, timings)
        self.nodes: Informer | None = None
        self.pods: Informer | None = None
        self._serial = itertools.count()

    async def started(self) -> None:
        self.nodes = Informer(self.core.list_node)
        self.pods = Informer(self.core.list_pod_for_all_namespaces, self._on_pod)
        for inf, name in ((self.nodes, "nodes"), (self.pods, "pods")):
            self.spawn(inf.run(), f"rs-{name}")
            await inf.synced.wait()

    def _on_pod(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        owners = obj["metadata"].get("ownerReferences") or []
        if etype == "DELETED" and any(o.get("kind") == "ReplicaSet" for o in owners):
            self.spawn(self._replace(obj), f"rs-replace-{obj['metadata']['name']}")

    async def _replace(self, old: JsonObj) -> None:
        assert self.nodes is not None
        await asyncio.sleep(self.timings.s(self.timings.replicaset_delay))
        old_node = old["spec"].get("nodeName")
        schedulable = sorted(
            name
            for name, n in self.nodes.cache.items()
            if not (n.get("spec") or {}).get("unschedulable")
        )
        if not schedulable:
            return
        node = next((n for n in schedulable if n != old_node), schedulable[0])
        # The old pod's owner, uid and all: a real garbage collector deletes a pod whose owner
        # reference names no object.
        owner_ref = old["metadata"]["ownerReferences"][0]
        owner = owner_ref["name"]
        ns = old["metadata"]["namespace"]
        name = f"{owner}-{suffix(owner, str(next(self._serial)), node)}"
        pod = pod_object(ns, name, node, old["metadata"].get("labels") or {}, owner_ref)
        await read_json(await self.core.create_namespaced_pod(ns, pod, _preload_content=False))
        await read_json(
            await self.core.patch_namespaced_pod_status(
                name,
                ns,
                {"status": {"phase": "Running", "conditions": READY}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )
        self.log(node, f"ReplicaSet {ns}/{owner}: created pod {name} on {node}")
