"""One pod model for the build-pod guard and the shield, and the rules they share (pure).

Both read the same pods (the agent's one watch of the pods bound to its node), so they must
agree on which pod is a build pod and on whether it still runs: a pod the guard holds a drain
for is a pod the shield keeps a budget on, and the other way round.

Which pods may hold a drain at all is the :class:`PodScope`: by default only pods of MCO's
namespace, where MCO's build pods run in every version and where only cluster administrators
and MCO can create pods. A pod elsewhere (any user can create a pod carrying a build label,
and bind it to a node with ``spec.nodeName``) holds nothing unless the operator opts its
namespace in with ``--build-pod-namespace``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drain_guard.core.selectors import MCO_NAMESPACE, BuildPodSelector, OwnerRef

#: Phases after which a pod runs no more. Every other phase counts as running: ``Pending``
#: (a drain would evict it before it starts; its budget must be in force when it runs) and
#: ``Unknown`` (its node stopped reporting; the pod may well still be running, and the
#: eviction API still honours budgets for it).
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
#: ``--build-pod-namespace`` value that opts every namespace in.
ALL_NAMESPACES = "*"

#: The labels of the shield's budgets (drain_guard.shield.loop), which admission checks too
#: (drain_guard.confine.admission): who keeps the budget, and the node of the pod it shields
#: (a label value: the node name, or a hash if too long).
MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = "drain-guard"
NODE_KEY = "drain-guard.io/node"
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def node_label_value(node: str) -> str:
    """The node name as a label value; names longer than 63 characters become a hash."""
    if len(node) <= 63 and _LABEL_VALUE_RE.match(node):
        return node
    return "sha256-" + hashlib.sha256(node.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Pod:
    """The parts of a Pod the guard and the shield read."""

    namespace: str
    name: str
    phase: str = "Pending"
    labels: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[OwnerRef, ...] = ()
    #: ``metadata.deletionTimestamp`` is set: the pod is going away anyway.
    deleting: bool = False
    uid: str = ""
    node: str = ""

    @property
    def running(self) -> bool:
        """Not finished and not going away: what a drain would harm, and a budget protects."""
        return self.phase not in FINISHED_PHASES and not self.deleting

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner_kinds(self) -> tuple[str, ...]:
        return tuple(owner.kind for owner in self.owners)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Pod:
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            phase=str((obj.get("status") or {}).get("phase") or "Pending"),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            owners=tuple(
                OwnerRef(str(o.get("kind", "")), str(o.get("name", "")))
                for o in meta.get("ownerReferences") or ()
            ),
            deleting=meta.get("deletionTimestamp") is not None,
            uid=str(meta.get("uid", "")),
            node=str((obj.get("spec") or {}).get("nodeName") or ""),
        )


@dataclass(frozen=True)
class PodScope:
    """The namespaces whose pods may hold a drain; ``namespaces`` None means every one."""

    namespaces: frozenset[str] | None = frozenset({MCO_NAMESPACE})

    @classmethod
    def with_opt_ins(cls, extra: Iterable[str]) -> PodScope:
        """MCO's namespace and ``extra`` (``*`` in it: every namespace)."""
        names = set(extra)
        if ALL_NAMESPACES in names:
            return cls(None)
        return cls(frozenset({MCO_NAMESPACE, *names}))

    def contains(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def names(self) -> list[str]:
        """For ``/status`` and logs: sorted, MCO's first; ``["*"]`` for every namespace."""
        if self.namespaces is None:
            return [ALL_NAMESPACES]
        return sorted(self.namespaces, key=lambda n: (n != MCO_NAMESPACE, n))


def watch_namespace(scope: PodScope, also: Iterable[str] = ()) -> str | None:
    """The one namespace the node's pod watch must cover (the scope's, and ``also``: where
    the shield works), or None when it must watch every namespace."""
    if scope.namespaces is None:
        return None
    names = set(scope.namespaces) | set(also)
    return names.pop() if len(names) == 1 else None


def is_build_pod(pod: Pod, selectors: Sequence[BuildPodSelector], scope: PodScope) -> bool:
    """In scope and matched by a build-pod selector (running or not)."""
    return scope.contains(pod.namespace) and any(
        s.matches(pod.namespace, pod.labels, pod.owners) for s in selectors
    )


def running_build_pods(
    pods: Iterable[Pod], selectors: Sequence[BuildPodSelector], scope: PodScope
) -> list[Pod]:
    """The build pods a drain would harm: in scope, matching, still running."""
    return [p for p in pods if p.running and is_build_pod(p, selectors, scope)]


def running_blocking_pods(
    pods: Iterable[Pod], selectors: Sequence[BuildPodSelector], namespaces: frozenset[str]
) -> list[Pod]:
    """The operator's blocking pods that hold a drain: in an opted-in namespace, matching, and
    in phase ``Running`` (not Pending: nothing of theirs runs yet; not Succeeded or Failed: a
    Completed job holds nothing), and not being deleted."""
    return [
        p
        for p in pods
        if p.phase == "Running"
        and not p.deleting
        and p.namespace in namespaces
        and any(s.matches(p.namespace, p.labels, p.owners) for s in selectors)
    ]


#: Only MCO's namespace: the default.
DEFAULT_SCOPE = PodScope()
