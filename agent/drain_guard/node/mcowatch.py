"""MCO's objects the noop-image guard reads (drain_guard.core.replacement): which are served,
the watches that keep them, and what the guard sees of them.

Read only: the node's MachineConfigPool, listed and watched by name (``metadata.name``, the
pool its rendered config names: every agent watching every pool would be sent each pool's every
status write, which in a rollout is several a node), and the MachineOSBuilds and
MachineOSConfigs, listed and watched whole (cluster-scoped; the version each is served in found
by discovery at start); of the pool, also what the agent saw of a refused build
(``PoolsCache``). The pool's watch follows the node: when its config names another pool,
the watch of the old one ends and one of the new one starts (the guard cannot tell meanwhile).
None through the node proxy, whose identity reads no pool, nor where MCO serves no pools: the
guard then holds a same-image drain for --noop-expect-within at most (docs/protocol.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drain_guard.core.operations import Watched
from drain_guard.core.replacement import McoObjects, Refusal, refusal
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube.call import JsonObj, KubeError
from drain_guard.kube.client import Kube
from drain_guard.kube.counters import Counters, Relay
from drain_guard.kube.listwatch import ObjectsCache
from drain_guard.node.watches import mco_objects
from drain_guard.protocol import pool_of

log = logging.getLogger("drain_guard.node.mcowatch")


async def discover(kube: Kube, *, through_proxy: bool) -> dict[Watched, str]:
    """MCO's resources to read and the version serving each; a discovery that fails reads
    none (logged once)."""
    if through_proxy:
        return {}
    try:
        served = await kube.mco_versions()
    except KubeError as exc:
        log.warning(
            "MCO's APIs not discovered (%s): noop-image holds a same-image drain for"
            " --noop-expect-within at most",
            exc,
        )
        return {}
    return served if Watched.MACHINECONFIGPOOL in served else {}


@dataclass
class PoolsCache(ObjectsCache):
    """The pools, and what the agent saw of each one's current config while it was degraded
    (``replacement.refusal``, from every version a list or the watch delivers): 4.15's build
    controller refuses a build then, and nothing in the pool keeps it."""

    refusals: dict[str, Refusal] = field(default_factory=dict)

    def replace(self, items: Sequence[JsonObj]) -> None:
        super().replace(items)
        kept = {name: self._refusal(pool) for name, pool in self.objects.items()}
        self.refusals = {name: refused for name, refused in kept.items() if refused is not None}

    def apply(self, kind: str, obj: JsonObj) -> None:
        super().apply(kind, obj)
        name = str(obj["metadata"]["name"])
        refused = None if kind == "DELETED" else self._refusal(obj)
        if refused is None:
            self.refusals.pop(name, None)
        else:
            self.refusals[name] = refused

    def _refusal(self, pool: JsonObj) -> Refusal | None:
        return refusal(self.refusals.get(str(pool["metadata"]["name"])), pool)


class McoWatches:
    """The caches of MCO's objects the agent watches (``served``: resource to version), each
    waking the controller's loop through ``changed`` as the pod watch does."""

    def __init__(self, served: Mapping[Watched, str], changed: asyncio.Event) -> None:
        self.served = dict(served)
        self.pools = PoolsCache(changed=changed)
        self.caches = {
            resource: self.pools
            if resource is Watched.MACHINECONFIGPOOL
            else ObjectsCache(changed=changed)
            for resource in served
        }

        #: The pool the node's config names, whose watch ``_follow_pool`` keeps (None: none),
        #: once the Node has been seen (``_followed``).
        self.pool: str | None = None
        self._followed = False
        self._pool_moved = asyncio.Event()

    def objects(self, annotations: Mapping[str, str]) -> McoObjects | None:
        """What the guard sees of them (``watches.mco_objects``) for a Node of these
        annotations; the pool's watch moves to the pool they name, if another (its cache
        emptied at once: nothing of the pool the node left is read for the one it is in)."""
        pool = pool_of(annotations)
        if Watched.MACHINECONFIGPOOL in self.caches and (pool != self.pool or not self._followed):
            self.pool, self._followed = pool, True
            self.pools.forget(listed=pool is None)
            self._pool_moved.set()
        return mco_objects(self.caches, self.pools.refusals)

    def pool_uid(self, name: str) -> str | None:
        """Pool ``name``'s uid as its watch last listed it, for the pool's Events; None when
        it is not the watched pool, not listed yet, or has no uid of the string kind."""
        pool = self.pools.objects.get(name) if self.pools.listed else None
        metadata = pool.get("metadata") if isinstance(pool, Mapping) else None
        uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
        return uid if isinstance(uid, str) and uid else None

    def parts(self, kube: Kube, watch_timeout: int) -> dict[str, Coroutine[Any, Any, None]]:
        """One watch a resource, as parts of the agent's program."""
        parts: dict[str, Coroutine[Any, Any, None]] = {}
        for resource, cache in self.caches.items():
            if resource is Watched.MACHINECONFIGPOOL:
                parts[resource.plural] = self._follow_pool(kube, cache, watch_timeout)
                continue
            read = _McoRead(kube.counters, cache)
            version = self.served[resource]
            parts[resource.plural] = kube.watch_cluster(
                resource, version, cache, watch_timeout, read
            )
        return parts

    async def _follow_pool(self, kube: Kube, cache: ObjectsCache, watch_timeout: int) -> None:
        """Watch the pool ``self.pool``, by name, and only it: when the Node names another, the
        watch ends and the cache is emptied (not listed: the guard cannot tell) before the
        new pool's watch lists it. With no pool named, nothing is watched, and the empty cache
        is listed (the guard says the node's pool is not known)."""
        version = self.served[Watched.MACHINECONFIGPOOL]
        await self._pool_moved.wait()  # the Node seen: its pool known
        while True:
            self._pool_moved.clear()
            pool = self.pool
            cache.forget(listed=pool is None)  # and what the last watch wrote since
            moved = asyncio.ensure_future(self._pool_moved.wait())
            watch = asyncio.ensure_future(
                kube.watch_cluster(
                    Watched.MACHINECONFIGPOOL,
                    version,
                    cache,
                    watch_timeout,
                    _McoRead(kube.counters, cache),
                    name=pool,
                )
                if pool is not None
                else asyncio.Event().wait()
            )
            try:
                await asyncio.wait((moved, watch), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (moved, watch):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if watch.done() and not watch.cancelled():
                watch.result()  # the watch ended on its own: its error, or nothing more to do
                return


class _McoRead(Relay):
    """A watch of MCO's objects: its errors and restarts are counted, its failure is kept on
    its cache for the guard to say (not reported as a watch of the agent's own: a cluster
    whose RBAC predates these reads is not made unready by them)."""

    def __init__(self, counters: Counters, cache: ObjectsCache) -> None:
        super().__init__(counters)
        self.cache = cache

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        error = state.error if state.failing_since is not None else None
        if (error, state.failing_since) != (self.cache.error, self.cache.failing_since):
            self.cache.error, self.cache.failing_since = error, state.failing_since
            self.cache.changed.set()
