"""The shield's pure half: which build pods need a PodDisruptionBudget, and which don't.

From the pods and budgets of the shielded namespaces, :func:`plan` decides which pods need a
budget, which of our budgets are stale, which pods already have another budget (a pod
selected by two budgets makes every eviction fail with 500, so those are left alone and
reported), and which pods no label selector singles out. :class:`NodeScope` says whose pods a
shield keeps (one node's, or every node's), :class:`ShieldStatus` what ``/status`` shows.
No I/O here: the list-watches and writes are drain_guard.shield.loop's.

Budgets use ``minAvailable: 1`` over a selector that matches the one pod: the same effect as
``maxUnavailable: 0`` (no disruption allowed), but the disruption controller can compute it
for pods without a scalable controller (a Build's or Job's pod), where ``maxUnavailable``
makes it fail its sync ("found no controllers for pod") and fall back to its fail-safe.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drain_guard.core.pods import (
    DEFAULT_SCOPE,
    MANAGED_BY,
    MANAGED_BY_KEY,
    NODE_KEY,
    Pod,
    PodScope,
    is_build_pod,
    node_label_value,
)
from drain_guard.core.selectors import (
    MCO_NAMESPACE,
    BuildPodSelector,
    LabelSelector,
    SelectorError,
    parse_build_pod_selector,
)

#: Why the budget exists: ``build-pod`` or ``dependency``.
ROLE_KEY = "drain-guard.io/shield"
#: The shielded pod's name (an annotation, for humans; the ownerReference's uid is the key).
POD_ANNOTATION = "drain-guard.io/pod"
NAME_PREFIX = "drain-guard-"
#: A budget gone (404) or already there (409): answers the watch catches up with, not errors.
REGISTRY_NAMESPACE = "openshift-image-registry"

#: Where build pods run: MCO's namespace. OpenShift Build pods elsewhere are held by the
#: build-pod guard but not shielded (the agent has no rights there).
DEFAULT_NAMESPACES: tuple[str, ...] = (MCO_NAMESPACE,)
#: The pods builds depend on (the seed's drain evicted both), shielded with --shield-dependencies.
DEPENDENCY_SELECTORS: tuple[str, ...] = (
    f"{MCO_NAMESPACE}:k8s-app=machine-os-builder",
    f"{REGISTRY_NAMESPACE}:docker-registry=default",
)

_MAX_NAME = 253


class Role(enum.StrEnum):
    BUILD_POD = "build-pod"
    DEPENDENCY = "dependency"


def default_dependency_selectors() -> tuple[BuildPodSelector, ...]:
    return tuple(parse_build_pod_selector(text) for text in DEPENDENCY_SELECTORS)


def shield_namespaces(
    dependencies: bool, namespaces: Sequence[str] = DEFAULT_NAMESPACES
) -> list[str]:
    """Where the shield works: ``namespaces``, and the dependencies' with ``dependencies``."""
    names = list(dict.fromkeys(namespaces))
    for sel in default_dependency_selectors() if dependencies else ():
        if sel.namespace is not None and sel.namespace not in names:
            names.append(sel.namespace)
    return names


def budget_name(pod: str, uid: str) -> str:
    """``drain-guard-<pod>``; cut and suffixed with a hash of the uid when too long."""
    name = NAME_PREFIX + pod
    if len(name) <= _MAX_NAME:
        return name
    suffix = hashlib.sha256(uid.encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9].rstrip('-.')}-{suffix}"


@dataclass(frozen=True)
class NodeScope:
    """Whose pods a shield keeps budgets for: one node's (``node``, the per-node agent) or
    every node's (``node`` None, the central shield)."""

    node: str | None

    def covers(self, pod: Pod) -> bool:
        """``pod`` is bound to a node (a drain evicts only those), and to this one if one."""
        return bool(pod.node) and (self.node is None or pod.node == self.node)

    def owns(self, budget: BudgetState) -> bool:
        """``budget`` is one this scope keeps: drain-guard's, labelled with this node (any
        node, for every node), so stale ones left by an earlier shield are cleaned up too."""
        if budget.labels.get(MANAGED_BY_KEY) != MANAGED_BY or NODE_KEY not in budget.labels:
            return False
        return self.node is None or budget.labels[NODE_KEY] == node_label_value(self.node)

    def label_selector(self) -> str:
        """The budgets :meth:`owns`, as a label selector."""
        if self.node is None:
            return f"{MANAGED_BY_KEY}={MANAGED_BY},{NODE_KEY}"
        return f"{MANAGED_BY_KEY}={MANAGED_BY},{NODE_KEY}={node_label_value(self.node)}"

    def to_json(self) -> str:
        """The node, or ``*`` for every node (as ``/status`` shows namespaces)."""
        return "*" if self.node is None else self.node

    def __str__(self) -> str:
        return "every node" if self.node is None else f"node {self.node}"


#: The central shield's scope.
EVERY_NODE = NodeScope(None)


# --- the pure plan ------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetState:
    """The parts of a PodDisruptionBudget the plan reads."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    selector: LabelSelector
    owner_uids: tuple[str, ...] = ()
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def shields_a_build(self) -> bool:
        """A build-pod budget of any node's, in force: a build runs somewhere."""
        return (
            self.labels.get(MANAGED_BY_KEY) == MANAGED_BY
            and self.labels.get(ROLE_KEY) == Role.BUILD_POD.value
            and not self.deleting
        )

    def selects(self, pod: Pod) -> bool:
        """The eviction API's match: same namespace; a missing or empty selector selects none."""
        if pod.namespace != self.namespace:
            return False
        if self.selector.nothing or self.selector.is_empty():
            return False
        return self.selector.matches(pod.labels)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> BudgetState:
        meta = obj.get("metadata") or {}
        try:
            selector = LabelSelector.from_dict((obj.get("spec") or {}).get("selector"))
        except SelectorError:
            selector = LabelSelector(nothing=True)  # the API server would not select with it
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            selector=selector,
            owner_uids=tuple(str(o.get("uid", "")) for o in meta.get("ownerReferences") or ()),
            deleting=meta.get("deletionTimestamp") is not None,
        )


@dataclass(frozen=True)
class Want:
    """A budget to create for ``pod``."""

    pod: Pod
    role: Role
    name: str

    def manifest(self) -> dict[str, Any]:
        """The PodDisruptionBudget: selects exactly the pod, owned by it, labelled as ours
        with the pod's own node (whichever scope keeps it)."""
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "name": self.name,
                "namespace": self.pod.namespace,
                "labels": {
                    MANAGED_BY_KEY: MANAGED_BY,
                    NODE_KEY: node_label_value(self.pod.node),
                    ROLE_KEY: self.role.value,
                },
                "annotations": {POD_ANNOTATION: self.pod.name},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": self.pod.name, "uid": self.pod.uid}
                ],
            },
            "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(self.pod.labels)}},
        }


@dataclass(frozen=True)
class Held:
    """A pod the shield keeps budget ``budget`` on."""

    pod: Pod
    role: Role
    budget: str

    @property
    def key(self) -> str:
        """The budget's ``namespace/name``."""
        return f"{self.pod.namespace}/{self.budget}"


@dataclass(frozen=True)
class Conflict:
    """A pod selected by budgets not ours (``budgets``): we add none (two budgets → 500)."""

    pod: Pod
    role: Role
    budgets: tuple[str, ...]
    shielded: bool  # our budget was there first and stays; the eviction API answers 500


@dataclass(frozen=True)
class Unshieldable:
    """A pod no label selector singles out (no labels, or others share all of them)."""

    pod: Pod
    role: Role
    why: str


@dataclass(frozen=True)
class Plan:
    """What to write, and what to report."""

    create: tuple[Want, ...] = ()
    delete: tuple[BudgetState, ...] = ()
    held: tuple[Held, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    unshieldable: tuple[Unshieldable, ...] = ()

    @property
    def writes(self) -> bool:
        return bool(self.create or self.delete)


def targets(
    nodes: NodeScope,
    pods: Sequence[Pod],
    budgets: Sequence[BudgetState],
    build_selectors: Sequence[BuildPodSelector],
    scope: PodScope = DEFAULT_SCOPE,
    dependency_selectors: Sequence[BuildPodSelector] = (),
) -> list[tuple[Pod, Role]]:
    """Pods of ``nodes`` to shield: running build pods of the scope; and, while a build runs
    anywhere (one of these pods, or a build-pod budget of another node's), running pods
    matching ``dependency_selectors``."""
    local = [p for p in pods if nodes.covers(p) and p.running]
    out = [(p, Role.BUILD_POD) for p in local if is_build_pod(p, build_selectors, scope)]
    building = bool(out) or any(b.shields_a_build() for b in budgets)
    if dependency_selectors and building:
        chosen = {p.uid for p, _ in out}
        out += [
            (p, Role.DEPENDENCY)
            for p in local
            if p.uid not in chosen
            and any(s.matches(p.namespace, p.labels, p.owners) for s in dependency_selectors)
        ]
    return sorted(out, key=lambda t: (t[0].namespace, t[0].name))


def plan(
    nodes: NodeScope,
    pods: Sequence[Pod],
    budgets: Sequence[BudgetState],
    build_selectors: Sequence[BuildPodSelector],
    scope: PodScope = DEFAULT_SCOPE,
    dependency_selectors: Sequence[BuildPodSelector] = (),
    shared: Mapping[str, str] | None = None,
) -> Plan:
    """Decide from the pods the shield sees and the budgets of the shielded namespaces (pure).

    A pod of ``nodes`` gets a budget when nothing else selects it and its labels select no
    other running pod of its namespace: ``shared`` maps a pod's uid to why its labels do not
    single it out, as a list by those labels found (an agent sees only its own node's pods; a
    pod not in ``shared`` has not been checked, and its ``Want`` is checked before it is
    created). Our budgets (those ``nodes`` owns) that shield no wanted pod are stale: the pod
    finished, went away, or stopped being a build pod (or no build runs any more, for
    dependencies); at start-up this cleans up what a previous shield left.
    """
    shared = shared or {}
    by_key = {b.key: b for b in budgets}
    chosen = targets(nodes, pods, budgets, build_selectors, scope, dependency_selectors)
    pod_plans = [plan_pod(nodes, p, r, by_key, budgets, shared.get(p.uid, "")) for p, r in chosen]
    keep = {pp.held.key for pp in pod_plans if pp.held is not None}
    stale = [b for b in budgets if is_stale(nodes, b, keep)]
    return assemble(pod_plans, stale)


@dataclass(frozen=True)
class PodPlan:
    """One target pod's part of the plan: a budget kept, wanted, or not possible; a conflict."""

    held: Held | None = None
    conflict: Conflict | None = None
    unshieldable: Unshieldable | None = None
    want: Want | None = None


def plan_pod(
    nodes: NodeScope,
    pod: Pod,
    role: Role,
    by_key: Mapping[str, BudgetState],
    budgets: Iterable[BudgetState],
    why_shared: str,
) -> PodPlan:
    """:func:`plan` for one target ``pod``: ``by_key`` finds a budget by ``namespace/name``,
    ``budgets`` holds at least those of the pod's namespace, ``why_shared`` is ``shared``'s."""
    name = budget_name(pod.name, pod.uid)
    named = by_key.get(f"{pod.namespace}/{name}")
    mine = named if named is not None and _holds(nodes, named, pod) else None
    others = tuple(
        sorted(
            b.key
            for b in budgets
            if b.selects(pod) and b is not mine and not (nodes.owns(b) and pod.uid in b.owner_uids)
        )
    )
    if mine is not None:
        conflict = Conflict(pod, role, others, shielded=True) if others else None
        return PodPlan(held=Held(pod, role, mine.name), conflict=conflict)
    if others:
        return PodPlan(conflict=Conflict(pod, role, others, shielded=False))
    why = not_unique(pod, ()) or why_shared
    if why:
        return PodPlan(unshieldable=Unshieldable(pod, role, why))
    if named is not None:
        return PodPlan()  # the name is taken by a budget being replaced: create once it is gone
    return PodPlan(want=Want(pod, role, name))


def _holds(nodes: NodeScope, budget: BudgetState, pod: Pod) -> bool:
    """``budget`` is the one we keep on ``pod``: ours, owned by it, in force, selecting it."""
    ours = nodes.owns(budget) and pod.uid in budget.owner_uids
    return ours and not budget.deleting and budget.selects(pod)


def is_stale(nodes: NodeScope, budget: BudgetState, kept: Container[str]) -> bool:
    """One of our budgets that shields no target pod (``kept``: the keys of those held)."""
    return nodes.owns(budget) and not budget.deleting and budget.key not in kept


def assemble(pod_plans: Iterable[PodPlan], stale: Iterable[BudgetState]) -> Plan:
    """The plan from its pods' parts (in the pods' order) and the stale budgets."""
    pod_plans = list(pod_plans)
    return Plan(
        create=tuple(pp.want for pp in pod_plans if pp.want is not None),
        delete=tuple(sorted(stale, key=lambda b: b.key)),
        held=tuple(pp.held for pp in pod_plans if pp.held is not None),
        conflicts=tuple(pp.conflict for pp in pod_plans if pp.conflict is not None),
        unshieldable=tuple(pp.unshieldable for pp in pod_plans if pp.unshieldable is not None),
    )


def not_unique(pod: Pod, pods: Iterable[Pod]) -> str:
    """Why the pod's labels would not select it alone among ``pods`` ("" when they do)."""
    if not pod.labels:
        return "the pod has no labels, so no budget can select it"
    try:
        selector = LabelSelector.from_dict({"matchLabels": dict(pod.labels)})
    except SelectorError as err:  # a watch can carry what the API server would not accept
        return f"its labels cannot select it ({err}): the API server would refuse the budget"
    shared = sorted(
        p.name
        for p in pods
        if p.namespace == pod.namespace
        and p.uid != pod.uid
        and p.running
        and selector.matches(p.labels)
    )
    if shared:
        return f"its labels also select {', '.join(shared)}"
    return ""


# --- status -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShieldStatus:
    """What ``/status`` shows of the shield (``to_json``: camelCase, JSON-ready)."""

    nodes: NodeScope = EVERY_NODE
    namespaces: tuple[str, ...] = ()
    synced: Mapping[str, bool] = field(default_factory=dict)
    forbidden: Mapping[str, str] = field(default_factory=dict)  # namespace → the API's answer
    held: tuple[Held, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    unshieldable: tuple[Unshieldable, ...] = ()
    node_cordoned: bool | None = None
    blocked_drains: int = 0
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        def pod(p: Pod) -> dict[str, str]:
            return {"namespace": p.namespace, "name": p.name, "node": p.node, "phase": p.phase}

        return {
            "node": self.nodes.to_json(),
            "namespaces": list(self.namespaces),
            "synced": dict(self.synced),
            "forbidden": dict(self.forbidden),
            "budgets": [
                {**pod(h.pod), "role": h.role.value, "budget": h.budget} for h in self.held
            ],
            "conflicts": [
                {
                    **pod(c.pod),
                    "role": c.role.value,
                    "budgets": list(c.budgets),
                    "shielded": c.shielded,
                }
                for c in self.conflicts
            ],
            "unshieldable": [
                {**pod(u.pod), "role": u.role.value, "why": u.why} for u in self.unshieldable
            ],
            "nodeCordoned": self.node_cordoned,
            "blockedDrains": self.blocked_drains,
            "lastError": self.last_error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShieldStatus:
        """Rebuild from ``to_json()`` (``drain-guard status`` reads the agent's ``/status``);
        its pods carry what the JSON shows (namespace, name, node, phase)."""

        def pod(p: Mapping[str, Any]) -> Pod:
            return Pod(
                namespace=str(p["namespace"]),
                name=str(p["name"]),
                phase=str(p.get("phase") or "Pending"),
                node=str(p.get("node") or ""),
            )

        node = data.get("node", "*")
        return cls(
            nodes=EVERY_NODE if node == "*" else NodeScope(str(node)),
            namespaces=tuple(data.get("namespaces") or ()),
            synced=dict(data.get("synced") or {}),
            forbidden=dict(data.get("forbidden") or {}),
            held=tuple(
                Held(pod(h), Role(h["role"]), str(h["budget"])) for h in data.get("budgets") or ()
            ),
            conflicts=tuple(
                Conflict(pod(c), Role(c["role"]), tuple(c["budgets"]), bool(c["shielded"]))
                for c in data.get("conflicts") or ()
            ),
            unshieldable=tuple(
                Unshieldable(pod(u), Role(u["role"]), str(u["why"]))
                for u in data.get("unshieldable") or ()
            ),
            node_cordoned=data.get("nodeCordoned"),
            blocked_drains=int(data.get("blockedDrains") or 0),
            last_error=data.get("lastError"),
        )

    def text_lines(self) -> list[str]:
        """The human view of the shield, the same in the agent's and the central shield's
        ``/status?format=text``: one line per budget, conflict, unshieldable pod, refusal."""
        lines = [
            f"shielded:      {h.pod.key} on {h.pod.node} ({h.pod.phase}): budget {h.budget}"
            for h in self.held
        ] or ["shielded:      none"]
        lines += [
            f"conflict:      {c.pod.key} on {c.pod.node}: also {', '.join(c.budgets)}"
            for c in self.conflicts
        ]
        lines += [f"unshieldable:  {u.pod.key} on {u.pod.node}: {u.why}" for u in self.unshieldable]
        lines += [f"forbidden:     {ns}: {why}" for ns, why in sorted(self.forbidden.items())]
        if self.last_error:
            lines.append(f"last error:    {self.last_error}")
        return lines
