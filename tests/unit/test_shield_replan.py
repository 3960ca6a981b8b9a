"""The incremental plan (Replanner) is the full plan (shieldplan.plan) after every event, and
an event re-plans only what it touches (issue 28)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from drain_guard.core.pods import Pod
from drain_guard.core.selectors import MCO_NAMESPACE, LabelSelector, default_build_pod_selectors
from drain_guard.shield import plan as shieldplan
from drain_guard.shield.plan import (
    EVERY_NODE,
    REGISTRY_NAMESPACE,
    BudgetState,
    NodeScope,
    Role,
    Want,
    default_dependency_selectors,
    plan,
)
from drain_guard.shield.replan import Replanner

SELECTORS = default_build_pod_selectors()
NAMESPACES = (MCO_NAMESPACE, REGISTRY_NAMESPACE)
NAMES = ("build-a-build", "build-b-build", "builder", "registry", "other")
BUDGETS = ("theirs", *(shieldplan.budget_name(n, "") for n in NAMES))
LABELS: tuple[dict[str, str], ...] = (
    {"openshift.io/build.name": "build-a"},
    {"openshift.io/build.name": "build-b"},
    {"openshift.io/build.name": "build-a", "extra": "y"},
    {"k8s-app": "machine-os-builder"},
    {"docker-registry": "default"},
    {"app": "x"},
    {},
)


@dataclass
class World:
    """The reference: the pods and budgets as the watches show them, planned in full."""

    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    budgets: dict[str, BudgetState] = field(default_factory=dict)
    shared: dict[str, str] = field(default_factory=dict)


@st.composite
def pods_st(draw: st.DrawFn) -> Pod:
    """A pod; its uid unique to its name, one of two generations (a pod replaced by name)."""
    namespace = draw(st.sampled_from(NAMESPACES))
    name = draw(st.sampled_from(NAMES))
    return Pod(
        namespace,
        name,
        draw(st.sampled_from(("Pending", "Running", "Succeeded"))),
        draw(st.sampled_from(LABELS)),
        deleting=draw(st.booleans()),
        uid=f"{namespace}/{name}/{draw(st.sampled_from((1, 2)))}",
        node=draw(st.sampled_from(("worker-0", "worker-1", ""))),
    )


@st.composite
def budgets_st(draw: st.DrawFn) -> BudgetState:
    """One of ours for a drawn pod (maybe deleting, maybe another node's), or someone else's."""
    if draw(st.booleans()):
        p = draw(pods_st())
        role = draw(st.sampled_from(Role))
        manifest = Want(p, role, shieldplan.budget_name(p.name, p.uid)).manifest()
        budget = BudgetState.from_dict(manifest)
        return BudgetState(
            budget.namespace,
            budget.name,
            f"pdb-{p.uid}",
            budget.labels,
            budget.selector,
            budget.owner_uids,
            deleting=draw(st.booleans()),
        )
    labels = draw(st.sampled_from(LABELS))
    return BudgetState(
        draw(st.sampled_from(NAMESPACES)),
        draw(st.sampled_from(("theirs", "drain-guard-build-a-build"))),
        "uid-theirs",
        {},
        LabelSelector.from_dict({"matchLabels": labels}),
    )


events_st = st.lists(
    st.one_of(
        st.tuples(st.just("pod"), pods_st()),
        st.tuples(st.just("pod-gone"), st.sampled_from(NAMESPACES), st.sampled_from(NAMES)),
        st.tuples(st.just("budget"), budgets_st()),
        st.tuples(st.just("budget-gone"), st.sampled_from(NAMESPACES), st.sampled_from(BUDGETS)),
        st.tuples(st.just("shared"), pods_st(), st.sampled_from(("", "its labels also select x"))),
        st.tuples(st.just("relist-pods")),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.sampled_from((EVERY_NODE, NodeScope("worker-0"))),
    dependencies=st.booleans(),
    initial=st.lists(pods_st(), max_size=6),
    events=events_st,
)
def test_the_incremental_plan_is_the_full_plan_after_every_event(
    nodes: NodeScope, dependencies: bool, initial: list[Pod], events: list[tuple[object, ...]]
) -> None:
    deps = default_dependency_selectors() if dependencies else ()
    world = World(pods={(p.namespace, p.name): p for p in initial})
    replanner = Replanner(nodes, SELECTORS, dependency_selectors=deps)
    replanner.replace_pods(world.pods.values())
    for namespace in NAMESPACES:
        replanner.replace_budgets(namespace, [])

    def full() -> shieldplan.Plan:
        pods = list(world.pods.values())
        budgets = list(world.budgets.values())
        return plan(nodes, pods, budgets, SELECTORS, dependency_selectors=deps, shared=world.shared)

    assert replanner.plan() == full()
    for event in events:
        match event:
            case ("pod", Pod() as p):
                old = world.pods.get((p.namespace, p.name))
                if old is not None and old.uid != p.uid:
                    world.shared.pop(old.uid, None)
                world.pods[(p.namespace, p.name)] = p
                replanner.pod_changed((p.namespace, p.name), p)
            case ("pod-gone", str(namespace), str(name)):
                old = world.pods.pop((namespace, name), None)
                if old is not None:
                    world.shared.pop(old.uid, None)
                replanner.pod_changed((namespace, name), None)
            case ("budget", BudgetState() as b):
                world.budgets[b.key] = b
                replanner.budget_changed(b.namespace, b.name, b)
            case ("budget-gone", str(namespace), str(name)):
                world.budgets.pop(f"{namespace}/{name}", None)
                replanner.budget_changed(namespace, name, None)
            case ("shared", Pod() as p, str(why)):
                if world.pods.get((p.namespace, p.name)) == p:
                    world.shared[p.uid] = why
                    replanner.shared_found(p, why)
            case ("relist-pods",):
                uids = {p.uid for p in world.pods.values()}
                world.shared = {u: w for u, w in world.shared.items() if u in uids}
                replanner.replace_pods(world.pods.values())
        assert replanner.plan() == full(), event


def test_a_pod_event_replans_that_pod_only() -> None:
    """Among many build pods, an event of one of them re-plans it alone: the others' parts of
    the plan stay the very same objects."""
    pods = [
        Pod(MCO_NAMESPACE, f"build-{i}-build", "Running", {"openshift.io/build.name": f"b{i}"})
        for i in range(50)
    ]
    pods = [Pod(p.namespace, p.name, p.phase, p.labels, uid=p.name, node="w") for p in pods]
    replanner = Replanner(EVERY_NODE, SELECTORS)
    replanner.replace_budgets(MCO_NAMESPACE, [])
    replanner.replace_pods(pods)
    before = replanner.plan()
    finished = Pod(
        pods[7].namespace, pods[7].name, "Succeeded", pods[7].labels, uid=pods[7].uid, node="w"
    )
    replanner.pod_changed((finished.namespace, finished.name), finished)
    after = replanner.plan()
    assert len(after.create) == 49
    kept = {id(w) for w in before.create}
    assert [w.pod.name for w in after.create if id(w) not in kept] == []
