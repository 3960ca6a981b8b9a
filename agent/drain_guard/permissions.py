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
    uninstall from a rolling update; ``SHIELD`` into a Role in each of ``SHIELD_NAMESPACES``,
    where the shield keeps PodDisruptionBudgets on build pods ("only where build pods run").
    """

    CLUSTER = "cluster"
    OWN_DAEMONSET = "own-daemonset"
    SHIELD = "shield"


#: Where the shield may write budgets: MCO's namespace, where its build pods run. (With
#: ``--shield-dependencies`` the agent also looks in openshift-image-registry; without a Role
#: there it reports that namespace as forbidden and shields the rest.)
SHIELD_NAMESPACES: tuple[str, ...] = ("openshift-machine-config-operator",)


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
    # The shield: budgets on the build pods of its node, in SHIELD_NAMESPACES only.
    Permission(
        "policy",
        "poddisruptionbudgets",
        frozenset({"list", "watch", "create", "delete"}),
        Scope.SHIELD,
    ),
)


def allowed(api_group: str, resource: str, verb: str) -> bool:
    """Whether the agent is meant to call ``verb`` on ``resource`` (of ``api_group``)."""
    return any(
        p.api_group == api_group and p.resource == resource and verb in p.verbs for p in PERMISSIONS
    )
