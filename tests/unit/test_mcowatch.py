"""The pools' cache keeps what the agent saw of a 4.15 pool's refused build, from every
version a list or the watch delivers: what the pool itself does not keep (node.mcowatch)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from drain_guard.core.operations import Watched
from drain_guard.core.replacement import POOL_IMAGE, Refusal
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.node.mcowatch import McoWatches, PoolsCache, _McoRead
from drain_guard.protocol import DESIRED_CONFIG
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.health import Health

A = "rendered-worker-aaaaaaaa"
B = "rendered-worker-bbbbbbbb"
IMAGE = "registry.example/ocb@sha256:" + "1" * 64


def pool(config: str, *, degraded: bool = False, name: str = "worker") -> dict[str, Any]:
    """A 4.15 pool at ``config``, built at A (BuildSuccess, image), no build since."""
    return {
        "metadata": {"name": name, "annotations": {POOL_IMAGE: IMAGE}},
        "spec": {"configuration": {"name": config}},
        "status": {
            "configuration": {"name": A},
            "conditions": [
                {"type": "BuildSuccess", "status": "True"},
                {"type": "NodeDegraded", "status": "True" if degraded else "False"},
            ],
        },
    }


def test_a_refusal_is_kept_past_the_repair_until_the_pool_moves() -> None:
    cache = PoolsCache()
    cache.replace([pool(A, degraded=True)])
    assert cache.refusals == {}  # degraded, but its config is built
    cache.apply("MODIFIED", pool(B, degraded=True))
    cache.apply("MODIFIED", pool(B))  # repaired
    assert cache.refusals == {"worker": Refusal(B, "NodeDegraded")}
    cache.replace([pool(B)])  # a relist of the same config keeps it
    assert cache.refusals == {"worker": Refusal(B, "NodeDegraded")}
    cache.apply("MODIFIED", pool(A))
    assert cache.refusals == {}
    cache.apply("MODIFIED", pool(B, degraded=True))
    cache.apply("DELETED", pool(B, degraded=True))
    assert cache.refusals == {}


def test_a_first_list_sees_a_refusal_while_the_pool_is_degraded() -> None:
    """An agent started (a reboot restarts it) after the move, while the pool is degraded."""
    cache = PoolsCache()
    cache.replace([pool(B, degraded=True), pool(B, name="infra")])
    assert cache.refusals == {"worker": Refusal(B, "NodeDegraded")}
    cache.replace([pool(A)])
    assert cache.refusals == {}


def test_the_guard_sees_the_refusals() -> None:
    watches = McoWatches({Watched.MACHINECONFIGPOOL: "v1"}, asyncio.Event())
    node = {DESIRED_CONFIG: B}
    watches.objects(node)  # the Node seen: its pool's watch follows the worker pool
    watches.pools.replace([pool(A)])
    watches.pools.apply("MODIFIED", pool(B, degraded=True))
    seen = watches.objects(node)
    assert seen is not None
    assert seen.refusals == {"worker": Refusal(B, "NodeDegraded")}
    assert seen.pools["worker"]["spec"]["configuration"]["name"] == B


def test_a_node_moved_to_another_pool_reads_nothing_of_the_one_it_left() -> None:
    """The pool's view is dropped at once (not listed: the guard cannot tell) until the new
    pool's watch lists it; a node whose config names no pool reads none (listed, empty)."""
    watches = McoWatches({Watched.MACHINECONFIGPOOL: "v1"}, asyncio.Event())
    watches.objects({DESIRED_CONFIG: A})
    watches.pools.replace([pool(A)])
    seen = watches.objects({DESIRED_CONFIG: A})
    assert seen is not None
    assert list(seen.pools) == ["worker"]
    moved = watches.objects({DESIRED_CONFIG: "rendered-infra-" + "c" * 32})
    assert moved is not None
    assert (moved.pools, moved.unreadable) == ({}, "machineconfigpools not listed yet")
    assert watches.pool == "infra"
    unnamed = watches.objects({DESIRED_CONFIG: "custom"})
    assert unnamed is not None
    assert (unnamed.pools, unnamed.unreadable) == ({}, None)


def test_a_watch_failing_before_it_listed_says_since_when_and_why() -> None:
    """What the guard bounds its wait by (``failing_since``) and says (the 403); a failing
    watch is named before one merely not listed yet, and a new watch forgets the failure."""
    served = {Watched.MACHINECONFIGPOOL: "v1", Watched.MACHINEOSBUILD: "v1"}
    watches = McoWatches(served, asyncio.Event())
    node = {DESIRED_CONFIG: A}
    watches.objects(node)
    unlisted = watches.objects(node)
    assert unlisted is not None
    assert (unlisted.unreadable, unlisted.failing_since) == (
        "machineconfigpools not listed yet",
        None,
    )
    since = datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
    builds = watches.caches[Watched.MACHINEOSBUILD]
    relay = _McoRead(Health(Metrics()), builds)
    relay.watch_state(
        Watched.MACHINEOSBUILD, WatchStatus(failing_since=since, error="(403) Forbidden")
    )
    assert builds.changed.is_set()
    failing = watches.objects(node)
    assert failing is not None
    assert failing.failing_since == since
    assert failing.unreadable == (
        "machineosbuilds not listed, failing since 2026-03-01T11:00:00Z: (403) Forbidden"
    )
    relay.watch_state(Watched.MACHINEOSBUILD, WatchStatus(listed=True, watching=True))
    builds.replace([])
    watches.pools.replace([pool(A)])
    listed = watches.objects(node)
    assert listed is not None
    assert (listed.unreadable, listed.failing_since) == (None, None)
