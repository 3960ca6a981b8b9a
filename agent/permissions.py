"""The Kubernetes API calls the agent makes: the one list the RBAC is checked against.

Pure data. The deployment tests check that the rendered ClusterRole and Role grant exactly
this (no more, no less), and an integration test checks that the requests the agent sends to
the simulator are a subset of it; so the RBAC can neither lag behind the code nor grant what
nothing uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Scope(StrEnum):
    """Where a permission is granted.

    ``CLUSTER`` goes into the ClusterRole; ``OWN_DAEMONSET`` into a namespaced Role limited
    (``resourceNames``) to the agent's own DaemonSet, which it reads on SIGTERM to tell an
    uninstall from a rolling update.
    """

    CLUSTER = "cluster"
    OWN_DAEMONSET = "own-daemonset"


@dataclass(frozen=True)
class Permission:
    """One RBAC rule: the verbs the agent uses on one resource of one API group."""

    api_group: str
    resource: str
    verbs: frozenset[str]
    scope: Scope = Scope.CLUSTER


PERMISSIONS: tuple[Permission, ...] = (
    # Its own Node: read, watch, and compare-and-swap JSON patches of annotations.
    Permission("", "nodes", frozenset({"get", "list", "watch", "patch"})),
    # The pods on its Node (field selector spec.nodeName): the build-pod guard.
    Permission("", "pods", frozenset({"list", "watch"})),
    # DrainHeld / DrainReleased / DrainHoldExpired Events on the Node, aggregated by patch.
    Permission("", "events", frozenset({"create", "patch"})),
    # Its own DaemonSet, on SIGTERM: gone or being deleted means uninstall, so release holds.
    Permission("apps", "daemonsets", frozenset({"get"}), Scope.OWN_DAEMONSET),
)


def allowed(api_group: str, resource: str, verb: str) -> bool:
    """Whether the agent is meant to call ``verb`` on ``resource`` (of ``api_group``)."""
    return any(
        p.api_group == api_group and p.resource == resource and verb in p.verbs for p in PERMISSIONS
    )
