"""Which pod watches the agent keeps, from its settings: its one pod watch's namespace (the
build-pod scope and, with the shield on, the shielded namespaces) and the blocking-pod
namespaces that need a watch of their own (``runner`` starts them, the controller reads them).
"""

from __future__ import annotations

from drain_guard.core.pods import watch_namespace
from drain_guard.settings.agent import Settings
from drain_guard.shield.plan import shield_namespaces


def blocking_watch_namespaces(settings: Settings) -> tuple[str, ...]:
    """The blocking-pod namespaces that need a pod watch of their own: those the agent's pod
    watch does not cover (each read with a Role there, never with a cluster-wide watch)."""
    covered = pod_watch_namespace(settings)
    if covered is None:
        return ()
    return tuple(ns for ns in settings.blocking_pod_namespaces if ns != covered)


def pod_watch_namespace(settings: Settings) -> str | None:
    """Where the agent's one pod watch looks: the build-pod scope and, with the shield on, the
    shielded namespaces; a single namespace (the default: MCO's) or None for every one."""
    shielded = shield_namespaces(settings.shield_dependencies) if settings.shield_build_pods else ()
    return watch_namespace(settings.build_pod_scope, shielded)
