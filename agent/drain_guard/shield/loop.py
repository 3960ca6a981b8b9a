"""The shield: PodDisruptionBudgets that keep build pods from being evicted.

The hold protocol wins the race with the MCC drain controller by seconds; when it loses (or
the agent is down, or another tool drains the node) the drain goes through the eviction API,
which honours PodDisruptionBudgets. So, as a second line of defence, while a build pod runs
a budget selects exactly that pod. The budget is owned by the pod (ownerReference), so
Kubernetes' garbage collector deletes it with the pod even when the shield is gone; the shield
deletes it itself as soon as the pod has finished.

One shield, two scopes (:class:`NodeScope`): each node's agent keeps the budgets of its own
node's build pods (on its pod watch, which is of that node only), or one central shield
(``drain-guard shield``) keeps those of every node (on a watch of the whole namespace), where
the agents cannot be confined to their own node's budgets. Either way a budget is labelled
with its pod's own node, so both keep the same budgets, in the same shape.

Two halves, as everywhere in drain-guard: the pure plan (drain_guard.shield.plan: which pods
need a budget, which budgets are stale, conflicts, pods no selector singles out), and this
thin I/O (:class:`Shield`): it list-watches budgets in the shielded namespaces
(namespace-scoped, so the RBAC can be a Role "only where build pods run"), applies the plan,
and keeps a :class:`~drain_guard.shield.plan.ShieldStatus` for ``/status``.

API::

    shield = Shield(kube, NodeScope(node_name) or EVERY_NODE, build_pod_selectors, pods,
                    dependencies=False, metrics=any ShieldMetrics or None,
                    uniqueness_from_pods=False)  # True: ``pods`` shows every label superset
    await shield.run()              # until cancelled; budgets stay (they guard a dead agent)
    shield.node_seen(unschedulable) # one node: from the agent's Node watch, counts blocked drains
    shield.status() -> ShieldStatus # .to_json() for /status (it never gates the agent's /readyz)
    await shield.remove_all()       # uninstall only: delete the scope's budgets
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from drain_guard.core.operations import Operation, Watched
from drain_guard.core.pods import DEFAULT_SCOPE, Pod, PodScope
from drain_guard.core.selectors import BuildPodSelector
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube.call import JsonObj, KubeError
from drain_guard.kube.client import Kube
from drain_guard.kube.counters import Counters, Relay, WatchGroup
from drain_guard.kube.listwatch import WATCH_TIMEOUT, ListWatch, WatchCache
from drain_guard.kube.retry import Backoff, Outage
from drain_guard.shield.plan import (
    DEFAULT_NAMESPACES,
    BudgetState,
    NodeScope,
    Plan,
    ShieldStatus,
    Want,
    default_dependency_selectors,
    not_unique,
    shield_namespaces,
)
from drain_guard.shield.replan import Replanner

log = logging.getLogger("drain_guard.shield.loop")

#: A budget gone (404) or already there (409): answers the watch catches up with, not errors.
GONE_OR_THERE = (404, 409)


class ShieldMetrics(Protocol):
    """Where the shield reports its budgets; ``drain_guard.runtime.metrics.BaseMetrics`` has these
    methods. Its API errors, watch restarts, API contact and its watches' state go through the
    ``Kube``'s counters (the program's ``health.Health``), as every call's and watch's (the
    operations it names are among ``drain_guard.runtime.metrics.SHIELD_API_OPERATIONS``)."""

    def set_shield_budgets(self, count: int) -> None: ...

    def set_shield_conflicts(self, count: int) -> None: ...

    def count_retry(self, part: str) -> None: ...


class NullShieldMetrics:
    """ShieldMetrics for callers without metrics."""

    def set_shield_budgets(self, count: int) -> None:
        return None

    def set_shield_conflicts(self, count: int) -> None:
        return None

    def count_retry(self, part: str) -> None:
        return None


@dataclass
class _Namespace:
    """One shielded namespace's budgets, filled by its list-watch."""

    name: str
    synced: bool = False  # listed once: the plan may use its budgets
    watching: bool = False  # and current now
    forbidden: str | None = None


class _NamespaceCounters(Relay):
    """One namespace's budget watch, a member of the shield's group of them (``member``: the
    program's health sees them as one ``poddisruptionbudget`` watch, synced when each is),
    with its 403s noted as "forbidden" and its state kept per namespace too."""

    def __init__(self, shield: Shield, ns: _Namespace, member: Counters) -> None:
        super().__init__(member)
        self.shield = shield
        self.ns = ns

    def api_error(self, operation: Operation, status: int) -> None:
        super().api_error(operation, status)
        if status == 403:
            self.shield._forbid(self.ns, f"{operation} forbidden")

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        self.ns.watching = state.watching
        super().watch_state(resource, state)
        self.shield._status_changed()


class Shield:
    """Keeps the budgets of ``nodes``' build pods in step with them, until cancelled."""

    def __init__(
        self,
        kube: Kube,
        nodes: NodeScope,
        build_selectors: Sequence[BuildPodSelector],
        pods: WatchCache,
        *,
        scope: PodScope = DEFAULT_SCOPE,
        namespaces: Sequence[str] = DEFAULT_NAMESPACES,
        dependencies: bool = False,
        metrics: ShieldMetrics | None = None,
        on_blocked_drain: Callable[[], None] | None = None,
        watch_timeout: int = WATCH_TIMEOUT,
        uniqueness_from_pods: bool = False,
    ) -> None:
        self.nodes = nodes
        # ``pods`` shows every pod whose labels include a build pod's (the central shield's
        # watches): whether a budget would single a pod out is read there, not listed.
        self.uniqueness_from_pods = uniqueness_from_pods
        self.build_selectors = tuple(build_selectors)
        self.scope = scope
        # The pods of ``nodes``: an agent's one pod watch (its node's, shared with the
        # build-pod guard), or the central shield's watch of the namespace.
        self.pods = pods
        pods.pod_listeners.append(self._pods_changed)
        self.dependency_selectors = default_dependency_selectors() if dependencies else ()
        names = shield_namespaces(dependencies, namespaces)
        self.metrics: ShieldMetrics = metrics or NullShieldMetrics()
        # Only an agent sees its Node, so only it counts cordons into its budgets.
        self._on_blocked_drain = on_blocked_drain
        self.watch_timeout = watch_timeout
        # Its calls and watches are the Kube's: counted, and API contact, as the agent's.
        self.kube = kube
        self._ns = {name: _Namespace(name) for name in names}
        self._changed = asyncio.Event()
        self._plan = Plan()
        # The plan, kept current event by event (each event re-plans what it touches).
        self._replanner = Replanner(nodes, self.build_selectors, scope, self.dependency_selectors)
        self._replanner.replace_pods(pods.pods.values())
        self._inflight: set[str] = set()  # budgets created or deleted, until the watch shows it
        self._cordoned: bool | None = None
        self._cordon_counted = False
        self._blocked = 0
        self._last_error: str | None = None
        self._updated = asyncio.Event()  # replaced by a fresh one each time it is set
        self.running = False  # run() is in its loop: /healthz of the central shield

    # What the controller calls ----------------------------------------------------------

    def node_seen(self, unschedulable: bool) -> None:
        """The Node as the controller's watch saw it. A cordon while budgets hold is a drain
        the shield blocks (the eviction API's 429s themselves are not visible here)."""
        if unschedulable and not self._cordoned:
            self._cordon_counted = False
        self._cordoned = unschedulable
        self._count_blocked()
        self._status_changed()

    def status(self) -> ShieldStatus:
        p = self._plan
        return ShieldStatus(
            nodes=self.nodes,
            namespaces=tuple(self._ns),
            synced={ns.name: ns.synced and ns.watching for ns in self._ns.values()},
            forbidden={ns.name: ns.forbidden for ns in self._ns.values() if ns.forbidden},
            held=p.held,
            conflicts=p.conflicts,
            unshieldable=p.unshieldable,
            node_cordoned=self._cordoned,
            blocked_drains=self._blocked,
            last_error=self._last_error,
        )

    async def wait_status(self, predicate: Callable[[ShieldStatus], bool]) -> ShieldStatus:
        """The first status (now or after a later pass) satisfying ``predicate``; no polling.

        Callers bound the wait with ``asyncio.timeout``.
        """
        while True:
            updated = self._updated
            status = self.status()
            if predicate(status):
                return status
            await updated.wait()

    def _status_changed(self) -> None:
        self._updated.set()
        self._updated = asyncio.Event()

    # The loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch the shielded namespaces and apply the plan on every change, until cancelled.

        Cancelling leaves the budgets in place: they guard the pods while the agent is away,
        and the garbage collector removes them with their pods.
        """
        # One drain_guard_synced{resource="poddisruptionbudget"} for the namespaces' watches:
        # 0 while one has not listed or is not watched, including one the agent may not read
        # (an alert: the shield is not working).
        watches = WatchGroup(self.kube.counters, len(self._ns))
        tasks = [
            asyncio.create_task(self._watch(ns, watches.member(i)), name=f"shield-pdbs-{ns.name}")
            for i, ns in enumerate(self._ns.values())
        ]
        retry = Backoff()
        outage = Outage(f"shield of {self.nodes}", log, lambda: self.metrics.count_retry("shield"))
        delay: float | None = None
        self.running = True
        try:
            while True:
                if delay is None:
                    await self._changed.wait()
                else:
                    # asyncio.timeout, not wait_for (see Controller._wait).
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._changed.wait()
                self._changed.clear()
                try:
                    await self._pass()
                    self._last_error = None
                    retry.reset()
                    outage.ended()
                    delay = None
                except Exception as exc:  # one failed pass never ends the shield
                    self._last_error = str(exc)
                    throttled = (
                        exc.retry_after
                        if isinstance(exc, KubeError) and exc.status == 429
                        else None
                    )
                    delay = retry.next_delay(throttled)
                    outage.failed("API call" if isinstance(exc, KubeError) else "pass", exc, delay)
                self._status_changed()
        finally:
            self.running = False
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, ns: _Namespace, member: Counters) -> None:
        await ListWatch(
            resource=Watched.PODDISRUPTIONBUDGET,
            list_fn=functools.partial(
                self.kube.policy.list_namespaced_pod_disruption_budget, ns.name
            ),
            field_selector="",
            replace=self._replace_budgets(ns),
            apply=self._apply_budget(ns),
            counters=_NamespaceCounters(self, ns, member),
            name=f"poddisruptionbudgets in {ns.name}",
            watch_timeout=self.watch_timeout,
        ).run()

    def _pods_changed(self, key: tuple[str, str] | None) -> None:
        if key is None:
            self._replanner.replace_pods(self.pods.pods.values())
        else:
            self._replanner.pod_changed(key, self.pods.pods.get(key))
        self._changed.set()

    def _replace_budgets(self, ns: _Namespace) -> Callable[[Sequence[JsonObj]], None]:
        def replace(items: Sequence[JsonObj]) -> None:
            self._replanner.replace_budgets(ns.name, map(BudgetState.from_dict, items))
            ns.synced = True
            self._inflight = {k for k in self._inflight if not k.startswith(f"{ns.name}/")}
            self._listed(ns)

        return replace

    def _apply_budget(self, ns: _Namespace) -> Callable[[str, JsonObj], None]:
        def apply(kind: str, obj: JsonObj) -> None:
            budget = BudgetState.from_dict(obj)
            gone = kind == "DELETED"
            self._replanner.budget_changed(ns.name, budget.name, None if gone else budget)
            self._inflight.discard(budget.key)
            self._changed.set()

        return apply

    def _listed(self, ns: _Namespace) -> None:
        if ns.forbidden:
            log.info("shield: namespace %s can be watched again", ns.name)
        ns.forbidden = None
        self._changed.set()

    def _forbid(self, ns: _Namespace, why: str) -> None:
        if ns.forbidden is None:
            log.warning("shield: not shielding in namespace %s: %s", ns.name, why)
        ns.forbidden = why
        self._status_changed()

    async def _pass(self) -> None:
        """Write what the plan (over the namespaces whose budgets have listed) asks for."""
        if not self.pods.pods_synced:
            return
        new = self._replanner.plan()
        if new is not self._plan:
            self._report(new)
        for want in new.create:
            key = f"{want.pod.namespace}/{want.name}"
            if key in self._inflight:
                continue
            if want.pod.uid not in self._replanner.shared:
                why = await self._not_unique(want.pod)
                self._replanner.shared_found(want.pod, why)
                if why:
                    self._changed.set()  # plan again: report it as unshieldable
                    continue
            await self._create(want, self._ns[want.pod.namespace])
        for budget in new.delete:
            if budget.key not in self._inflight:
                await self._delete(budget)

    async def _not_unique(self, pod: Pod) -> str:
        """Why a budget selecting ``pod``'s labels would select other pods too (any node's).

        An agent's pod watch shows its node's pods only; one list by the pod's labels, once
        per build pod, shows what a budget with that selector would cover. The central
        shield's watches already show every such pod.
        """
        if self.uniqueness_from_pods:
            return not_unique(pod, self.pods.pods.values())
        selector = ",".join(f"{k}={v}" for k, v in sorted(pod.labels.items()))
        body = await self.kube.call(
            Operation.POD_LIST,
            self.kube.core.list_namespaced_pod,
            pod.namespace,
            label_selector=selector,
        )
        return not_unique(pod, [Pod.from_dict(item) for item in body.get("items") or ()])

    def _report(self, new: Plan) -> None:
        old = self._plan
        self._plan = new
        self.metrics.set_shield_budgets(len(new.held))
        self.metrics.set_shield_conflicts(len(new.conflicts))
        self._count_blocked()
        known = {o.pod.uid for o in old.conflicts}
        for c in new.conflicts:
            if c.pod.uid not in known:
                log.warning(
                    "shield: pod %s already selected by %s; %s",
                    c.pod.key,
                    ", ".join(c.budgets),
                    "two budgets: its evictions fail with 500"
                    if c.shielded
                    else "adding no budget",
                )
        known = {o.pod.uid for o in old.unshieldable}
        for u in new.unshieldable:
            if u.pod.uid not in known:
                log.warning("shield: cannot shield pod %s: %s", u.pod.key, u.why)

    def _count_blocked(self) -> None:
        if self._cordoned and not self._cordon_counted and self._plan.held:
            self._cordon_counted = True
            self._blocked += 1
            if self._on_blocked_drain is not None:
                self._on_blocked_drain()
            log.warning(
                "shield: %s cordoned while budgets shield %s",
                self.nodes,
                ", ".join(h.pod.key for h in self._plan.held),
            )

    async def _create(self, want: Want, ns: _Namespace) -> None:
        # Marked in flight before the request: the watch may deliver the new budget before
        # the response, and its event is what ends the mark.
        key = f"{want.pod.namespace}/{want.name}"
        self._inflight.add(key)
        try:
            await self.kube.call(
                Operation.PODDISRUPTIONBUDGET_CREATE,
                self.kube.policy.create_namespaced_pod_disruption_budget,
                want.pod.namespace,
                want.manifest(),
                answers=GONE_OR_THERE,
            )
        except KubeError as exc:
            self._inflight.discard(key)
            if exc.status == 409:
                return  # already there: the watch brings it
            if exc.status == 403:
                self._forbid(ns, f"creating budgets forbidden: {exc.reason}")
                return
            raise
        ns.forbidden = None
        log.info("shield: budget %s created for %s pod %s", key, want.role.value, want.pod.name)

    async def _delete(self, budget: BudgetState) -> bool:
        """Delete ``budget`` if it is still that object (uid precondition); True if deleted."""
        self._inflight.add(budget.key)
        try:
            await self.kube.call(
                Operation.PODDISRUPTIONBUDGET_DELETE,
                self.kube.policy.delete_namespaced_pod_disruption_budget,
                budget.name,
                budget.namespace,
                body={"preconditions": {"uid": budget.uid}},
                answers=GONE_OR_THERE,
            )
        except KubeError as exc:
            self._inflight.discard(budget.key)
            if exc.status in (404, 409):
                return False  # gone, or replaced meanwhile: the watch tells
            if exc.status == 403:
                self._forbid(
                    self._ns[budget.namespace], f"deleting budgets forbidden: {exc.reason}"
                )
                return False
            raise
        log.info("shield: budget %s deleted", budget.key)
        return True

    async def remove_all(self) -> int:
        """Delete the scope's budgets (on uninstall; a rolling update keeps them). Returns how
        many were deleted; errors are logged, not raised: the garbage collector is the backstop."""
        deleted = 0
        label = self.nodes.label_selector()
        for ns in self._ns.values():
            try:
                body = await self.kube.call(
                    Operation.PODDISRUPTIONBUDGET_LIST,
                    self.kube.policy.list_namespaced_pod_disruption_budget,
                    ns.name,
                    label_selector=label,
                )
                for item in body.get("items") or ():
                    deleted += await self._delete(BudgetState.from_dict(item))
            except KubeError as exc:
                log.warning("shield: could not remove budgets in %s: %s", ns.name, exc)
        return deleted
