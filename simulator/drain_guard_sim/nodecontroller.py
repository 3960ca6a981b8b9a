"""The machine-config-controller's render and node controllers for one pool, as in MCO 4.15.

Render (pkg/controller/render): the pool's MachineConfigs (label ``…/role=<pool>``) are merged
into ``rendered-<pool>-<hash>``, a MachineConfig of its own, and the pool's
``spec.configuration.name`` points at it.

Node controller (pkg/controller/node/node_controller.go, ``syncMachineConfigPool``): nodes whose
desired config or desired image differ from the pool's are candidates; ``maxUnavailable`` (1)
minus the unavailable nodes is the capacity; candidates are taken oldest first; each chosen node
gets ``desiredConfig`` = the pool's config and ``desiredImage`` = the pool's
``newestImageEquivalentConfig`` (``LayeredNodeState.SetDesiredStateFromPool``). A node counts as
unavailable only when it is busy *and* its desired image already equals the pool's, and a
cordoned node is never a candidate — both as in 4.15.

The 4.15 bug: the controller gates a layered pool on its ``BuildSuccess`` condition, which it
can still see True from the previous build when it acts on a new rendered config, so the node
gets the new config with the old image while the new image is being built (the seed report
reproduces it "Always"). ``wait_for_build=False`` (the default) makes that race deterministic:
an in-progress build does not hold the rollout back. ``True`` gives the fixed behaviour.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.mco import (
    CURRENT_CONFIG,
    CURRENT_IMAGE,
    DESIRED_CONFIG,
    DESIRED_IMAGE,
    GROUP_MCO,
    LAYERING_LABEL,
    POOL_IMAGE,
    ROLE_LABEL,
    STATE,
    STATE_DEGRADED,
    STATE_DONE,
    Actor,
    Informer,
    JsonObj,
    Timings,
    WorkQueue,
    annotation_patch,
    annotations_of,
    labels_of,
    read_json,
)
from drain_guard_sim.timeline import Timeline

__all__ = ["NodeController", "condition_true", "rendered_name"]


def rendered_name(pool: str, configs: list[JsonObj]) -> str:
    """``rendered-<pool>-<md5 of the merged inputs>``, like the render controller's names."""
    merged = sorted(
        (c["metadata"]["name"], json.dumps(c.get("spec") or {}, sort_keys=True)) for c in configs
    )
    digest = hashlib.md5(json.dumps(merged).encode(), usedforsecurity=False).hexdigest()
    return f"rendered-{pool}-{digest}"


def condition_true(pool: JsonObj, ctype: str) -> bool:
    for cond in (pool.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return bool(cond.get("status") == "True")
    return False


def _node_ready(node: JsonObj) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return False
    return True


class NodeController(Actor):
    """Render + node controller for the ``pool`` MachineConfigPool."""

    actor_name = "node-controller"

    def __init__(
        self,
        kubeconfig: Path,
        timeline: Timeline,
        timings: Timings,
        pool: str = "worker",
        max_unavailable: int = 1,
        wait_for_build: bool = False,
    ) -> None:
        super().__init__(kubeconfig, timeline, timings)
        self.pool_name = pool
        self.max_unavailable = max_unavailable
        self.wait_for_build = wait_for_build
        self.queue = WorkQueue(
            timings.s(timings.rate_limit_base), timings.s(timings.rate_limit_max)
        )
        self.nodes: Informer | None = None
        self.pools: Informer | None = None
        self.configs: Informer | None = None

    async def started(self) -> None:
        c = self.custom
        self.nodes = Informer(self.core.list_node, self._on_change)
        self.pools = Informer(
            c.list_cluster_custom_object,
            self._on_change,
            {"group": GROUP_MCO, "version": "v1", "plural": "machineconfigpools"},
        )
        self.configs = Informer(
            c.list_cluster_custom_object,
            self._on_change,
            {"group": GROUP_MCO, "version": "v1", "plural": "machineconfigs"},
        )
        for inf, name in ((self.nodes, "nodes"), (self.pools, "pools"), (self.configs, "mcs")):
            self.spawn(inf.run(), f"node-controller-{name}")
            await inf.synced.wait()
        self.spawn(self._worker(), "node-controller-worker")
        self.queue.add(self.pool_name)

    async def stop(self) -> None:
        self.queue.shutdown()
        await super().stop()

    def _on_change(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        self.queue.add_after(self.pool_name, self.timings.s(self.timings.node_controller_delay))

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self._render()
                await self._sync_pool()
                self.queue.forget(key)
            except ApiException as exc:
                self.log(None, f"Error syncing machineconfigpool {key}: {exc.status} {exc.reason}")
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)

    # -- render ----------------------------------------------------------------------------

    async def _render(self) -> None:
        assert self.configs is not None
        assert self.pools is not None
        pool = self.pools.cache.get(self.pool_name)
        if pool is None:
            return
        inputs = [
            mc
            for mc in self.configs.cache.values()
            if labels_of(mc).get(ROLE_LABEL) == self.pool_name
            and not mc["metadata"]["name"].startswith("rendered-")
        ]
        if not inputs:
            return
        name = rendered_name(self.pool_name, inputs)
        if name not in self.configs.cache:
            body = {
                "apiVersion": f"{GROUP_MCO}/v1",
                "kind": "MachineConfig",
                "metadata": {
                    "name": name,
                    "annotations": {
                        "machineconfiguration.openshift.io/generated-by-controller-version": "sim"
                    },
                },
                "spec": {"config": {"ignition": {"version": "3.4.0"}}},
            }
            try:
                await read_json(
                    await self.custom.create_cluster_custom_object(
                        GROUP_MCO, "v1", "machineconfigs", body, _preload_content=False
                    )
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise
            self.log(None, f"Generated machineconfig {name} from {len(inputs)} configs")
        current = ((pool.get("spec") or {}).get("configuration") or {}).get("name")
        if current != name:
            await self._patch_pool({"spec": {"configuration": {"name": name}}})
            self.log(None, f"Pool {self.pool_name}: now targeting: {name}")

    async def _patch_pool(self, body: JsonObj, status: bool = False) -> None:
        fn = (
            self.custom.patch_cluster_custom_object_status
            if status
            else self.custom.patch_cluster_custom_object
        )
        await read_json(
            await fn(
                GROUP_MCO,
                "v1",
                "machineconfigpools",
                self.pool_name,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )

    # -- node controller -------------------------------------------------------------------

    async def _sync_pool(self) -> None:
        assert self.pools is not None
        assert self.nodes is not None
        pool = self.pools.cache.get(self.pool_name)
        if pool is None:
            return
        target = ((pool.get("spec") or {}).get("configuration") or {}).get("name")
        if not target:
            return
        layered = LAYERING_LABEL in labels_of(pool)
        image = annotations_of(pool).get(POOL_IMAGE, "") if layered else ""
        if layered:
            if not image:
                return
            if condition_true(pool, "BuildFailed"):
                self.log(
                    None, f"Layered pool {self.pool_name} encountered an error: image build failed"
                )
                return
            building = condition_true(pool, "BuildPending") or condition_true(pool, "Building")
            if self.wait_for_build and building:
                return
        selector = (pool.get("spec") or {}).get("nodeSelector", {}).get("matchLabels") or {}
        nodes = sorted(
            (
                n
                for n in self.nodes.cache.values()
                if all(labels_of(n).get(k) == v for k, v in selector.items())
            ),
            key=lambda n: (n["metadata"].get("creationTimestamp") or "", n["metadata"]["name"]),
        )

        def desired_equal(n: JsonObj) -> bool:
            ann = annotations_of(n)
            return ann.get(DESIRED_CONFIG) == target and ann.get(DESIRED_IMAGE, "") == image

        def done(n: JsonObj) -> bool:
            ann = annotations_of(n)
            return (
                ann.get(CURRENT_CONFIG) == ann.get(DESIRED_CONFIG) and ann.get(STATE) == STATE_DONE
            )

        def unavailable(n: JsonObj) -> bool:
            busy = not _node_ready(n) or (
                not done(n) and annotations_of(n).get(STATE) != STATE_DEGRADED
            )
            return busy and annotations_of(n).get(DESIRED_IMAGE, "") == image

        capacity = self.max_unavailable - sum(1 for n in nodes if unavailable(n))
        candidates = [n for n in nodes if not desired_equal(n) and _node_ready(n)]
        if capacity > 0 and candidates:
            for node in candidates[:capacity]:
                await self._set_desired(node["metadata"]["name"], target, image)
        await self._sync_status(pool, nodes, target, image)

    async def _set_desired(self, name: str, config: str, image: str) -> None:
        node = await self.get_node(name)
        values: dict[str, str | None] = {DESIRED_CONFIG: config, DESIRED_IMAGE: image or None}
        patch = annotation_patch(annotations_of(node), values)
        if patch is None:
            return
        line = f"MachineConfig {config} / Image {image}" if image else f"MachineConfig {config}"
        self.log(name, f"Pool {self.pool_name}: Setting node {name} target to {line}")
        await self.patch_node(name, patch)

    async def _sync_status(
        self, pool: JsonObj, nodes: list[JsonObj], target: str, image: str
    ) -> None:
        def updated(n: JsonObj) -> bool:
            ann = annotations_of(n)
            return (
                ann.get(CURRENT_CONFIG) == target
                and ann.get(CURRENT_IMAGE, "") == image
                and ann.get(STATE) == STATE_DONE
            )

        count = sum(1 for n in nodes if updated(n))
        status: JsonObj = {
            "machineCount": len(nodes),
            "updatedMachineCount": count,
            "readyMachineCount": count,
            "degradedMachineCount": sum(
                1 for n in nodes if annotations_of(n).get(STATE) == STATE_DEGRADED
            ),
        }
        if count == len(nodes):
            status["configuration"] = {"name": target}
        old = pool.get("status") or {}
        if any(old.get(k) != v for k, v in status.items()):
            await self._patch_pool({"status": status}, status=True)
