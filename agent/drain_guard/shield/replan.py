"""The shield's plan kept current event by event: an event re-plans what it touches.

:func:`drain_guard.shield.plan.plan` decides over every pod and budget; run on each pod event,
its cost grew with everything the shield watches (issue 28). :class:`Replanner` keeps the
same plan, from the same per-pod rule (:func:`~drain_guard.shield.plan.plan_pod`), with
indexes: a pod event re-plans that pod (against the budgets of its namespace); a budget event
re-plans the target pods it selects or is named for (a scan of the target pods, not of every
pod) and whether it is stale. Everything is re-planned only when what every pod depends on
changes: a relist, a namespace whose budgets list, and (with dependencies) the first build
starting or the last one ending. Pure: drain_guard.shield.loop feeds it the watches' events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from drain_guard.core.pods import DEFAULT_SCOPE, Pod, PodScope, is_build_pod
from drain_guard.core.selectors import BuildPodSelector
from drain_guard.shield.plan import (
    BudgetState,
    NodeScope,
    Plan,
    PodPlan,
    Role,
    assemble,
    budget_name,
    is_stale,
    plan_pod,
)

PodKey = tuple[str, str]  # namespace, name


class Replanner:
    """The plan over the pods and budgets of the namespaces whose budgets have listed."""

    def __init__(
        self,
        nodes: NodeScope,
        build_selectors: Sequence[BuildPodSelector],
        scope: PodScope = DEFAULT_SCOPE,
        dependency_selectors: Sequence[BuildPodSelector] = (),
    ) -> None:
        self.nodes = nodes
        self.build_selectors = tuple(build_selectors)
        self.scope = scope
        self.dependency_selectors = tuple(dependency_selectors)
        self.synced: set[str] = set()  # namespaces whose budgets have listed
        self.pods: dict[PodKey, Pod] = {}
        self.budgets: dict[str, BudgetState] = {}  # by namespace/name
        self._in_namespace: dict[str, dict[str, BudgetState]] = {}
        #: Pod uid -> why its labels do not single it out ("": they do), as the shield found.
        self.shared: dict[str, str] = {}
        self._roles: dict[PodKey, Role] = {}  # the target pods
        self._builds: set[PodKey] = set()  # the targets that are build pods
        self._named: dict[str, PodKey] = {}  # a target's budget key (namespace/name) -> it
        self._name_of: dict[PodKey, str] = {}  # and back
        self._pod_plans: dict[PodKey, PodPlan] = {}
        self._kept: set[str] = set()  # budget keys the pods' plans hold
        self._stale: dict[str, BudgetState] = {}
        self._build_budgets: set[str] = set()  # build-pod budgets in force, any node's
        self._plan = Plan()
        self._changed = True

    # The events -------------------------------------------------------------------------

    def replace_pods(self, pods: Iterable[Pod]) -> None:
        self.pods = {(p.namespace, p.name): p for p in pods}
        uids = {p.uid for p in self.pods.values()}
        self.shared = {u: why for u, why in self.shared.items() if u in uids}
        self._replan_all()

    def pod_changed(self, key: PodKey, pod: Pod | None) -> None:
        """The pod at ``key`` is now ``pod`` (None: gone)."""
        old = self.pods.pop(key, None)
        if old is not None and (pod is None or pod.uid != old.uid):
            self.shared.pop(old.uid, None)
        if pod is not None:
            self.pods[key] = pod
        building = self._building()
        self._replan_pod(key)
        if self.dependency_selectors and self._building() != building:
            self._replan_all()

    def replace_budgets(self, namespace: str, budgets: Iterable[BudgetState]) -> None:
        """The budgets of ``namespace`` as listed; from now on its pods are planned."""
        for budget in self._in_namespace.pop(namespace, {}).values():
            del self.budgets[budget.key]
        self._in_namespace[namespace] = {b.name: b for b in budgets}
        self.budgets.update({b.key: b for b in self._in_namespace[namespace].values()})
        self.synced.add(namespace)
        self._replan_all()

    def budget_changed(self, namespace: str, name: str, budget: BudgetState | None) -> None:
        """The budget ``namespace/name`` is now ``budget`` (None: gone)."""
        key = f"{namespace}/{name}"
        old = self.budgets.pop(key, None)
        here = self._in_namespace.setdefault(namespace, {})
        here.pop(name, None)
        if budget is not None:
            self.budgets[key] = budget
            here[name] = budget
        building = self._building()
        self._note_budget(key, budget)
        if self.dependency_selectors and self._building() != building:
            self._replan_all()
            return
        if namespace not in self.synced:
            return
        versions = [b for b in (old, budget) if b is not None]
        touched = {
            k for k in self._roles if any(b.selects(self.pods[k]) for b in versions)
        }  # selects() is False outside the budget's namespace
        if key in self._named:
            touched.add(self._named[key])
        for k in touched:
            self._replan_pod(k)
        self._restale(key)

    def shared_found(self, pod: Pod, why: str) -> None:
        """Whether ``pod``'s labels single it out, as a list by them found (if the pod is
        still that one: the list was awaited)."""
        key = (pod.namespace, pod.name)
        if key in self.pods and self.pods[key].uid == pod.uid:
            self.shared[pod.uid] = why
            self._replan_pod(key)

    def plan(self) -> Plan:
        """The plan now (assembled again only after a change)."""
        if self._changed:
            order = sorted(self._pod_plans)
            self._plan = assemble((self._pod_plans[k] for k in order), self._stale.values())
            self._changed = False
        return self._plan

    # Inside -----------------------------------------------------------------------------

    def _building(self) -> bool:
        """A build runs: a build pod among the targets, or a build-pod budget of any node's."""
        return bool(self._builds or self._build_budgets)

    def _role(self, pod: Pod) -> Role | None:
        if pod.namespace not in self.synced or not self.nodes.covers(pod) or not pod.running:
            return None
        if is_build_pod(pod, self.build_selectors, self.scope):
            return Role.BUILD_POD
        if self._building() and any(
            s.matches(pod.namespace, pod.labels, pod.owners) for s in self.dependency_selectors
        ):
            return Role.DEPENDENCY
        return None

    def _replan_pod(self, key: PodKey) -> None:
        self._changed = True
        old = self._pod_plans.pop(key, None)
        self._roles.pop(key, None)
        self._builds.discard(key)
        name = self._name_of.pop(key, None)
        if name is not None and self._named.get(name) == key:
            del self._named[name]
        if old is not None and old.held is not None:
            self._kept.discard(old.held.key)
            self._restale(old.held.key)
        pod = self.pods.get(key)
        role = None if pod is None else self._role(pod)
        if pod is None or role is None:
            return
        self._roles[key] = role
        if role is Role.BUILD_POD:
            self._builds.add(key)
        name = f"{pod.namespace}/{budget_name(pod.name, pod.uid)}"
        self._named[name] = key
        self._name_of[key] = name
        budgets = self._in_namespace.get(pod.namespace, {}).values()
        pp = plan_pod(self.nodes, pod, role, self.budgets, budgets, self.shared.get(pod.uid, ""))
        self._pod_plans[key] = pp
        if pp.held is not None:
            self._kept.add(pp.held.key)
            self._restale(pp.held.key)

    def _replan_all(self) -> None:
        self._roles.clear()
        self._builds.clear()
        self._named.clear()
        self._name_of.clear()
        self._pod_plans.clear()
        self._kept.clear()
        self._build_budgets.clear()
        for key, budget in self.budgets.items():
            self._note_budget(key, budget)
        # Build pods first: whether a build runs decides the dependencies' roles.
        build = {k for k, p in self.pods.items() if self._role(p) is Role.BUILD_POD}
        for pod_key in build:
            self._replan_pod(pod_key)
        for pod_key in self.pods.keys() - build:
            self._replan_pod(pod_key)
        self._stale = {}
        for key in self.budgets:
            self._restale(key)
        self._changed = True

    def _note_budget(self, key: str, budget: BudgetState | None) -> None:
        if budget is not None and budget.shields_a_build():
            self._build_budgets.add(key)
        else:
            self._build_budgets.discard(key)

    def _restale(self, key: str) -> None:
        self._changed = True
        budget = self.budgets.get(key)
        synced = budget is not None and budget.namespace in self.synced
        if synced and budget is not None and is_stale(self.nodes, budget, self._kept):
            self._stale[key] = budget
        else:
            self._stale.pop(key, None)
