"""What a node identity (user ``system:node:<name>``, group ``system:nodes``) may do: the Node
authorizer and the NodeRestriction admission plugin of kube-apiserver, as far as the resources
the simulator serves go.

Checked line by line against Kubernetes' source (read, not copied): ``pkg/auth/nodeidentifier``
(a node is a user named ``system:node:<name>`` in group ``system:nodes``),
``plugin/pkg/auth/authorizer/node/node_authorizer.go`` (secrets, configmaps, volumes, leases,
CSINodes and a few more are authorized through the node/pod graph; every other resource against
the static ``NodeRules()`` of ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``) and
``plugin/pkg/admission/noderestriction/admission.go`` (a node may create and modify its own Node
only, not its taints nor labels outside the kubelet's set; may delete, evict and update the
status of pods bound to it only; may create mirror pods only), with the plugin's messages.

Modelled as of Kubernetes 1.28/1.29 (OpenShift 4.15/4.16): without the
``AuthorizeNodeWithSelectors`` gate (1.31+), nodes and pods fall to the static rules, so a node
may read every Node and pod and patch every Node (NodeRestriction then refuses all but its
own). Events are in the static rules for the core group only (not ``events.k8s.io``), with no
admission check: a node may create and patch Events in any namespace, about any object. Not
modelled: the graph (the simulator grants no node any secret, configmap or volume), leases,
CSINodes, ResourceSlices, service account tokens, ``spec.configSource``, and of a mirror pod's
checks the owner's UID and its references to secrets, configmaps and claims. A denial of
authorization is RBAC's message (no authorizer allowed it); a denial of admission is
``Forbidden`` with the plugin's reason.
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
#: NodeRules() (1.28/1.29), the rules on resources the simulator serves or a node commonly uses.
NODE_RULES: tuple[_Rule, ...] = (
    _rule("authentication.k8s.io", "tokenreviews", "create"),
    _rule("authorization.k8s.io", "subjectaccessreviews localsubjectaccessreviews", "create"),
    _rule("", "services", _READ),
    _rule("", "nodes", "create get list watch"),
    _rule("", "nodes/status", "update patch"),
    _rule("", "nodes", "update patch"),
    _rule("", "events", "create update patch"),
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
    if operation == "CREATE" and new is not None:
        forbidden = _forbidden_labels(_modified(_labels(new), {}))
        if forbidden:
            return f'node "{node}" is not allowed to set the following labels: {forbidden}'
    if operation == "UPDATE" and old is not None and new is not None:
        if (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints"):
            return f'node "{node}" is not allowed to modify taints'
        forbidden = _forbidden_labels(_modified(_labels(old), _labels(new)))
        if forbidden:
            return f"is not allowed to modify labels: {forbidden}"
    return None


def _admit_pod(
    node: str,
    operation: str,
    subresource: str,
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
) -> str | None:
    if subresource == "":
        if operation == "CREATE":
            return _admit_mirror_pod(node, new or {})
        if operation == "DELETE":
            if _bound(old) != node:
                return f'node "{node}" can only delete pods with spec.nodeName set to itself'
            return None
        return (
            f'unexpected operation "{operation}", node "{node}" can only create and delete'
            " mirror pods"
        )
    if subresource == "status":
        if operation != "UPDATE":
            return f'unexpected operation "{operation}"'
        if _bound(old) != node:
            return (
                f'node "{node}" can only update pod status for pods with spec.nodeName set'
                " to itself"
            )
        if _labels(old or {}) != _labels(new or {}):
            return f'node "{node}" cannot update labels through pod status'
        return None
    if subresource == "eviction":
        if operation != "CREATE":
            return f"unexpected operation {operation}"
        if _bound(old) != node:
            return f"node {node} can only evict pods with spec.nodeName set to itself"
        return None
    return f"unexpected pod subresource \"{subresource}\", only 'status' and 'eviction' are allowed"


def _admit_mirror_pod(node: str, pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    if "kubernetes.io/config.mirror" not in (meta.get("annotations") or {}):
        return (
            'pod does not have "kubernetes.io/config.mirror" annotation, node'
            f' "{node}" can only create mirror pods'
        )
    if _bound(pod) != node:
        return f'node "{node}" can only create pods with spec.nodeName set to itself'
    owners = meta.get("ownerReferences") or []
    if len(owners) > 1:
        return f'node "{node}" can only create pods with a single owner reference set to itself'
    owner = owners[0] if owners else {}
    if (owner.get("apiVersion"), owner.get("kind"), owner.get("name")) != ("v1", "Node", node):
        return f'node "{node}" can only create pods with an owner reference set to itself'
    if not owner.get("controller"):
        return f'node "{node}" can only create pods with a controller owner reference set to itself'
    if owner.get("blockOwnerDeletion"):
        return f'node "{node}" must not set blockOwnerDeletion on an owner reference'
    if (pod.get("spec") or {}).get("serviceAccountName"):
        return f'node "{node}" can not create pods that reference a service account'
    return None


def _bound(pod: Mapping[str, Any] | None) -> str | None:
    bound: str | None = ((pod or {}).get("spec") or {}).get("nodeName")
    return bound


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


def _forbidden_labels(keys: set[str]) -> str:
    """The keys a node may not set, sorted and joined as the plugin reports them ("" if none)."""
    return ", ".join(sorted(k for k in keys if _forbidden_label(k)))


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
