"""The admission webhook's decisions (pure): what drain-guard's identities may write.

OpenShift 4.15/4.16 (Kubernetes 1.28/1.29) has no ValidatingAdmissionPolicy and no node-name
claim in service-account tokens, so ``drain-guard webhook`` (drain_guard.programs.webhook, the HTTP
part) applies the rules of daemonset/base/admission-policy.yaml itself, as OpenShift's
network-node-identity webhook confines each node's ovnkube. A bound token carries the name
and uid of the pod it was made for (``authentication.kubernetes.io/pod-name``, ``pod-uid``);
the webhook looks that pod up and, from its owner and ``spec.nodeName``, knows the node:

- an agent (the agents' account exactly, ``--agent-account``: a renamed install's is written
  into the webhook's flags by the renamed-namespace transformer) may change
  only its own Node's ``desiredDrain`` (hold and release, docs/protocol.md) and drain-guard's
  own keys, create and
  delete budgets of the shield's shape on its own node's build pods in MCO's namespace, and
  write Events about its own Node (and pool Events related to it: ``PoolRolloutHeld``,
  ``PoolRolloutReleased``);
- the central shield (an account whose name holds ``drain-guard-shield``: with any prefix or
  suffix, as the policy drain-guard-shield-confinement matches it on 1.30+) may create and
  delete budgets of the shield's shape in MCO's namespace, on a pod that exists, and nothing
  else;
- a pod that runs as an agent's service account is admitted only as the DaemonSet ships it
  (the one read-only host path, UID 65532, no privilege): the same rules as the policy
  drain-guard-pod-confinement.

:func:`lookups` names the pods a request's decision reads; the caller fetches them and
:func:`decide` decides. A request that cannot be tied to a live agent pod is denied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drain_guard.confine import rules
from drain_guard.confine.rules import EVENT_NAMESPACE

__all__ = [
    "AGENT_ACCOUNT",
    "POD_NAME_EXTRA",
    "POD_UID_EXTRA",
    "SHIELD_NAME",
    "PodKey",
    "Verdict",
    "decide",
    "lookups",
]

Obj = Mapping[str, Any]

SA_PREFIX = "system:serviceaccount:"
#: The agents' service account, ``namespace:name``, exactly (``--agent-account``: a renamed
#: install's, which the renamed-namespace transformer writes into the webhook's flags).
AGENT_ACCOUNT = "drain-guard:drain-guard"
#: The central shield's account (systemd's cluster side): any name that holds this, as the
#: policy and the webhook configuration match it (a namePrefix or nameSuffix stays confined).
SHIELD_NAME = "drain-guard-shield"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""


ALLOW = Verdict(True)


def _deny(message: str) -> Verdict:
    return Verdict(False, f"drain-guard: {message}")


@dataclass(frozen=True)
class PodKey:
    namespace: str
    name: str


@dataclass(frozen=True)
class Caller:
    """A drain-guard service account: ``namespace`` and ``name`` from the username, and
    whether it is the central shield's (else the agents')."""

    namespace: str
    name: str
    is_shield: bool


def caller(request: Obj, agent: str) -> Caller | None:
    """The drain-guard service account making the request (``agent``, ``namespace:name``,
    exactly; or the central shield's), or None for anyone else."""
    username = str(_get(request, "userInfo", "username") or "")
    if not username.startswith(SA_PREFIX):
        return None
    namespace, _, name = username[len(SA_PREFIX) :].partition(":")
    if not namespace or ":" in name:
        return None
    if username == SA_PREFIX + agent:
        return Caller(namespace, name, is_shield=False)
    if SHIELD_NAME in name:
        return Caller(namespace, name, is_shield=True)
    return None


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _one_extra(request: Obj, key: str) -> str | None:
    values = _get(request, "userInfo", "extra", key)
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str):
        return values[0] or None
    return None


def _resource(request: Obj) -> tuple[str, str]:
    return str(_get(request, "resource", "resource") or ""), str(request.get("subResource") or "")


def _subject(request: Obj) -> Obj:
    """The object as it is after the request, or as it was before a DELETE."""
    key = "oldObject" if request.get("operation") == "DELETE" else "object"
    found = request.get(key)
    return found if isinstance(found, Mapping) else {}


def lookups(request: Obj, agent: str = AGENT_ACCOUNT) -> tuple[PodKey, ...]:
    """The pods :func:`decide` reads for ``request``: the calling agent's own pod (from its
    token's pod-name extra), and for an agent's or the shield's budget the pod that owns it."""
    who = caller(request, agent)
    resource, _ = _resource(request)
    if who is None or resource == "pods":
        return ()
    keys: list[PodKey] = []
    pod_name = _one_extra(request, POD_NAME_EXTRA)
    if not who.is_shield and pod_name is not None:
        keys.append(PodKey(who.namespace, pod_name))
    if resource == "poddisruptionbudgets" and request.get("operation") == "CREATE":
        owners = _get(request, "object", "metadata", "ownerReferences")
        if isinstance(owners, list) and len(owners) == 1 and isinstance(owners[0], Mapping):
            keys.append(PodKey(str(request.get("namespace") or ""), str(owners[0].get("name"))))
    return tuple(keys)


def decide(request: Obj, pods: Mapping[PodKey, Obj | None], agent: str = AGENT_ACCOUNT) -> Verdict:
    """Allow or deny one AdmissionReview request; ``pods`` holds what :func:`lookups` named
    (None: not found); ``agent`` is the agents' account, ``namespace:name``. Requests of
    anyone but drain-guard's identities are allowed: the webhook's matchConditions send it
    only theirs, and pods that run as the agents' account."""
    resource, subresource = _resource(request)
    if resource == "pods":
        return review_pod(request, agent)
    who = caller(request, agent)
    if who is None:
        return ALLOW
    if who.is_shield:
        if resource != "poddisruptionbudgets" or subresource:
            return _deny("the central shield writes budgets only")
        return review_budget(request, pods, node=None)
    node = _caller_node(request, who, pods)
    if isinstance(node, Verdict):
        return node
    if resource == "nodes" and not subresource:
        return review_node(request, node)
    if resource == "poddisruptionbudgets" and not subresource:
        return review_budget(request, pods, node=node)
    if resource == "events" and not subresource:
        return review_event(request, node)
    return _deny(f"an agent may not write {resource}{'/' + subresource if subresource else ''}")


def _caller_node(request: Obj, who: Caller, pods: Mapping[PodKey, Obj | None]) -> str | Verdict:
    """The node of the agent pod the request's token was made for, or why there is none."""
    pod_name = _one_extra(request, POD_NAME_EXTRA)
    pod_uid = _one_extra(request, POD_UID_EXTRA)
    if pod_name is None or pod_uid is None:
        return _deny("the request has no pod-name and pod-uid claim (a pod-bound token is needed)")
    pod = pods.get(PodKey(who.namespace, pod_name))
    if pod is None:
        return _deny(f"the token's pod {who.namespace}/{pod_name} does not exist")
    if _get(pod, "metadata", "uid") != pod_uid:
        return _deny(f"the token's pod {who.namespace}/{pod_name} was replaced (uid differs)")
    if _get(pod, "spec", "serviceAccountName") != who.name:
        return _deny(f"the pod {who.namespace}/{pod_name} does not run as {who.name}")
    owners = _get(pod, "metadata", "ownerReferences")
    controllers = [
        o for o in owners or () if isinstance(o, Mapping) and o.get("controller") is True
    ]
    if not (
        len(controllers) == 1
        and controllers[0].get("apiVersion") == "apps/v1"
        and controllers[0].get("kind") == "DaemonSet"
        and controllers[0].get("name") == who.name
    ):
        return _deny(f"the pod {who.namespace}/{pod_name} is not the {who.name} DaemonSet's")
    node = _get(pod, "spec", "nodeName")
    if not isinstance(node, str) or not node:
        return _deny(f"the pod {who.namespace}/{pod_name} is bound to no node")
    return node


# --- Nodes --------------------------------------------------------------------------------


def _annotations(obj: Obj) -> Mapping[str, str]:
    found = _get(obj, "metadata", "annotations")
    return found if isinstance(found, Mapping) else {}


def review_node(request: Obj, node: str) -> Verdict:
    """An agent's Node UPDATE: its own Node, annotations only, the protocol's shapes."""
    if request.get("operation") != "UPDATE":
        return _deny("an agent only updates a Node")
    new, old = request.get("object") or {}, request.get("oldObject") or {}
    if request.get("name") != node or _get(new, "metadata", "name") != node:
        return _deny(f"an agent may change only the Node it runs on ({node})")
    if new.get("spec") != old.get("spec"):
        return _deny("an agent may not change a Node's spec")
    for field in ("labels", "ownerReferences", "finalizers"):
        if _get(new, "metadata", field) != _get(old, "metadata", field):
            return _deny(f"an agent may not change a Node's {field}")
    problem = rules.annotations_problem(_annotations(old), _annotations(new))
    return ALLOW if problem is None else _deny(problem)


# --- budgets, Events, the agent's pod: the rules of confine.rules --------------------------


def review_budget(request: Obj, pods: Mapping[PodKey, Obj | None], node: str | None) -> Verdict:
    """A budget CREATE or DELETE of the shield's shape, in MCO's namespace, on a build pod
    (of the agent's own node; any node for the central shield, ``node`` None) that exists."""
    operation = str(request.get("operation"))
    budget = _subject(request)
    namespace = request.get("namespace")
    problem = rules.budget_namespace_problem(namespace) or rules.budget_problem(
        operation, budget, node
    )
    if problem is None and operation == "CREATE":
        owner = budget["metadata"]["ownerReferences"][0]
        pod = pods.get(PodKey(str(namespace), str(owner.get("name"))))
        problem = rules.budget_owner_problem(budget, pod)
    return ALLOW if problem is None else _deny(problem)


def review_event(request: Obj, node: str) -> Verdict:
    """Events about the agent's own Node, as its recorder writes them, and its pool Events
    (``rules.event_problem``); an update only of its own (``rules.updated_event_problem``)."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return _deny("an agent never deletes an Event")
    if request.get("namespace") != EVENT_NAMESPACE:
        return _deny(f"an agent writes Events in {EVENT_NAMESPACE} only")
    event, old = request.get("object"), request.get("oldObject")
    if not isinstance(event, Mapping) or (operation == "UPDATE" and not isinstance(old, Mapping)):
        return _deny("the Event is missing from the request")
    problem = rules.event_problem(event, node)
    if problem is None and operation == "UPDATE" and isinstance(old, Mapping):
        problem = rules.updated_event_problem(old, node)
    return ALLOW if problem is None else _deny(problem)


def review_pod(request: Obj, agent: str) -> Verdict:
    """A pod that runs as the agents' service account (``agent``, ``namespace:name``), as the
    DaemonSet ships it (``rules.agent_pod_problem``, the policy drain-guard-pod-confinement)."""
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        return _deny("the pod is missing from the request")
    spec = pod.get("spec") or {}
    account = f"{request.get('namespace') or ''}:{spec.get('serviceAccountName') or ''}"
    if account != agent:
        return ALLOW
    problem = rules.agent_pod_problem(pod)
    return ALLOW if problem is None else _deny(problem)
