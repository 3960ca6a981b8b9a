"""The Kubernetes API calls the agent makes, and who is granted each in every install mode;
and the central shield's: the lists the RBAC is checked against.

Pure data. The deployment tests check that each overlay's rendered roles grant its service
account exactly what :func:`service_account_grants` lists for that mode (no more, no less),
and that what the node's own identity is to make is within the Node authorizer's rules; an
integration test checks that the requests the agent sends to the simulator are a subset of
this; so the RBAC can neither lag behind the code nor grant what nothing uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from drain_guard.core.operations import Operation


class Scope(StrEnum):
    """Where a permission is granted.

    ``CLUSTER`` goes into the ClusterRole; ``OWN_WORKLOAD`` into a namespaced Role limited
    (``resourceNames``) to the agent's own DaemonSet (the central shield's own Deployment),
    which it reads on SIGTERM to tell an uninstall from a rolling update; ``OWN_NAMESPACE`` into
    that Role without ``resourceNames`` (a pod's name is not known in advance): the agent reads
    its own pod at start, to check that the DaemonSet owns it; ``MCO`` into a Role in each of
    ``MCO_NAMESPACES``, where MCO's build pods run: the agent's pod watch reads its node's pods
    there, and the shield keeps PodDisruptionBudgets on build pods there ("only where build pods
    run"); ``EVENTS`` into a RoleBinding in ``EVENTS_NAMESPACE``, where Events about a Node
    live.
    """

    CLUSTER = "cluster"
    OWN_WORKLOAD = "own-workload"
    OWN_NAMESPACE = "own-namespace"
    MCO = "mco"
    EVENTS = "events"
    #: A Role the operator applies in a namespace of their choosing, from a component of
    #: ``daemonset/components/`` (``OPT_IN_PERMISSIONS``): never in an overlay.
    OPT_IN = "opt-in"


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
    """One RBAC rule: the verbs the agent uses on one resource of one API group.

    ``node_write``: a write that goes with the node's own identity where the agent has no
    service account (the systemd install, through its node proxy): Node patches and Events,
    which the Node authorizer's static rules allow every node and NodeRestriction confines
    (Node patches) to its own Node. ``shield``:
    made by the shield only (``--shield-build-pods``). ``account_only``: made only with a
    service account; the node's identity has no such right, and the agent does without it.
    """

    api_group: str
    resource: str
    verbs: frozenset[str]
    scope: Scope = Scope.CLUSTER
    node_write: bool = False
    shield: bool = False
    account_only: bool = False


PERMISSIONS: tuple[Permission, ...] = (
    # Its own Node: read and watch it (and list Nodes, for the confinement self-check).
    Permission("", "nodes", frozenset({"get", "list", "watch"})),
    # Hold and release: compare-and-swap JSON patches of its Node's annotations.
    Permission("", "nodes", frozenset({"patch"}), node_write=True),
    # The pods on its Node (field selector spec.nodeName) where build pods run: the build-pod
    # guard and the shield share this one watch; the shield also lists by a build pod's
    # labels, to check a budget with them would select that pod alone.
    Permission("", "pods", frozenset({"list", "watch"}), Scope.MCO),
    # DrainHeld / DrainReleased / DrainHoldExpired Events on the Node, aggregated by patch.
    # ... and on its MachineConfigPool (PoolRolloutHeld / PoolRolloutReleased), related to it.
    Permission("", "events", frozenset({"create", "patch"}), Scope.EVENTS, node_write=True),
    # Its pool's uid, once, for those Events: `oc describe mcp` finds a pool's Events by it.
    # The node's identity may not read pools: the systemd install does without.
    Permission(
        "machineconfiguration.openshift.io",
        "machineconfigpools",
        frozenset({"get"}),
        account_only=True,
    ),
    # MCO's pools, MachineOSBuilds and MachineOSConfigs, listed and watched: whether a build
    # will replace a same-image target (drain_guard.core.replacement). Read only; cluster-scoped,
    # so a ClusterRole (no name is known in advance). The systemd install does without (the
    # noop-image guard then holds up to --max-hold, as before).
    *(
        Permission(
            "machineconfiguration.openshift.io",
            plural,
            frozenset({"list", "watch"}),
            account_only=True,
        )
        for plural in ("machineconfigpools", "machineosbuilds", "machineosconfigs")
    ),
    # Its own DaemonSet, on SIGTERM: gone or being deleted means uninstall, so release holds.
    Permission("apps", "daemonsets", frozenset({"get"}), Scope.OWN_WORKLOAD),
    # Its own pod, at start: --daemonset must be its controller (drain_guard.runtime.selfcheck).
    Permission("", "pods", frozenset({"get"}), Scope.OWN_NAMESPACE),
    # The shield: budgets on the build pods of its node, in MCO_NAMESPACES only.
    Permission(
        "policy",
        "poddisruptionbudgets",
        frozenset({"list", "watch", "create", "delete"}),
        Scope.MCO,
        shield=True,
    ),
)


@dataclass(frozen=True)
class InstallMode:
    """How an install runs the agent, as far as its rights go.

    ``node_identity``: Node writes and Events go with the node's own identity
    (``system:node:<name>``), so the service account holds no write. ``service_account``: the
    agent has an account of its own at all (the DaemonSet's; the systemd unit has none and
    runs with the node's identity only, which also reads Nodes and pods). ``shield``: the
    agent keeps budgets itself (``--shield-build-pods``); where it does not, a central
    ``drain-guard shield`` Deployment does, with its own account.
    """

    name: str
    node_identity: bool
    service_account: bool
    shield: bool
    #: How its agents run: ``drain-guard run --install`` (``settings.install.InstallKind``),
    #: as its manifests imply it (tests/deploy checks each against the settings they parse to).
    install: str = "daemonset"


#: Every install mode: the overlays (by directory name) and the systemd unit. 4.17+ and the
#: trial overlay confine the service account with the admission policies, 4.15/4.16 with the
#: admission webhook (``drain-guard webhook``: no ValidatingAdmissionPolicy before Kubernetes
#: 1.30); systemd has no pod-bound token on a host, so there the agent holds no right its node
#: does not already hold.
INSTALL_MODES: dict[str, InstallMode] = {
    mode.name: mode
    for mode in (
        InstallMode("openshift", node_identity=False, service_account=True, shield=True),
        InstallMode("kubernetes", node_identity=False, service_account=True, shield=True),
        InstallMode("openshift-4.15", node_identity=False, service_account=True, shield=True),
        InstallMode(
            "systemd", node_identity=True, service_account=False, shield=False, install="systemd"
        ),
    )
}


def _used(mode: InstallMode) -> tuple[Permission, ...]:
    """The calls the agent makes in ``mode``: no shield's without it, and no DaemonSet's or
    own pod's read, nor any other call only an account makes, without a service account (the
    systemd unit)."""
    own = (Scope.OWN_WORKLOAD, Scope.OWN_NAMESPACE)
    return tuple(
        p
        for p in PERMISSIONS
        if (mode.shield or not p.shield)
        and (mode.service_account or (p.scope not in own and not p.account_only))
    )


def service_account_grants(mode: InstallMode) -> tuple[Permission, ...]:
    """What the agent's service account must be granted in ``mode`` (nothing without one)."""
    if not mode.service_account:
        return ()
    return tuple(p for p in _used(mode) if not (mode.node_identity and p.node_write))


def node_identity_calls(mode: InstallMode) -> tuple[Permission, ...]:
    """What the agent calls with the node's own identity in ``mode``: its writes, or
    everything when it has no service account."""
    if not mode.node_identity:
        return ()
    return tuple(p for p in _used(mode) if p.node_write or not mode.service_account)


#: The central shield's calls (``drain-guard shield``, its own ServiceAccount
#: ``drain-guard-shield``): where the agents may keep no budgets, it keeps those of every node;
#: and its metrics proxy's, which runs with the same account.
SHIELD_PERMISSIONS: tuple[Permission, ...] = (
    # Every pod of MCO's namespace (one watch, not by node); a list by a build pod's labels.
    Permission("", "pods", frozenset({"list", "watch"}), Scope.MCO),
    # The budgets on the build pods of every node, in MCO_NAMESPACES only.
    Permission(
        "policy",
        "poddisruptionbudgets",
        frozenset({"list", "watch", "create", "delete"}),
        Scope.MCO,
    ),
    # Its own Deployment, at start (it exists) and on SIGTERM (gone: uninstall, remove them).
    Permission("apps", "deployments", frozenset({"get"}), Scope.OWN_WORKLOAD),
    # Made by its kube-rbac-proxy sidecar (same pod, same account), not by the shield: a
    # scraper's token reviewed, then its access to the metrics attribute.
    Permission("authentication.k8s.io", "tokenreviews", frozenset({"create"})),
    Permission("authorization.k8s.io", "subjectaccessreviews", frozenset({"create"})),
)


#: What each opt-in component (``daemonset/components/NAME``) grants the agent's account, in
#: the namespace the operator's kustomization names: its Role's rules, checked against the
#: rendered component (tests/deploy/test_opt_in_components.py) and on the real API server.
OPT_IN_PERMISSIONS: dict[str, tuple[Permission, ...]] = {
    # --blocking-pod-namespace: its node's pods there (field selector spec.nodeName).
    "blocking-pods": (Permission("", "pods", frozenset({"list", "watch"}), Scope.OPT_IN),),
    # --disruption-budget: the budgets named, by name (resourceNames; the field selector
    # metadata.name=NAME makes a list or watch a request for NAME).
    "disruption-budgets": (
        Permission("policy", "poddisruptionbudgets", frozenset({"list", "watch"}), Scope.OPT_IN),
    ),
}


#: What the agent asks for expecting a refusal, never to be granted: the confinement
#: self-check's dry-run TokenRequest for another account (drain_guard.runtime.selfcheck).
REFUSED_PROBES: tuple[Permission, ...] = (
    Permission("", "serviceaccounts/token", frozenset({"create"})),
)


#: The admission webhook's calls (``drain-guard webhook``, ServiceAccount
#: ``drain-guard-webhook``, openshift-4.15): a pod read by name, where the agents run (the pod
#: a caller's token names) and where build pods run (a budget's owner). Nothing else.
WEBHOOK_PERMISSIONS: tuple[Permission, ...] = (
    Permission("", "pods", frozenset({"get"}), Scope.OWN_NAMESPACE),
    Permission("", "pods", frozenset({"get"}), Scope.MCO),
)


def allowed(
    api_group: str,
    resource: str,
    verb: str,
    namespace: str | None,
    permissions: tuple[Permission, ...] = PERMISSIONS,
) -> bool:
    """Whether ``permissions`` (the agent's, or the central shield's) mean to call ``verb``
    on ``resource`` (of ``api_group``) in ``namespace`` (None: a cluster-wide request)."""
    return any(
        p.api_group == api_group
        and p.resource == resource
        and verb in p.verbs
        and (
            p.scope is Scope.CLUSTER
            or (p.scope is Scope.MCO and namespace in MCO_NAMESPACES)
            or (p.scope is Scope.EVENTS and namespace == EVENTS_NAMESPACE)
            or (p.scope in (Scope.OWN_WORKLOAD, Scope.OWN_NAMESPACE) and namespace is not None)
        )
        for p in permissions
    )


def operations(permissions: tuple[Permission, ...]) -> tuple[Operation, ...]:
    """The API operations ``permissions`` are for, in the enum's order: the series of
    ``drain_guard_api_errors_total`` a program shows from the start."""
    return tuple(
        op
        for op in Operation
        if any(
            (p.api_group, p.resource) == op.request[:2] and op.request[2] in p.verbs
            for p in permissions
        )
    )
