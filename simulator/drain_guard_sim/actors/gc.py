"""kube-controller-manager's garbage collector, for the dependents the simulator needs.

The real collector (pkg/controller/garbagecollector) deletes an object once none of its
ownerReferences names an existing owner (same namespace, same uid). It confirms absence with
a live read of the owner, not from its cache, so a dependent created right after its owner is
not collected by mistake. Here: PodDisruptionBudgets owned by Pods, the dependents drain-guard's
shield creates, so that a budget goes with its pod even when the agent is gone.

Hook: ``SimCluster`` starts it with the other actors; a test without ``SimCluster`` starts one
itself::

    gc = GarbageCollector(api.kubeconfig(GC_USER, path), Timeline(), Timings())
    await gc.start(); ...; await gc.stop()
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.mco import Actor, JsonObj, Timings, read_json
from drain_guard_sim.actors.timeline import Timeline

__all__ = ["GC_USER", "GarbageCollector"]

GC_USER = "system:serviceaccount:kube-system:generic-garbage-collector"


class GarbageCollector(Actor):
    """Deletes PodDisruptionBudgets whose owner Pods are all gone (background propagation)."""

    actor_name = "garbage-collector"

    def __init__(self, kubeconfig: Path, timeline: Timeline, timings: Timings) -> None:
        super().__init__(kubeconfig, timeline, timings)
        self.pods: Informer | None = None
        self.budgets: Informer | None = None
        self._dirty = asyncio.Event()
        self.collected: list[str] = []  # namespace/name of each budget deleted

    async def started(self) -> None:
        self.pods = Informer(self.core.list_pod_for_all_namespaces, self._on_change)
        self.budgets = Informer(
            self.policy.list_pod_disruption_budget_for_all_namespaces, self._on_change
        )
        for inf, name in ((self.pods, "pods"), (self.budgets, "pdbs")):
            self.spawn(inf.run(), f"gc-{name}")
            await inf.synced.wait()
        self.spawn(self._worker(), "gc-worker")
        self._dirty.set()

    @property
    def policy(self) -> Any:
        return k8s.PolicyV1Api(self.api)

    def _on_change(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        self._dirty.set()

    async def _worker(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self._sweep()

    async def _sweep(self) -> None:
        assert self.pods is not None
        assert self.budgets is not None
        live = {
            (p["metadata"].get("namespace"), p["metadata"].get("uid"))
            for p in self.pods.cache.values()
        }
        for budget in list(self.budgets.cache.values()):
            meta = budget["metadata"]
            ns = meta.get("namespace")
            owners = [o for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"]
            if not owners or len(owners) != len(meta.get("ownerReferences") or ()):
                continue  # no owners, or owners of kinds this collector does not model
            if any((ns, o.get("uid")) in live for o in owners):
                continue
            for owner in owners:
                if await self._owner_exists(ns, owner):
                    break
            else:
                await self._collect(budget)

    async def _owner_exists(self, namespace: str, owner: JsonObj) -> bool:
        """The live read the real collector makes: absent means 404 or another uid."""
        try:
            pod = await read_json(
                await self.core.read_namespaced_pod(
                    owner.get("name", ""), namespace, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return bool(pod["metadata"].get("uid") == owner.get("uid"))

    async def _collect(self, budget: JsonObj) -> None:
        meta = budget["metadata"]
        try:
            await read_json(
                await self.policy.delete_namespaced_pod_disruption_budget(
                    meta["name"],
                    meta["namespace"],
                    body={"preconditions": {"uid": meta["uid"]}},
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            return
        key = f"{meta['namespace']}/{meta['name']}"
        self.collected.append(key)
        self.log(None, f"garbage-collected PodDisruptionBudget {key}: its owner pod is gone")
