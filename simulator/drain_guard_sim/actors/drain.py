"""The machine-config-controller's drain controller, as in MCO 4.15 to 4.18.

Modelled on pkg/controller/drain/drain_controller.go and the kubectl drain helper it vendors:

- informer-driven, 5 workers, a node enqueued ``UpdateDelay`` (5 s) after an event (an earlier
  pending time is kept): in 4.15 on every node add/update (so the 5 s run from the node
  controller's write, before the MCD's request, and every other Node writer's); so in 4.16
  before PR 4484 (``4.16-early``); from then, in 4.17 and in 4.18 before PR 6101 only when
  ``desiredDrain`` changes; in 4.18's latest (``4.18``) also when ``spec.unschedulable``
  changes;
- ``syncNode``: nothing when ``desiredDrain == lastAppliedDrain``; the verb is the text before
  the first ``-``; ``uncordon`` uncordons, ``drain`` cordons and drains, anything else is an
  error retried with client-go's rate limiter, then "Dropping node ... out of the queue" and a
  retry a minute later; nothing is done to the node for an unknown verb;
- the drain evicts non-DaemonSet pods through the eviction API (429: retry every 5 s within the
  90 s attempt), waits for them to be gone; a failed attempt is requeued after 1 min (5 min once
  it has failed for 10 min); after 1 h ``mcc_drain_err{node}`` is 1;
- on success ``lastAppliedDrain`` = the ``desiredDrain`` value read at the start of the sync.
  An attempt in flight is not stopped when ``desiredDrain`` changes, and the node is uncordoned
  only for the ``uncordon`` verb. 4.18's latest cordons again a node someone uncordoned during
  a drain, and does not write ``lastAppliedDrain`` when the node was uncordoned by the
  drain's end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.mco import (
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    Actor,
    JsonObj,
    McoVersion,
    Timings,
    annotations_of,
    read_json,
)
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.actors.workqueue import WorkQueue

__all__ = ["DrainController", "Eviction"]


class DrainFailedError(Exception):
    """One drain attempt failed (kubectl's aggregate of per-pod errors)."""


@dataclass(frozen=True)
class Eviction:
    """A pod the drain controller evicted (for summaries; the write log has the proof)."""

    t: float
    node: str
    namespace: str
    name: str


def _cordoned(node: JsonObj) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable", False))


class DrainController(Actor):
    """The MCC drain controller; ``mcc_drain_err`` mirrors the Prometheus gauge of that name."""

    actor_name = "machine-config-controller"

    def __init__(
        self,
        kubeconfig: Path,
        timeline: Timeline,
        timings: Timings,
        version: McoVersion = McoVersion.V4_15,
        node_selector: str = "",
    ) -> None:
        super().__init__(kubeconfig, timeline, timings, version)
        t = self.timings
        self.queue = WorkQueue(t.s(t.rate_limit_base), t.s(t.rate_limit_max))
        #: A label selector of the Nodes it drains: "" every Node, as MCO's; a cluster that
        #: shares its API server with others' Nodes (``RealCluster``) gives its pool's.
        self.node_selector = node_selector
        self.nodes: Informer | None = None
        self.ongoing_drains: dict[str, float] = {}
        self.mcc_drain_err: dict[str, int] = {}
        self.evictions: list[Eviction] = []
        #: When each node's newest ``drain-`` request was seen (monotonic): its sync waits
        #: until ``Timings.drain_request_floor`` has passed since.
        self._requested: dict[str, float] = {}

    async def started(self) -> None:
        selector = {"label_selector": self.node_selector} if self.node_selector else {}
        self.nodes = Informer(self.core.list_node, self._on_node, selector)
        self.spawn(self.nodes.run(), "mcc-node-informer")
        await self.nodes.synced.wait()
        for i in range(self.timings.mcc_workers):
            self.spawn(self._worker(), f"mcc-drain-worker-{i}")

    async def stop(self) -> None:
        self.queue.shutdown()
        await super().stop()

    def _on_node(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        if etype not in ("ADDED", "MODIFIED"):
            return
        desired = annotations_of(obj).get(DESIRED_DRAIN, "")
        if desired.startswith("drain-") and desired != annotations_of(old or {}).get(DESIRED_DRAIN):
            self._requested[obj["metadata"]["name"]] = time.monotonic()
        if old is not None and self.version.drain_on_annotation_only:
            watched = [
                annotations_of(obj).get(DESIRED_DRAIN) != annotations_of(old).get(DESIRED_DRAIN)
            ]
            if self.version.manages_cordon:
                watched.append(_cordoned(obj) != _cordoned(old))
            if not any(watched):
                return
        self.queue.add_after(obj["metadata"]["name"], self.timings.s(self.timings.mcc_update_delay))

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                err = await self.sync_node(key)
            except ApiException as exc:
                err = f"node {key}: {exc.status} {exc.reason}"
            finally:
                self.queue.done(key)
            self._handle_err(err, key)

    def _handle_err(self, err: str | None, key: str) -> None:
        if err is None:
            self.queue.forget(key)
            return
        if self.queue.num_requeues(key) < self.timings.mcc_max_retries:
            self.log(key, f"Error syncing node {key}: {err}")
            self.queue.add_rate_limited(key)
            return
        self.log(key, f'Dropping node "{key}" out of the queue: {err}')
        self.queue.forget(key)
        self.queue.add_after(key, self.timings.s(self.timings.mcc_drop_requeue))

    async def sync_node(self, name: str) -> str | None:
        """One sync; returns an error text (to be retried with rate limiting) or None."""
        assert self.nodes is not None
        node = self.nodes.cache.get(name)
        if node is None:
            return None
        ann = annotations_of(node)
        desired = ann.get(DESIRED_DRAIN, "")
        if desired == ann.get(LAST_APPLIED_DRAIN, ""):
            return None
        verb = desired.split("-")[0]
        wait = self._requested.get(name, 0.0) + self.timings.drain_request_floor - time.monotonic()
        if verb == "drain" and wait > 0:
            self.queue.add_after(name, wait)
            return None
        if verb == "uncordon":
            self.log(name, "uncordoning")
            await self._cordon_or_uncordon(node, cordon=False)
        elif verb == "drain":
            if not await self._drain_node(node):
                # Requeued inside; MCO returns nil here so the rate limiter is not involved.
                return None
            if self.version.manages_cordon and not _cordoned(self.nodes.cache.get(name, node)):
                self.log(
                    name,
                    f"node {name}: externally uncordoned during drain, skipping completion "
                    "annotation",
                )
                return None
        else:
            return f"node {name}: non-recognized drain verb detected {verb}"
        self.log(name, "operation successful; applying completion annotation")
        fresh = await self.get_node(name)
        if annotations_of(fresh).get(LAST_APPLIED_DRAIN) != desired:
            await self.patch_node(
                name, {"metadata": {"annotations": {LAST_APPLIED_DRAIN: desired}}}
            )
        return None

    async def _cordon_or_uncordon(self, node: JsonObj, *, cordon: bool) -> None:
        name = node["metadata"]["name"]
        verb = "cordon" if cordon else "uncordon"
        schedulable = not (node.get("spec") or {}).get("unschedulable", False)
        delay = self.timings.s(self.timings.cordon_backoff)
        for _attempt in range(5):
            self.log(name, f"initiating {verb} (currently schedulable: {str(schedulable).lower()})")
            try:
                current = await self.get_node(name)
                if bool((current.get("spec") or {}).get("unschedulable", False)) != cordon:
                    # kubectl's cordon helper: a strategic merge patch of spec.unschedulable.
                    await self.patch_node(name, {"spec": {"unschedulable": cordon or None}})
                updated = await self.get_node(name)
            except ApiException as exc:
                self.log(name, f"{verb} failed with: {exc.status} {exc.reason}, retrying")
                await asyncio.sleep(delay)
                delay *= 2
                continue
            now_schedulable = not (updated.get("spec") or {}).get("unschedulable", False)
            self.log(
                name, f"{verb} succeeded (currently schedulable: {str(now_schedulable).lower()})"
            )
            return
        raise ApiException(status=500, reason=f"node {name}: failed to {verb} (5 tries)")

    async def _drain_node(self, node: JsonObj) -> bool:
        name = node["metadata"]["name"]
        t = self.timings
        now = time.monotonic()
        started = self.ongoing_drains.get(name)
        duration = 0.0
        recordon = started is not None and self.version.manages_cordon and not _cordoned(node)
        if recordon:
            self.log(
                name, f"External actor has unexpectedly uncordoned node {name}, cordoning again..."
            )
        if started is None or recordon:
            self.log(name, "cordoning")
            await self._cordon_or_uncordon(node, cordon=True)
            self.ongoing_drains[name] = now
        if started is not None:
            duration = now - started
            if duration > t.s(t.mcc_drain_timeout):
                self.log(
                    name,
                    f"drain exceeded timeout: {t.mcc_drain_timeout:.0f}s. Will continue to retry.",
                )
                self.mcc_drain_err[name] = 1
        self.log(name, "initiating drain")
        try:
            await self._run_node_drain(name)
        except DrainFailedError as exc:
            if duration > t.s(t.mcc_requeue_failing_threshold):
                self.log(
                    name,
                    "Drain failed. Drain has been failing for more than "
                    f"{t.mcc_requeue_failing_threshold / 60:g} minutes. Waiting "
                    f"{t.mcc_requeue_failing_delay / 60:g} minutes then retrying. "
                    f"Error message from drain: {exc}",
                )
                self.queue.add_after(name, t.s(t.mcc_requeue_failing_delay))
            else:
                self.log(
                    name,
                    f"Drain failed. Waiting {t.mcc_requeue / 60:g} minute then retrying. "
                    f"Error message from drain: {exc}",
                )
                self.queue.add_after(name, t.s(t.mcc_requeue))
            return False
        self.ongoing_drains.pop(name, None)
        if self.mcc_drain_err.pop(name, None) is not None:
            self.log(name, f"Cleaning up MCCDrain error for node({name}) as drain was completed")
        return True

    async def _run_node_drain(self, name: str) -> None:
        """kubectl's RunNodeDrain with IgnoreAllDaemonSets, Force, DeleteEmptyDirData."""
        data = await read_json(
            await self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={name}", _preload_content=False
            )
        )
        to_evict: list[JsonObj] = []
        ignored: list[str] = []
        for pod in data.get("items") or []:
            meta = pod["metadata"]
            if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
                continue
            owner = next(
                (o for o in meta.get("ownerReferences") or [] if o.get("controller")), None
            )
            phase = (pod.get("status") or {}).get("phase")
            if (
                owner is not None
                and owner.get("kind") == "DaemonSet"
                and phase not in ("Succeeded", "Failed")
            ):
                try:
                    await read_json(
                        await self.apps.read_namespaced_daemon_set(
                            owner["name"], meta["namespace"], _preload_content=False
                        )
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    to_evict.append(pod)  # orphaned: deleted with --force, with a warning
                    continue
                ignored.append(f"{meta['namespace']}/{meta['name']}")
                continue
            to_evict.append(pod)
        if ignored:
            self.log(name, "WARNING: ignoring DaemonSet-managed Pods: " + ", ".join(ignored))
        if not to_evict:
            return
        deadline = asyncio.get_running_loop().time() + self.timings.s(
            self.timings.mcc_drain_helper_timeout
        )
        results = await asyncio.gather(
            *(self._evict_and_wait(name, pod, deadline) for pod in to_evict)
        )
        errors = [r for r in results if r is not None]
        if errors:
            raise DrainFailedError(", ".join(errors))

    async def _evict_and_wait(self, node: str, pod: JsonObj, deadline: float) -> str | None:
        loop = asyncio.get_running_loop()
        ns, pod_name, uid = (pod["metadata"][k] for k in ("namespace", "name", "uid"))
        t = self.timings
        while True:
            self.log(node, f"evicting pod {ns}/{pod_name}")
            if loop.time() >= deadline:
                return (
                    f'error when evicting pods/"{pod_name}" -n "{ns}": global timeout reached: '
                    f"{t.mcc_drain_helper_timeout:g}s"
                )
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod_name, "namespace": ns},
            }
            try:
                await read_json(
                    await self.core.create_namespaced_pod_eviction(
                        pod_name, ns, body, _preload_content=False
                    )
                )
                break
            except ApiException as exc:
                if exc.status == 404:
                    return None
                if exc.status == 429:
                    self.log(
                        node,
                        f'error when evicting pods/"{pod_name}" -n "{ns}" (will retry after 5s): '
                        f"{exc.reason}",
                    )
                    await asyncio.sleep(t.s(t.eviction_retry))
                    continue
                return f'error when evicting pods/"{pod_name}" -n "{ns}": {exc.status} {exc.reason}'
        # waitForDelete: poll until the pod is gone (or replaced: another uid).
        while True:
            try:
                current = await read_json(
                    await self.core.read_namespaced_pod(pod_name, ns, _preload_content=False)
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                current = None
            if current is None or current["metadata"]["uid"] != uid:
                entry = self.log(node, f"Evicted pod {ns}/{pod_name}")
                self.evictions.append(Eviction(entry.t, node, ns, pod_name))
                return None
            if loop.time() >= deadline:
                return (
                    f'error when waiting for pod "{pod_name}" in namespace "{ns}" to terminate: '
                    "global timeout reached"
                )
            await asyncio.sleep(t.s(t.wait_for_delete_interval))
