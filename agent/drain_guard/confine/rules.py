"""What an agent may write, said once (pure): its own Node's annotations, the budgets of its
node's build pods, Events about its Node, and what its own pod may be.

Three checkers confine an agent: the ValidatingAdmissionPolicies of
daemonset/base/admission-policy.yaml (CEL; Kubernetes 1.30+, OpenShift 4.17+), the admission
webhook of OpenShift 4.15/4.16 (``confine.admission``, on the objects before and after) and
the node proxy of the systemd install (``confine.nodeaccess``, on the agent's requests: its
Node's JSON Patches and its Events; it may be stricter, never looser). The Python checkers
ask these predicates; the CEL says the same rules in its own language, and
tests/controlplane/test_confinement_agreement.py runs the policies on a real API server and
these predicates over the same generated cases, case by case.

The rule: annotations only; of them ``desiredDrain`` and drain-guard's own keys
(:data:`AGENT_KEYS`; ``released-by`` only removed, never written; values of at most
:data:`MAX_VALUE_BYTES` bytes); ``desiredDrain`` unchanged, or one step: a hold (``drain-X`` to
``hold-drain-X``) or a release (back); a hold never of the request in ``lastAppliedDrain``
(invariant 1), and always with its record (``held-drain`` is the held request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from drain_guard import protocol
from drain_guard.core.pods import MANAGED_BY, MANAGED_BY_KEY, NODE_KEY, node_label_value
from drain_guard.core.selectors import MCO_NAMESPACE

__all__ = [
    "AGENT_KEYS",
    "BUILD_JOB_KEY",
    "BUILD_POD_KEYS",
    "EVENT_COMPONENT",
    "EVENT_NAMESPACE",
    "HOST_PATH",
    "MAX_VALUE_BYTES",
    "MCO_OWN_KEY",
    "POD_USER",
    "POD_VOLUME_KINDS",
    "agent_pod_problem",
    "annotations_problem",
    "budget_namespace_problem",
    "budget_owner_problem",
    "budget_problem",
    "budget_shape_problem",
    "drain_step_problem",
    "event_message_problem",
    "event_problem",
    "hold_problem",
    "key_problem",
    "updated_event_problem",
]

Obj = Mapping[str, Any]

#: The annotations an agent writes on its Node besides ``desiredDrain`` (``released-by`` it
#: only removes: who released is the releaser's to write).
AGENT_KEYS = frozenset((*protocol.OWNED_KEYS, *protocol.RELEASED_KEYS))
#: The longest value of one of them (the agent cuts its texts to it, in bytes).
MAX_VALUE_BYTES = protocol.MAX_DETAIL_BYTES
#: Where a Node's Events live (a cluster-scoped object's Events are in ``default``).
EVENT_NAMESPACE = "default"
#: The Event recorder's component (drain_guard.node.events): pinned, so an agent cannot pose
#: as the kubelet or MCO in ``oc get events``.
EVENT_COMPONENT = "drain-guard"
_DRAIN = "drain-"
#: Labels by which the shield's budgets select build pods (the default build-pod selectors'
#: keys); a budget must carry one, and never ``k8s-app`` (MCO's own controller and builder).
BUILD_POD_KEYS = (
    "openshift.io/build.name",
    "machineconfiguration.openshift.io/buildPod",
    "machineconfiguration.openshift.io/on-cluster-layering",
)
BUILD_JOB_KEY = "batch.kubernetes.io/job-name"
MCO_OWN_KEY = "k8s-app"
#: The agent pod's one host path, its user, and the volume kinds it uses.
HOST_PATH = "/sysroot/ostree"
POD_USER = 65532
POD_VOLUME_KINDS = frozenset(("hostPath", "emptyDir", "secret", "configMap", "projected"))


def key_problem(key: str, value: str | None) -> str | None:
    """Why an agent may not set the annotation ``key`` of its Node to ``value`` (None: remove
    it), or None if it may. ``desiredDrain`` is not asked here (:func:`drain_step_problem`)."""
    if key not in AGENT_KEYS:
        return f"an agent may not change the annotation {key}"
    if key == protocol.RELEASED_BY and value is not None:
        return f"an agent may remove {protocol.RELEASED_BY} but not write it"
    if value is not None and len(value.encode()) > MAX_VALUE_BYTES:
        return f"{key} is longer than {MAX_VALUE_BYTES} bytes"
    return None


def drain_step_problem(old: str, new: str) -> str | None:
    """Why ``desiredDrain`` may not go from ``old`` to ``new`` ("" when absent), or None: it
    stays, or takes one step, a hold (``drain-X`` to ``hold-drain-X``) or a release (back)."""
    hold = protocol.HOLD_PREFIX
    if new == old or (old.startswith(_DRAIN) and new == hold + old):
        return None
    if new.startswith(_DRAIN) and old == hold + new:
        return None
    return "desiredDrain may only go from drain-X to hold-drain-X (hold) or back (release)"


def hold_problem(old: str, new: str, last_applied: str, held_drain: str | None) -> str | None:
    """Why a hold step from ``old`` to ``new`` may not be written with these values of
    ``lastAppliedDrain`` ("" when absent) and ``held-drain`` after the write, or None (also
    when the step is no hold)."""
    if new != protocol.HOLD_PREFIX + old:
        return None
    if old == last_applied:
        return "a drain request equal to lastAppliedDrain may not be held"
    if held_drain != old:
        return f"a hold must record the held request in {protocol.HELD_DRAIN}"
    return None


def annotations_problem(before: Mapping[str, str], after: Mapping[str, str]) -> str | None:
    """The rule over a Node's annotations before and after an agent's write (the webhook's
    view, and the policy's): why it may not be written, or None."""
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    for key in changed:
        if key != protocol.DESIRED_DRAIN:
            problem = key_problem(key, after.get(key))
            if problem is not None:
                return problem
    old = before.get(protocol.DESIRED_DRAIN, "")
    new = after.get(protocol.DESIRED_DRAIN, "")
    last_applied = after.get(protocol.LAST_APPLIED_DRAIN, "")
    return drain_step_problem(old, new) or hold_problem(
        old, new, last_applied, after.get(protocol.HELD_DRAIN)
    )


def event_message_problem(message: object) -> str | None:
    """Why an Event's message is not one an agent writes (the recorder cuts at
    :data:`MAX_VALUE_BYTES` bytes), or None; an absent message is an empty one."""
    if len(str(message or "").encode()) > MAX_VALUE_BYTES:
        return f"an agent's Event message is at most {MAX_VALUE_BYTES} bytes"
    return None


def _map(obj: object, *path: str) -> Obj:
    """The mapping at ``path`` in ``obj``; an empty one where there is none."""
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj if isinstance(obj, Mapping) else {}


# --- Events -------------------------------------------------------------------------------


def event_problem(event: Obj, node: str) -> str | None:
    """Why an agent of ``node`` may not write ``event`` (as it is after a CREATE or an UPDATE),
    or None: about its own Node, or its own kind of pool Event (:func:`_pool_event_problem`);
    its source, if named, its node; a message of at most :data:`MAX_VALUE_BYTES` bytes; and
    reported by :data:`EVENT_COMPONENT`."""
    involved = _map(event, "involvedObject")
    if involved.get("kind") == protocol.POOL_KIND:
        problem = _pool_event_problem(event, node)
        if problem is not None:
            return problem
    elif not _about_node(involved, node):
        return f"an agent may write Events about its own Node ({node}) only"
    source = _map(event, "source")
    if source.get("host", node) != node:
        return "an Event's source host must be the agent's own node"
    too_long = event_message_problem(event.get("message"))
    if too_long is not None:
        return too_long
    if event.get("reportingComponent") != EVENT_COMPONENT or (
        source.get("component", EVENT_COMPONENT) != EVENT_COMPONENT
    ):
        return f"an Event's reporting component must be {EVENT_COMPONENT}"
    return None


def updated_event_problem(old: Obj, node: str) -> str | None:
    """Why an agent of ``node`` may not update the Event that was ``old``, or None: only its
    own Events (reported by :data:`EVENT_COMPONENT`) about its own Node, or its own pool
    Events (a reason of its, related to its Node, reported by its own instance)."""
    involved = _map(old, "involvedObject")
    related = _map(old, "related")
    own_pool_event = (
        involved.get("kind") == protocol.POOL_KIND
        and old.get("reason") in protocol.POOL_EVENT_REASONS
        and related.get("kind") == "Node"
        and related.get("name") == node
        and old.get("reportingInstance") == f"{EVENT_COMPONENT}-{node}"
    )
    if not (_about_node(involved, node) or own_pool_event) or (
        old.get("reportingComponent") != EVENT_COMPONENT
    ):
        return f"an agent may update only its own Events about its own Node ({node})"
    return None


def _about_node(involved: Obj, node: str) -> bool:
    return (
        involved.get("kind") == "Node"
        and involved.get("name") == node
        and not involved.get("namespace")
    )


def _pool_event_problem(event: Obj, node: str) -> str | None:
    """Why ``event`` about a MachineConfigPool is not the agent's own kind (None if it is):
    one of the pool reasons, related to its own Node, reported by its own instance from it,
    its message at most 1024 bytes. Any pool: which one the node is in is not a checker's to
    know."""
    involved = _map(event, "involvedObject")
    related = _map(event, "related")
    if not (
        involved.get("apiVersion") == protocol.POOL_API_VERSION
        and involved.get("name")
        and not involved.get("namespace")
        and event.get("reason") in protocol.POOL_EVENT_REASONS
        and related.get("apiVersion") == "v1"
        and related.get("kind") == "Node"
        and related.get("name") == node
        and not related.get("namespace")
        and event.get("reportingInstance") == f"{EVENT_COMPONENT}-{node}"
        and _map(event, "source").get("host") == node
        and event_message_problem(event.get("message")) is None
    ):
        return (
            "an agent's Event about a MachineConfigPool is a"
            f" {' or '.join(protocol.POOL_EVENT_REASONS)}"
            f" related to its own Node ({node}) and reported by {EVENT_COMPONENT}-{node}"
        )
    return None


# --- budgets ------------------------------------------------------------------------------


def budget_problem(operation: str, budget: Obj, node: str | None) -> str | None:
    """Why an agent of ``node`` (None: the central shield, any node's) may not ``operation``
    (CREATE, UPDATE, DELETE) the PodDisruptionBudget ``budget`` (after a CREATE, before a
    DELETE), or None: a budget of the shield's, labelled for its node; created only of the
    shield's shape (:func:`budget_shape_problem`), never changed. Its namespace is MCO's
    (:func:`budget_namespace_problem`; the policy leaves that to RBAC) and, for a CREATE, its
    owner an existing pod it selects (:func:`budget_owner_problem`; the policy cannot look a
    pod up): the webhook's checks beside this one."""
    if operation not in ("CREATE", "DELETE"):
        return "drain-guard never changes a budget"
    labels = _map(budget, "metadata", "labels")
    if labels.get(MANAGED_BY_KEY) != MANAGED_BY or NODE_KEY not in labels:
        return f"a budget must be labelled {MANAGED_BY_KEY}={MANAGED_BY} and {NODE_KEY}"
    if node is not None and labels[NODE_KEY] != node_label_value(node):
        return f"an agent may create or delete only its own node's ({node}) budgets"
    return budget_shape_problem(budget) if operation == "CREATE" else None


def budget_namespace_problem(namespace: object) -> str | None:
    """Why a budget may not be kept in ``namespace``, or None (MCO's)."""
    if namespace != MCO_NAMESPACE:
        return f"drain-guard keeps budgets in {MCO_NAMESPACE} only, not {namespace}"
    return None


def budget_shape_problem(budget: Obj) -> str | None:
    """Why ``budget`` is not shaped like the shield's (None if it is): one Pod owner, neither
    controller nor blocking its deletion; ``minAvailable: 1``; a selector of match labels with
    a build-pod label and never MCO's own ``k8s-app``."""
    owners = _map(budget, "metadata").get("ownerReferences")
    if not (
        isinstance(owners, Sequence)
        and len(owners) == 1
        and isinstance(owners[0], Mapping)
        and owners[0].get("apiVersion") == "v1"
        and owners[0].get("kind") == "Pod"
        and not owners[0].get("controller")
        and not owners[0].get("blockOwnerDeletion")
    ):
        return "a budget must be owned by exactly one Pod"
    spec = _map(budget, "spec")
    if spec.get("minAvailable") != 1 or "maxUnavailable" in spec:
        return "a budget must be minAvailable: 1"
    selector = _map(spec, "selector")
    match = _map(selector, "matchLabels")
    if (
        "selector" not in spec
        or "matchExpressions" in selector
        or MCO_OWN_KEY in match
        or not (
            any(k in match for k in BUILD_POD_KEYS)
            or str(match.get(BUILD_JOB_KEY, "")).startswith("build-")
        )
    ):
        return "a budget must select build pods by label (and never k8s-app pods)"
    return None


def budget_owner_problem(budget: Obj, pod: Obj | None) -> str | None:
    """Why ``pod`` (None: not found) is not the owner a created ``budget`` of the shield's
    shape must have, or None: the pod its owner reference names (the same uid), on the node
    its label names, selected by it."""
    owner = _map(budget, "metadata").get("ownerReferences", [{}])[0]
    if pod is None or _map(pod, "metadata").get("uid") != owner.get("uid"):
        return "a budget's owner must be an existing pod in its namespace"
    pod_node = str(_map(pod, "spec").get("nodeName") or "")
    if _map(budget, "metadata", "labels").get(NODE_KEY) != node_label_value(pod_node):
        return f"a budget's {NODE_KEY} label must be its pod's node"
    pod_labels = _map(pod, "metadata", "labels")
    selector = _map(budget, "spec", "selector", "matchLabels")
    if any(pod_labels.get(k) != v for k, v in selector.items()):
        return "a budget must select the pod that owns it"
    return None


# --- the agent's pod ----------------------------------------------------------------------


def agent_pod_problem(pod: Obj) -> str | None:
    """Why a pod that runs as the agents' service account may not be created as ``pod``, or
    None: as the DaemonSet ships it (the one read-only host path, UID and GID
    :data:`POD_USER`, no privilege, no host namespace or port)."""
    spec = _map(pod, "spec")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        return "the agent's pod may not share the host's network, PID or IPC namespace"
    host_volumes = set()
    for volume in spec.get("volumes") or ():
        if not set(volume) - {"name"} <= POD_VOLUME_KINDS:
            return (
                "the agent's pod may use hostPath, emptyDir, secret, configMap and projected"
                " volumes only"
            )
        if "hostPath" in volume:
            host = _map(volume, "hostPath")
            if host.get("path") != HOST_PATH or host.get("type") != "Directory":
                return f"the agent's pod may mount one host path, {HOST_PATH}, of type Directory"
            host_volumes.add(volume.get("name"))
    security = _map(spec, "securityContext")
    containers = [
        *(spec.get("containers") or ()),
        *(spec.get("initContainers") or ()),
        *(spec.get("ephemeralContainers") or ()),
    ]
    for container in containers:
        problem = _container_problem(container, security, host_volumes)
        if problem is not None:
            return problem
    if security.get("fsGroup", POD_USER) != POD_USER or any(
        g != POD_USER for g in security.get("supplementalGroups") or ()
    ):
        return f"the agent's pod may have no group but {POD_USER}"
    if _selinux_chosen(security) or security.get("sysctls"):
        return "the agent's pod may not choose an SELinux type, user or role, or sysctls"
    return None


def _selinux_chosen(security: Obj) -> bool:
    options = _map(security, "seLinuxOptions")
    return any(options.get(k) for k in ("type", "user", "role"))


def _container_problem(container: Obj, pod: Obj, host_volumes: set[Any]) -> str | None:
    name = container.get("name")
    for mount in container.get("volumeMounts") or ():
        if mount.get("name") in host_volumes and not (
            mount.get("readOnly") is True
            and not mount.get("subPath")
            and not mount.get("subPathExpr")
            and mount.get("mountPropagation", "None") == "None"
        ):
            return (
                "the host path must be mounted read-only, whole (no subPath) and without mount"
                " propagation"
            )
    if any(p.get("hostPort") for p in container.get("ports") or ()):
        return "the agent's pod may not use host ports"
    own = _map(container, "securityContext")
    if (
        own.get("privileged")
        or own.get("allowPrivilegeEscalation") is not False
        or own.get("procMount", "Default") != "Default"
    ):
        return f"container {name}: unprivileged, with allowPrivilegeEscalation: false"
    capabilities = _map(own, "capabilities")
    if "ALL" not in (capabilities.get("drop") or ()) or capabilities.get("add"):
        return f"container {name}: must drop ALL capabilities and add none"
    for field in ("runAsUser", "runAsGroup"):
        if own.get(field, pod.get(field)) != POD_USER:
            return f"container {name}: must run as UID and GID {POD_USER}"
    seccomp = own.get("seccompProfile", pod.get("seccompProfile")) or {}
    if seccomp.get("type") != "RuntimeDefault":
        return f"container {name}: must run with the RuntimeDefault seccomp profile"
    if _selinux_chosen(own):
        return f"container {name}: may not choose an SELinux type, user or role"
    return None
