"""The machine-config-controller's render and node controllers for one pool, MCO 4.15 to 4.19.

Render (pkg/controller/render, its own queue, ``renderDelay`` 5 s after a MachineConfig or
pool event): the pool's MachineConfigs (label ``…/role=<pool>``) are merged into
``rendered-<pool>-<hash>``, a MachineConfig of its own (with their kernel arguments), and the
pool's ``spec.configuration.name`` points at it.

Node controller (pkg/controller/node/node_controller.go, ``syncMachineConfigPool``,
``getAllCandidateMachines``), queued 5 s after any pool event and after a node event that
changes the node's readiness, MCO annotations, labels or taints (``updateNode``; the earliest
pending time is kept): nodes whose desired config or desired image differ from the
pool's are candidates; ``maxUnavailable`` (1) minus the unavailable nodes, minus the nodes
failing to reach this very target (Degraded), is the capacity; candidates are taken oldest
first; each chosen node gets ``desiredConfig`` = the pool's config and ``desiredImage`` = the
pool's image: 4.15's ``newestImageEquivalentConfig`` annotation, 4.16+'s MachineOSConfig's
``status`` (``LayeredNodeState.SetDesiredStateFromPool``). A node
counts as unavailable when it is busy (not ready, or not Done and not failing) and its desired
image already equals the pool's; a cordoned node is never a candidate.

When a layered pool may roll out (``canLayeredPoolContinue``):

- 4.15: while the pool's ``BuildSuccess`` condition is True, which it still is, from the
  previous build, between the render's write and the moment the build controller, which
  starts the build in its handler of that very pool event, marks it pending. The node
  controller's own sync for that event comes 5 s later and waits; a node is targeted with
  the new config and the *old* image only when a sync queued by an earlier event (a node's
  label changed by another controller, say) lands in that gap: the seed's race, lost.
- 4.16, 4.17 and 4.18 before the OCL backport (``4.18-early``): only once the MachineOSBuild
  of the pool's current rendered config (of its MachineOSConfig) is ``Succeeded``, with the
  image the MachineOSConfig names then (4.16/4.17 write that image before they mark the build
  succeeded; 4.18-early after: its residual race);
- 4.18 from the OCL backport (2025-05-27, with OCPBUGS-53408) and 4.19: and only once that
  build's image is the MachineOSConfig's (``MachineOSBuildIsCurrent``).

Which node events queue a sync and which nodes are candidates: ``candidates``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.candidates import node_changed, rollout_targets
from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.machineos import (
    GROUP,
    api_version,
    build_image,
    build_state,
    built_config,
    config_image,
)
from drain_guard_sim.actors.mco import (
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
    JsonObj,
    McoVersion,
    Timings,
    annotation_patch,
    annotations_of,
    condition_true,
    labels_of,
    read_json,
)
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.actors.workqueue import WorkQueue
from drain_guard_sim.timestamps import rfc3339

__all__ = ["UPDATE_IN_PROGRESS", "NodeController", "rendered_name"]


#: The taint the node controller keeps on nodes it has yet to update (MCO's
#: ``constants.NodeUpdateInProgressTaint``).
UPDATE_IN_PROGRESS: dict[str, str] = {"key": "UpdateInProgress", "effect": "PreferNoSchedule"}


def rendered_name(pool: str, configs: list[JsonObj]) -> str:
    """``rendered-<pool>-<md5 of the merged inputs>``, like the render controller's names."""
    merged = sorted(
        (c["metadata"]["name"], json.dumps(c.get("spec") or {}, sort_keys=True)) for c in configs
    )
    digest = hashlib.md5(json.dumps(merged).encode(), usedforsecurity=False).hexdigest()
    return f"rendered-{pool}-{digest}"


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
        version: McoVersion = McoVersion.V4_15,
    ) -> None:
        super().__init__(kubeconfig, timeline, timings, version)
        self.pool_name = pool
        self.max_unavailable = max_unavailable
        self.queue = WorkQueue(
            timings.s(timings.rate_limit_base), timings.s(timings.rate_limit_max)
        )
        #: The render controller's own queue (render_controller.go): its sync is not the
        #: node controller's, and each waits its own 5 s after the events it watches.
        self.render_queue = WorkQueue(
            timings.s(timings.rate_limit_base), timings.s(timings.rate_limit_max)
        )
        self.nodes: Informer | None = None
        self.pools: Informer | None = None
        self.configs: Informer | None = None
        self.builds: Informer | None = None
        self.os_configs: Informer | None = None
        self._last_message: str | None = None
        #: Asked with the pool, as this controller's cache has it, before each sync; False
        #: skips the sync (the pool's next event queues it again): a test orders the sync
        #: after the build controller's BuildPending by that event, however loaded the
        #: machine (``SimCluster.win_build_races``); None: every sync runs.
        self.may_sync: Callable[[JsonObj], bool] | None = None
        #: Whether the sync taints the nodes it has yet to update (``UpdateInProgress``,
        #: PreferNoSchedule) and untaints the others, as MCO does: one more Node writer, on
        #: with ``SimCluster(node_writers=True)`` (the tests that time a quiet Node need none).
        self.taints_nodes = False
        #: The z-stream switch of ``rollout_targets``: False plays a build from before the
        #: cordon skip (the seed's 4.15 build, 4.16 before 2024-07-27).
        self.skips_unready = True

    async def started(self) -> None:
        c = self.custom
        self.nodes = Informer(self.core.list_node, self._on_node)
        self.pools = Informer(
            c.list_cluster_custom_object,
            self._on_pool,
            {"group": GROUP_MCO, "version": "v1", "plural": "machineconfigpools"},
        )
        self.configs = Informer(
            c.list_cluster_custom_object,
            self._on_config,
            {"group": GROUP_MCO, "version": "v1", "plural": "machineconfigs"},
        )
        informers = [(self.nodes, "nodes"), (self.pools, "pools"), (self.configs, "mcs")]
        if self.version.gates_on_build:
            version = api_version(self.version)
            self.builds = Informer(
                c.list_cluster_custom_object,
                self._on_build,
                {"group": GROUP, "version": version, "plural": "machineosbuilds"},
            )
            self.os_configs = Informer(
                c.list_cluster_custom_object,
                self._on_build,
                {"group": GROUP, "version": version, "plural": "machineosconfigs"},
            )
            informers += [(self.builds, "mosbs"), (self.os_configs, "moscs")]
        for inf, name in informers:
            self.spawn(inf.run(), f"node-controller-{name}")
            await inf.synced.wait()
        self.spawn(self._worker(self.render_queue, self._render), "render-controller-worker")
        self.spawn(self._worker(self.queue, self._sync_pool), "node-controller-worker")
        self.render_queue.add(self.pool_name)
        self.queue.add(self.pool_name)

    async def stop(self) -> None:
        self.queue.shutdown()
        self.render_queue.shutdown()
        await super().stop()

    def _enqueue(self) -> None:
        self.queue.add_after(self.pool_name, self.timings.s(self.timings.node_controller_delay))

    def _enqueue_render(self) -> None:
        self.render_queue.add_after(self.pool_name, self.timings.s(self.timings.render_delay))

    def _on_pool(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        """Both controllers queue the pool on any of its events."""
        self._enqueue_render()
        self._enqueue()

    def _on_config(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        """Only the render controller watches MachineConfigs."""
        self._enqueue_render()

    def _on_build(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        self._enqueue()

    def _on_node(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        """updateNode: the pool is queued when a node's readiness, MCO annotations, labels or
        taints change; a status heartbeat alone queues nothing."""
        if etype != "MODIFIED" or old is None or node_changed(old, obj):
            self._enqueue()

    async def _worker(self, queue: WorkQueue, sync: Callable[[], Awaitable[None]]) -> None:
        while True:
            key = await queue.get()
            try:
                await sync()
                queue.forget(key)
            except ApiException as exc:
                self.log(None, f"Error syncing machineconfigpool {key}: {exc.status} {exc.reason}")
                queue.add_rate_limited(key)
            finally:
                queue.done(key)

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
                "spec": {
                    "config": {"ignition": {"version": "3.4.0"}},
                    "kernelArguments": [
                        k
                        for mc in sorted(inputs, key=lambda m: m["metadata"]["name"])
                        for k in (mc.get("spec") or {}).get("kernelArguments") or []
                    ],
                },
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
        if pool is None or (self.may_sync is not None and not self.may_sync(pool)):
            return
        target = ((pool.get("spec") or {}).get("configuration") or {}).get("name")
        if not target:
            return
        layered = LAYERING_LABEL in labels_of(pool)
        image = self._pool_image(pool) if layered else ""
        if layered:
            why = self._cannot_continue(pool, target, image)
            if why is not None:
                self._say_once(f"Requeueing layered pool {self.pool_name}: {why}")
                await self._sync_status(pool, self._nodes(pool), target, image)
                return
        nodes = self._nodes(pool)
        if self.taints_nodes:
            for node in nodes:
                await self._sync_taint(node, target, image)
        chosen = rollout_targets(
            nodes, target, image, self.max_unavailable, skips_unready=self.skips_unready
        )
        for node in chosen:
            await self._set_desired(node["metadata"]["name"], target, image)
        await self._sync_status(pool, nodes, target, image)

    async def _sync_taint(self, node: JsonObj, target: str, image: str) -> None:
        """The ``UpdateInProgress`` taint on a node whose desired config or image is not the
        pool's, off a node whose are; a node event queues the pool again."""
        ann = annotations_of(node)
        wanted = ann.get(DESIRED_CONFIG) != target or ann.get(DESIRED_IMAGE, "") != image
        taints = list((node.get("spec") or {}).get("taints") or [])
        has = any(t.get("key") == UPDATE_IN_PROGRESS["key"] for t in taints)
        if wanted == has:
            return
        if wanted:
            taints.append(dict(UPDATE_IN_PROGRESS))
        else:
            taints = [t for t in taints if t.get("key") != UPDATE_IN_PROGRESS["key"]]
        name = node["metadata"]["name"]
        self.log(name, f"{'Applying' if wanted else 'Removing'} UpdateInProgress taint on {name}")
        await self.patch_node(name, {"spec": {"taints": taints or None}})

    def _machine_os_config(self) -> JsonObj | None:
        """4.16+: the pool's MachineOSConfig."""
        assert self.os_configs is not None
        for mosc in self.os_configs.cache.values():
            if ((mosc.get("spec") or {}).get("machineConfigPool") or {}).get("name") == (
                self.pool_name
            ):
                return mosc
        return None

    def _pool_image(self, pool: JsonObj) -> str:
        """The image the pool's nodes are to run: 4.15's pool annotation, 4.16+'s
        MachineOSConfig's (``SetDesiredStateFromPool``)."""
        if self.version.gates_on_build:
            return config_image(self.version, self._machine_os_config())
        return annotations_of(pool).get(POOL_IMAGE, "")

    def _cannot_continue(self, pool: JsonObj, target: str, image: str) -> str | None:
        """canLayeredPoolContinue: None to roll out, else why not."""
        if not image:
            return "Image annotation is not set"
        if self.version.gates_on_build:
            assert self.builds is not None
            mosc = self._machine_os_config()
            mosc_name = (mosc or {}).get("metadata", {}).get("name")
            build = next(
                (
                    b
                    for b in self.builds.cache.values()
                    if built_config(b) == target
                    and (b.get("spec") or {}).get("machineOSConfig", {}).get("name") == mosc_name
                ),
                None,
            )
            if build is None:
                return f"No MachineOSBuild for {target}"
            state = build_state(build)
            if state != "Succeeded":
                return f"MachineOSBuild {build['metadata']['name']} is {state or 'new'}"
            built = build_image(self.version, build)
            if self.version.checks_build_is_current and built != image:
                # MachineOSBuildIsCurrent (OCPBUGS-53408); 4.18-early goes on with the image
                # the MachineOSConfig has: its residual race, open until the image is written.
                return f"Image built successfully, pullspec: {image}, but not {built} yet"
            return None
        if condition_true(pool, "BuildSuccess"):
            return None
        if condition_true(pool, "BuildPending"):
            return "Image build pending"
        if condition_true(pool, "Building"):
            return "Image build in progress"
        if condition_true(pool, "BuildFailed"):
            return "image build failed"
        return "Image is not ready yet"

    def _nodes(self, pool: JsonObj) -> list[JsonObj]:
        assert self.nodes is not None
        selector = (pool.get("spec") or {}).get("nodeSelector", {}).get("matchLabels") or {}
        return sorted(
            (
                n
                for n in self.nodes.cache.values()
                if all(labels_of(n).get(k) == v for k, v in selector.items())
            ),
            key=lambda n: (n["metadata"].get("creationTimestamp") or "", n["metadata"]["name"]),
        )

    def _say_once(self, message: str) -> None:
        if self._last_message != message:
            self.log(None, message)
        self._last_message = message

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
        conditions = _degraded_conditions(pool, status["degradedMachineCount"] > 0)
        body: JsonObj = {"status": status}
        if conditions is not None:
            # Against the pool's resourceVersion: the build controller writes conditions too,
            # and a stale list would drop its (a conflict requeues the sync).
            status["conditions"] = conditions
            body["metadata"] = {"resourceVersion": pool["metadata"]["resourceVersion"]}
        if any(old.get(k) != v for k, v in status.items()):
            await self._patch_pool(body, status=True)


def _degraded_conditions(pool: JsonObj, node_degraded: bool) -> list[JsonObj] | None:
    """calculateStatus: NodeDegraded while a node reports Degraded, and Degraded = NodeDegraded
    or RenderDegraded (so the 4.15 build controller's Degraded goes at the next sync); the
    pool's new condition list, or None when they are as they should be. A degraded pool gets
    no new build in any version (``MachineOSBuilder``)."""
    wanted = {
        "NodeDegraded": node_degraded,
        "Degraded": node_degraded or condition_true(pool, "RenderDegraded"),
    }
    current = (pool.get("status") or {}).get("conditions") or []
    have = {c.get("type"): c.get("status") == "True" for c in current}
    if all(have.get(t, False) == v for t, v in wanted.items()):
        return None
    now = rfc3339(datetime.now(UTC))
    kept = [c for c in current if c.get("type") not in wanted]
    return kept + [
        {"type": t, "status": "True" if v else "False", "lastTransitionTime": now}
        for t, v in wanted.items()
    ]
