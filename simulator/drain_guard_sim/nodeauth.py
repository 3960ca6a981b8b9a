"""What a node identity (user ``system:node:<name>``, group ``system:nodes``) may do: the Node
authorizer and the NodeRestriction admission plugin of kube-apiserver, as far as the resources
the simulator serves go.

From Kubernetes' source (read, not copied): ``pkg/auth/nodeidentifier`` (a node is a user
named ``system:node:<name>`` in group ``system:nodes``), ``plugin/pkg/auth/authorizer/node``
(secrets, configmaps, volumes and a few more are authorized through the node/pod graph; every
other resource against the static ``NodeRules()`` of
``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``) and
``plugin/pkg/admission/noderestriction`` (a node may modify its own Node only, not its taints
nor labels outside the kubelet's set; may delete, evict and update the status of pods bound to
it only; may create mirror pods only).

Modelled as of Kubernetes 1.28/1.29 (OpenShift 4.15/4.16): without the
``AuthorizeNodeWithSelectors`` gate (1.31+), nodes and pods fall to the static rules, so a node
may read every Node and pod. Not modelled: the graph (the simulator grants no node any
secret, configmap or volume), leases, CSINodes, ResourceSlices, service account tokens, and
the label checks on Node *creation*. A denial of authorization is RBAC's message (no
authorizer allowed it); a denial of admission is ``Forbidden`` with the plugin's reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"


def node_name_of(user: str, groups: Sequence[str]) -> str | None:
    """The node a user speaks for (nodeidentifier: name prefix *and* group), else None."""
    if not user.startswith(NODE_USER_PREFIX) or NODES_GROUP not in groups:
        return None
    return user.removeprefix(NODE_USER_PREFIX)


@dataclass(frozen=True)
class _Rule:
    group: str
    resources: frozenset[str]  # "plural" or "plural/subresource"
    verbs: frozenset[str]


def _rule(group: str, resources: str, verbs: str) -> _Rule:
    return _Rule(group, frozenset(resources.split()), frozenset(verbs.split()))


_READ = "get list watch"
#: NodeRules() (1.28), the rules on resources the simulator serves or a node commonly uses.
NODE_RULES: tuple[_Rule, ...] = (
    _rule("authentication.k8s.io", "tokenreviews", "create"),
    _rule("authorization.k8s.io", "subjectaccessreviews localsubjectaccessreviews", "create"),
    _rule("", "services", _READ),
    _rule("", "nodes", "create get list watch"),
    _rule("", "nodes/status", "update patch"),
    _rule("", "nodes", "update patch"),
    _rule("", "events", "create update patch"),
    _rule("events.k8s.io", "events", "create update patch"),
    _rule("", "pods", _READ),
    _rule("", "pods", "create delete"),
    _rule("", "pods/status", "update patch"),
    _rule("", "pods/eviction", "create"),
    _rule("certificates.k8s.io", "certificatesigningrequests", "create get list watch"),
)


def authorized(group: str, plural: str, subresource: str, verb: str) -> bool:
    """The Node authorizer's answer on the static rules (no graph: see the module doc)."""
    resource = f"{plural}/{subresource}" if subresource else plural
    return any(r.group == group and resource in r.resources and verb in r.verbs for r in NODE_RULES)


def admit(
    node: str,
    operation: str,
    resource_key: str,
    subresource: str,
    name: str,
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
) -> str | None:
    """NodeRestriction on CREATE, UPDATE (and PATCH) and DELETE: the reason of a denial, or
    None. ``resource_key`` is the simulator's (``nodes``, ``pods``); others are let through."""
    if resource_key == "nodes":
        return _admit_node(node, operation, name, old, new)
    if resource_key == "pods":
        return _admit_pod(node, operation, subresource, old, new)
    return None


def _admit_node(
    node: str,
    operation: str,
    name: str,
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
) -> str | None:
    if name != node:
        return f'node "{node}" is not allowed to modify node "{name}"'
    if operation == "UPDATE" and old is not None and new is not None:
        if (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints"):
            return f'node "{node}" is not allowed to modify taints'
        forbidden = sorted(k for k in _modified(_labels(old), _labels(new)) if _forbidden_label(k))
        if forbidden:
            return f"is not allowed to modify labels: {', '.join(forbidden)}"
    return None


def _admit_pod(
    node: str,
    operation: str,
    subresource: str,
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
) -> str | None:
    pod = new if (operation, subresource) == ("CREATE", "") else old
    bound = ((pod or {}).get("spec") or {}).get("nodeName")
    if subresource == "" and operation == "CREATE":
        annotations = ((new or {}).get("metadata") or {}).get("annotations") or {}
        if "kubernetes.io/config.mirror" not in annotations:
            return (
                'pod does not have "kubernetes.io/config.mirror" annotation, node'
                f' "{node}" can only create mirror pods'
            )
        if bound != node:
            return f'node "{node}" can only create pods with spec.nodeName set to itself'
        return None
    if subresource == "" and operation == "DELETE":
        if bound != node:
            return f'node "{node}" can only delete pods with spec.nodeName set to itself'
        return None
    if subresource == "status" and operation == "UPDATE":
        if bound != node:
            return (
                f'node "{node}" can only update pod status for pods with spec.nodeName set'
                " to itself"
            )
        return None
    if subresource == "eviction":
        if bound != node:
            return f"node {node} can only evict pods with spec.nodeName set to itself"
        return None
    return f'unexpected operation "{operation}"'


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def _modified(a: Mapping[str, str], b: Mapping[str, str]) -> set[str]:
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k) or (k in a) != (k in b)}


#: The kubelet's own labels (k8s.io/kubelet/pkg/apis, well_known_labels.go), which a node may
#: set although they are in kubernetes.io.
_KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "kubernetes.io/os",
        "kubernetes.io/arch",
    }
)
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _forbidden_label(key: str) -> bool:
    prefix = key.split("/", 1)[0] if "/" in key else ""
    if prefix == "node-restriction.kubernetes.io" or prefix.endswith(
        ".node-restriction.kubernetes.io"
    ):
        return True
    kubernetes = prefix in ("kubernetes.io", "k8s.io") or prefix.endswith(
        (".kubernetes.io", ".k8s.io")
    )
    kubelet = key in _KUBELET_LABELS or any(
        prefix == ns or prefix.endswith("." + ns) for ns in _KUBELET_LABEL_NAMESPACES
    )
    return kubernetes and not kubelet
