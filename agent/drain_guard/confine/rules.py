"""What an agent may write on its own Node, said once (pure).

Three checkers confine the agent's Node writes: the ValidatingAdmissionPolicy
``drain-guard-node-confinement`` (CEL, daemonset/base/admission-policy.yaml; Kubernetes 1.30+,
OpenShift 4.17+), the admission webhook of OpenShift 4.15/4.16 (``confine.admission``, on the
Node before and after) and the node proxy of the systemd install (``confine.nodeaccess``, on
the agent's JSON Patch). Both Python checkers ask these predicates; the CEL says the same
rule in its own language, and tests/controlplane/test_confinement_agreement.py runs the
policy on a real API server and these predicates over the same generated cases, case by case.

The rule: annotations only; of them ``desiredDrain`` and drain-guard's own keys
(:data:`AGENT_KEYS`; ``released-by`` only removed, never written; values of at most
:data:`MAX_VALUE_BYTES` bytes); ``desiredDrain`` unchanged, or one step: a hold (``drain-X`` to
``hold-drain-X``) or a release (back); a hold never of the request in ``lastAppliedDrain``
(invariant 1), and always with its record (``held-drain`` is the held request).
"""

from __future__ import annotations

from collections.abc import Mapping

from drain_guard import protocol

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
    "annotations_problem",
    "drain_step_problem",
    "event_message_problem",
    "hold_problem",
    "key_problem",
]

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
