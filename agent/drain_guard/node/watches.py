"""Which watches the agent keeps beside its Node's, and what the guards read of them: its one
pod watch's namespace (the build-pod scope and, with the shield on, the shielded namespaces),
the blocking-pod namespaces that need a watch of their own, and MCO's objects (``runner``
starts the watches, the controller reads their caches through these).
"""

from __future__ import annotations

from collections.abc import Mapping

from drain_guard.config.scope import ScopeSettings
from drain_guard.core.operations import Watched
from drain_guard.core.pods import Pod, watch_namespace
from drain_guard.core.replacement import McoObjects, Refusal
from drain_guard.kube.listwatch import ObjectsCache, WatchCache
from drain_guard.protocol import format_rfc3339
from drain_guard.settings.shielding import ShieldingSettings
from drain_guard.shield.plan import shield_namespaces


def blocking_watch_namespaces(scope: ScopeSettings, shield: ShieldingSettings) -> tuple[str, ...]:
    """The blocking-pod namespaces that need a pod watch of their own: those the agent's pod
    watch does not cover (each read with a Role there, never with a cluster-wide watch)."""
    covered = pod_watch_namespace(scope, shield)
    if covered is None:
        return ()
    return tuple(ns for ns in scope.blocking_pod_namespaces if ns != covered)


def pod_watch_namespace(scope: ScopeSettings, shield: ShieldingSettings) -> str | None:
    """Where the agent's one pod watch looks: the build-pod scope and, with the shield on, the
    shielded namespaces; a single namespace (the default: MCO's) or None for every one."""
    shielded = shield_namespaces(shield.dependencies) if shield.build_pods else ()
    return watch_namespace(scope.build_pod_scope, shielded)


def blocking_pods(caches: Mapping[str, WatchCache]) -> tuple[Pod, ...] | None:
    """The pods of the blocking-pod namespaces' own watches; None until all have listed."""
    if not all(c.pods_synced for c in caches.values()):
        return None
    return tuple(p for c in caches.values() for p in c.pods.values())


def mco_objects(
    caches: Mapping[Watched, ObjectsCache], refusals: Mapping[str, Refusal]
) -> McoObjects | None:
    """MCO's objects as listed, and the pools' ``refusals`` the agent saw; unreadable
    until every watch has listed, and since when one fails before it listed (None: the agent
    reads none, or MCO serves no pools here)."""
    pools = caches.get(Watched.MACHINECONFIGPOOL)
    if pools is None:
        return None
    unlisted = [(resource, each) for resource, each in caches.items() if not each.listed]
    if unlisted:
        # A failing watch is said first: it bounds the hold, one merely not listed yet does not.
        failing = [(resource, each) for resource, each in unlisted if each.failing_since]
        resource, each = (failing or unlisted)[0]
        if each.failing_since is None:
            return McoObjects({}, unreadable=f"{resource.plural} not listed yet")
        since = format_rfc3339(each.failing_since)
        why = f"{resource.plural} not listed, failing since {since}: {each.error}"
        return McoObjects({}, unreadable=why, failing_since=each.failing_since)
    builds = caches.get(Watched.MACHINEOSBUILD)
    configs = caches.get(Watched.MACHINEOSCONFIG)
    return McoObjects(
        pools.objects,
        None if builds is None else tuple(builds.objects.values()),
        None if configs is None else tuple(configs.objects.values()),
        refusals=dict(refusals),
    )
