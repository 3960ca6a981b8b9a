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
    uninstall from a rolling update; ``OWN_NAMESPACE`` into that Role without ``resourceNames``
    (a pod's name is not known in advance): the agent reads its own pod at start, to check that
    the DaemonSet owns it; ``MCO`` into a Role in each of ``MCO_NAMESPACES``, where
    MCO's build pods run: the agent's pod watch reads its node's pods there, and the shield
    keeps PodDisruptionBudgets on build pods there ("only where build pods run");
    ``EVENTS`` into a RoleBinding in ``EVENTS_NAMESPACE``, where Events about a Node live.
    """

    CLUSTER = "cluster"
    OWN_DAEMONSET = "own-daemonset"
    OWN_NAMESPACE = "own-namespace"
    MCO = "mco"
    EVENTS = "events"


#: Where build pods run: MCO's namespace, the default build-pod scope. (``--build-pod-namespace``
#: and ``--shield-dependencies`` widen the pod watch to every namespace, which needs the
#: opt-in ClusterRole of docs/install.md; without it the pod watch is refused and the agent is
#: not ready. ``--shield-dependencies`` also needs a Role on budgets in
#: openshift-image-registry; without it the shield reports that namespace as forbidden.)
MCO_NAMESPACES: tuple[str, ...] = ("openshift-machine-config-operator",)


#: Where the agent writes its Events: a Node is cluster-scoped, and Events about cluster-scoped
#: objects live in ``default`` (as the kubelet's and the machine-config-daemon's do).
EVENTS_NAMESPACE = "default"


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
    # The pods on its Node (field selector spec.nodeName) where build pods run: the build-pod
    # guard and the shield share this one watch; the shield also lists by a build pod's
    # labels, to check a budget with them would select that pod alone.
    Permission("", "pods", frozenset({"list", "watch"}), Scope.MCO),
    # DrainHeld / DrainReleased / DrainHoldExpired Events on the Node, aggregated by patch.
    Permission("", "events", frozenset({"create", "patch"}), Scope.EVENTS),
    # Its own DaemonSet, on SIGTERM: gone or being deleted means uninstall, so release holds.
    Permission("apps", "daemonsets", frozenset({"get"}), Scope.OWN_DAEMONSET),
    # Its own pod, at start: --daemonset must be its controller (drain_guard.selfcheck).
    Permission("", "pods", frozenset({"get"}), Scope.OWN_NAMESPACE),
    # The shield: budgets on the build pods of its node, in MCO_NAMESPACES only.
    Permission(
        "policy",
        "poddisruptionbudgets",
        frozenset({"list", "watch", "create", "delete"}),
        Scope.MCO,
    ),
)


def allowed(api_group: str, resource: str, verb: str, namespace: str | None) -> bool:
    """Whether the agent is meant to call ``verb`` on ``resource`` (of ``api_group``) in
    ``namespace`` (None: a cluster-wide request)."""
    return any(
        p.api_group == api_group
        and p.resource == resource
        and verb in p.verbs
        and (
            p.scope is Scope.CLUSTER
            or (p.scope is Scope.MCO and namespace in MCO_NAMESPACES)
            or (p.scope is Scope.EVENTS and namespace == EVENTS_NAMESPACE)
            or (p.scope in (Scope.OWN_DAEMONSET, Scope.OWN_NAMESPACE) and namespace is not None)
        )
        for p in PERMISSIONS
    )
