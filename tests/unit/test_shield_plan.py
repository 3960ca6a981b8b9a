"""The shield's pure plan: which pods get a budget, which budgets go, what is reported."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from drain_guard.core.pods import Pod, node_label_value
from drain_guard.core.selectors import (
    MCO_NAMESPACE,
    LabelSelector,
    OwnerRef,
    default_build_pod_selectors,
    parse_build_pod_selector,
)
from drain_guard.shield import plan as shieldplan
from drain_guard.shield.plan import EVERY_NODE, BudgetState, NodeScope, Role, Want, plan

NODE = "worker-0"
OTHER = "worker-1"
HERE = NodeScope(NODE)
SELECTORS = default_build_pod_selectors()
DEPS = shieldplan.default_dependency_selectors()
BUILD_LABELS = {"openshift.io/build.name": "build-rendered-worker-b"}


def pod(
    name: str = "build-rendered-worker-b-build",
    *,
    labels: Mapping[str, str] = BUILD_LABELS,
    node: str = NODE,
    phase: str = "Running",
    namespace: str = MCO_NAMESPACE,
    uid: str | None = None,
    deleting: bool = False,
    owners: tuple[OwnerRef, ...] = (),
) -> Pod:
    return Pod(
        namespace,
        name,
        phase,
        dict(labels),
        owners,
        deleting,
        uid=uid or f"uid-{name}",
        node=node,
    )


def checked(pods: list[Pod]) -> dict[str, str]:
    """What the shield's list by labels finds for each pod (it sees other nodes' pods only so)."""
    return {p.uid: shieldplan.not_unique(p, pods) for p in pods}


def ours_for(p: Pod, role: Role = Role.BUILD_POD, **overrides: object) -> BudgetState:
    """The budget the plan would create for ``p`` (labelled with its node), as the API server
    would return it."""
    obj = Want(p, role, shieldplan.budget_name(p.name, p.uid)).manifest()
    obj["metadata"]["uid"] = f"pdb-{p.uid}"
    return _replace(BudgetState.from_dict(obj), **overrides)


def _replace(b: BudgetState, **overrides: object) -> BudgetState:
    return replace(b, **overrides)  # type: ignore[arg-type]


def foreign(
    name: str, match: Mapping[str, str] | None, namespace: str = MCO_NAMESPACE
) -> BudgetState:
    selector = LabelSelector.from_dict(None if match is None else {"matchLabels": dict(match)})
    return BudgetState(namespace, name, f"uid-{name}", {}, selector)


def test_a_running_build_pod_gets_a_budget_selecting_exactly_it() -> None:
    p = pod()
    result = plan(HERE, [p, pod("other", labels={"app": "x"})], [], SELECTORS)
    assert [(w.pod, w.role) for w in result.create] == [(p, Role.BUILD_POD)]
    body = result.create[0].manifest()
    assert body["metadata"]["name"] == "drain-guard-build-rendered-worker-b-build"
    assert body["metadata"]["namespace"] == MCO_NAMESPACE
    assert body["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "drain-guard",
        "drain-guard.io/node": NODE,
        "drain-guard.io/shield": "build-pod",
    }
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": p.name, "uid": p.uid}
    ]
    assert body["spec"] == {"minAvailable": 1, "selector": {"matchLabels": BUILD_LABELS}}
    assert BudgetState.from_dict({**body, "metadata": {**body["metadata"]}}).selects(p)
    assert result.delete == ()
    assert result.conflicts == ()


def test_pending_build_pods_are_shielded_before_they_run() -> None:
    assert len(plan(HERE, [pod(phase="Pending")], [], SELECTORS).create) == 1


def test_no_budget_for_build_pods_elsewhere_finished_or_deleting() -> None:
    pods = [
        pod("a", node=OTHER, labels={"openshift.io/build.name": "a"}),
        pod("b", phase="Succeeded", labels={"openshift.io/build.name": "b"}),
        pod("c", phase="Failed", labels={"openshift.io/build.name": "c"}),
        pod("d", deleting=True, labels={"openshift.io/build.name": "d"}),
        pod("e", labels={"app": "not-a-build"}),
    ]
    result = plan(HERE, pods, [], SELECTORS)
    assert result == shieldplan.Plan()


def test_an_existing_budget_is_kept_not_recreated() -> None:
    p = pod()
    budget = ours_for(p)
    result = plan(HERE, [p], [budget], SELECTORS)
    assert result.create == ()
    assert result.delete == ()
    assert [(h.pod, h.budget) for h in result.held] == [(p, budget.name)]


def test_the_budget_goes_when_the_pod_finishes_or_is_gone() -> None:
    p = pod()
    budget = ours_for(p)
    done = pod(phase="Succeeded")
    assert plan(HERE, [done], [budget], SELECTORS).delete == (budget,)
    assert plan(HERE, [], [budget], SELECTORS).delete == (budget,)


def test_stale_budgets_of_this_node_are_cleaned_but_not_other_nodes() -> None:
    gone = pod("gone", labels={"openshift.io/build.name": "gone"})
    mine = ours_for(gone)
    theirs = ours_for(pod("gone", labels={"openshift.io/build.name": "gone"}, node=OTHER))
    result = plan(HERE, [], [mine, theirs], SELECTORS)
    assert result.delete == (mine,)


# --- every node: the central shield ---------------------------------------------------------


def test_every_node_shields_build_pods_on_any_node_labelled_with_their_own_node() -> None:
    here, there = pod("a", labels={"openshift.io/build.name": "a"}), pod("b", node=OTHER)
    result = plan(EVERY_NODE, [here, there, pod("c", labels={"app": "x"})], [], SELECTORS)
    assert [w.pod for w in result.create] == [here, there]
    labels = [w.manifest()["metadata"]["labels"]["drain-guard.io/node"] for w in result.create]
    assert labels == [NODE, OTHER]
    # The same budgets, in the same shape, as each node's agent would keep.
    assert [w.manifest() for w in result.create] == [
        w.manifest()
        for scope, p in ((HERE, here), (NodeScope(OTHER), there))
        for w in plan(scope, [p], [], SELECTORS).create
    ]


def test_every_node_keeps_what_an_agent_made_and_cleans_every_node_stale_budget() -> None:
    kept = pod("kept", node=OTHER)
    stale = ours_for(pod("gone", labels={"openshift.io/build.name": "g"}, node=OTHER))
    result = plan(EVERY_NODE, [kept], [ours_for(kept), stale, ours_for(pod("done"))], SELECTORS)
    assert result.create == ()
    assert [h.pod for h in result.held] == [kept]
    assert sorted(b.name for b in result.delete) == ["drain-guard-done", "drain-guard-gone"]


def test_every_node_leaves_unscheduled_pods_and_budgets_not_drain_guards() -> None:
    unscheduled = pod("pending", phase="Pending", node="")
    unlabelled = _replace(
        ours_for(pod("x")), labels={"app.kubernetes.io/managed-by": "drain-guard"}
    )
    result = plan(EVERY_NODE, [unscheduled], [unlabelled, foreign("f", {"a": "1"})], SELECTORS)
    assert result == shieldplan.Plan()


def test_mco_pods_never_get_a_budget_in_either_scope() -> None:
    mco = [
        pod("machine-config-controller-1", labels={"k8s-app": "machine-config-controller"}),
        pod("machine-os-builder-1", labels={"k8s-app": "machine-os-builder"}, node=OTHER),
        pod("machine-config-daemon-1", labels={"k8s-app": "machine-config-daemon"}),
    ]
    for scope in (HERE, EVERY_NODE):
        assert plan(scope, mco, [], SELECTORS) == shieldplan.Plan()


def test_scopes_select_their_budgets_by_label() -> None:
    assert HERE.label_selector() == (
        "app.kubernetes.io/managed-by=drain-guard,drain-guard.io/node=worker-0"
    )
    assert (
        EVERY_NODE.label_selector()
        == "app.kubernetes.io/managed-by=drain-guard,drain-guard.io/node"
    )
    assert (str(HERE), str(EVERY_NODE)) == ("node worker-0", "every node")


def test_a_budget_being_deleted_is_not_deleted_again() -> None:
    budget = ours_for(pod(), deleting=True)
    assert plan(HERE, [], [budget], SELECTORS).delete == ()


def test_a_pod_another_budget_selects_is_left_alone_and_reported() -> None:
    p = pod()
    other = foreign("someone-elses", {"openshift.io/build.name": "build-rendered-worker-b"})
    result = plan(HERE, [p], [other], SELECTORS)
    assert result.create == ()
    [conflict] = result.conflicts
    assert conflict.pod == p
    assert conflict.budgets == (f"{MCO_NAMESPACE}/someone-elses",)
    assert conflict.shielded is False


def test_a_budget_that_appears_after_ours_is_reported_and_ours_stays() -> None:
    p = pod()
    mine = ours_for(p)
    other = foreign("late", {"openshift.io/build.name": "build-rendered-worker-b"})
    result = plan(HERE, [p], [mine, other], SELECTORS)
    assert result.delete == ()
    assert [c.shielded for c in result.conflicts] == [True]
    assert [h.budget for h in result.held] == [mine.name]


def test_budgets_that_select_nothing_do_not_conflict() -> None:
    p = pod()
    others = [
        foreign("nil-selector", None),
        foreign("empty-selector", {}),
        foreign("elsewhere", BUILD_LABELS, namespace="default"),
        foreign("other-labels", {"app": "x"}),
    ]
    result = plan(HERE, [p], others, SELECTORS)
    assert len(result.create) == 1
    assert result.conflicts == ()


def test_a_pod_whose_labels_select_another_active_pod_is_not_shielded() -> None:
    p = pod("job-a", labels={"job-name": "build-x"}, owners=(OwnerRef("Job", "build-x"),))
    twin = pod("job-b", labels={"job-name": "build-x"}, node=OTHER)
    selectors = (parse_build_pod_selector(f"{MCO_NAMESPACE}:job-name"),)
    result = plan(HERE, [p], [], selectors, shared=checked([p, twin]))
    assert result.create == ()
    [u] = result.unshieldable
    assert u.pod == p
    assert "job-b" in u.why
    # A finished twin is not selected by the eviction's arithmetic: shielding is fine.
    done = pod("job-b", labels={"job-name": "build-x"}, node=OTHER, phase="Failed")
    assert len(plan(HERE, [p], [], selectors, shared=checked([p, done])).create) == 1
    # Not checked yet: wanted, and the shield lists by its labels before creating it.
    assert len(plan(HERE, [p], [], selectors).create) == 1


def test_a_pod_without_labels_cannot_be_selected() -> None:
    # "!foo" matches a pod without labels, so the rule reaches one: no budget can select it.
    selectors = (parse_build_pod_selector(f"{MCO_NAMESPACE}:!foo@Job"),)
    bare = pod("bare", labels={}, owners=(OwnerRef("Job", "x"),))
    result = plan(HERE, [bare], [], selectors)
    assert result.create == ()
    assert [(u.pod, "no labels" in u.why) for u in result.unshieldable] == [(bare, True)]


def test_a_label_value_the_api_server_would_refuse_is_unshieldable_not_a_crash() -> None:
    """Issue 27: a watch may carry a label value no selector can take (a space, 64
    characters); the plan raised SelectorError and the shield's task ended the agent."""
    for value in ("build rendered-worker-b", "b" * 64, "-build"):
        bad = pod("bad", labels={"openshift.io/build.name": value})
        result = plan(HERE, [bad], [], SELECTORS)
        assert result.create == ()
        [u] = result.unshieldable
        assert u.pod == bad
        assert "the API server would refuse the budget" in u.why
        assert "invalid label value" in u.why


def test_ours_that_no_longer_selects_the_pod_is_replaced() -> None:
    p = pod()
    stale_selector = ours_for(p, selector=LabelSelector.from_dict({"matchLabels": {"x": "y"}}))
    first = plan(HERE, [p], [stale_selector], SELECTORS)
    assert first.delete == (stale_selector,)
    assert first.create == ()  # the name is still taken; created once the old one is gone
    second = plan(HERE, [p], [], SELECTORS)
    assert [w.name for w in second.create] == [stale_selector.name]


def test_dependencies_only_while_a_build_runs_anywhere() -> None:
    builder = pod("machine-os-builder-1", labels={"k8s-app": "machine-os-builder"})
    registry = pod(
        "image-registry-1",
        labels={"docker-registry": "default"},
        namespace=shieldplan.REGISTRY_NAMESPACE,
    )
    # This agent sees only its node's pods: another node's build shows as that agent's budget.
    build_elsewhere = ours_for(pod(node=OTHER))
    idle = plan(HERE, [builder, registry], [], SELECTORS, dependency_selectors=DEPS)
    assert idle.create == ()
    busy = plan(HERE, [builder, registry], [build_elsewhere], SELECTORS, dependency_selectors=DEPS)
    assert sorted((w.pod.name, w.role) for w in busy.create) == [
        ("image-registry-1", Role.DEPENDENCY),
        ("machine-os-builder-1", Role.DEPENDENCY),
    ]
    assert busy.create[0].manifest()["metadata"]["labels"]["drain-guard.io/shield"] == (
        "dependency"
    )
    # Off by default.
    assert plan(HERE, [builder, registry], [build_elsewhere], SELECTORS).create == ()
    # A build on this node is enough.
    here = plan(HERE, [builder, pod()], [], SELECTORS, dependency_selectors=DEPS)
    assert sorted(w.role for w in here.create) == [Role.BUILD_POD, Role.DEPENDENCY]


def test_dependency_budgets_go_when_no_build_runs() -> None:
    builder = pod("machine-os-builder-1", labels={"k8s-app": "machine-os-builder"})
    budget = ours_for(builder, role=Role.DEPENDENCY)
    assert plan(HERE, [builder], [budget], SELECTORS, dependency_selectors=DEPS).delete == (budget,)


def test_replicas_sharing_labels_are_not_shielded() -> None:
    labels = {"docker-registry": "default", "pod-template-hash": "abc"}
    ns = shieldplan.REGISTRY_NAMESPACE
    here = pod("registry-1", labels=labels, namespace=ns)
    there = pod("registry-2", labels=labels, namespace=ns, node=OTHER)
    elsewhere = ours_for(pod(node=OTHER))
    result = plan(
        HERE,
        [here],
        [elsewhere],
        SELECTORS,
        dependency_selectors=DEPS,
        shared=checked([here, there]),
    )
    assert result.create == ()
    assert [u.pod.name for u in result.unshieldable] == ["registry-1"]


def test_long_names_and_node_names_fit_kubernetes_limits() -> None:
    long_pod = "p" * 250
    name = shieldplan.budget_name(long_pod, "uid-1")
    assert len(name) <= 253
    assert name != shieldplan.budget_name(long_pod, "uid-2")
    assert shieldplan.budget_name("short", "uid") == "drain-guard-short"
    long_node = "ip-10-0-12-65." + "x" * 60 + ".compute.internal"
    value = node_label_value(long_node)
    assert len(value) <= 63
    assert value != long_node
    assert node_label_value("worker-0") == "worker-0"


def test_status_json_lists_budgets_conflicts_and_forbidden_namespaces() -> None:
    p = pod()
    result = plan(
        HERE, [p], [foreign("x", {"openshift.io/build.name": "build-rendered-worker-b"})], SELECTORS
    )
    status = shieldplan.ShieldStatus(
        nodes=HERE,
        namespaces=(MCO_NAMESPACE,),
        forbidden={"other": "poddisruptionbudget_list forbidden"},
        conflicts=result.conflicts,
    ).to_json()
    assert status["conflicts"] == [
        {
            "namespace": MCO_NAMESPACE,
            "name": p.name,
            "node": NODE,
            "phase": "Running",
            "role": "build-pod",
            "budgets": [f"{MCO_NAMESPACE}/x"],
            "shielded": False,
        }
    ]
    assert status["forbidden"] == {"other": "poddisruptionbudget_list forbidden"}
    assert status["budgets"] == []
    assert status["node"] == NODE
    assert shieldplan.ShieldStatus().to_json()["node"] == "*"


_label = st.sampled_from(["a", "b", "c"])
_labels = st.dictionaries(_label, st.sampled_from(["1", "2"]), max_size=3)


@given(
    st.lists(
        st.tuples(_labels, st.sampled_from([NODE, OTHER]), st.sampled_from(["Running", "Failed"])),
        max_size=6,
    )
)
def test_every_created_budget_selects_exactly_its_pod_among_active_pods(
    specs: list[tuple[dict[str, str], str, str]],
) -> None:
    selectors = (parse_build_pod_selector(f"{MCO_NAMESPACE}:a"),)
    pods = [
        pod(f"p{i}", labels=labels, node=n, phase=ph) for i, (labels, n, ph) in enumerate(specs)
    ]
    mine = [p for p in pods if p.node == NODE]
    result = plan(HERE, mine, [], selectors, shared=checked(pods))
    for want in result.create:
        budget = BudgetState.from_dict(
            {**want.manifest(), "metadata": {**want.manifest()["metadata"], "uid": "u"}}
        )
        assert [p for p in pods if p.running and budget.selects(p)] == [want.pod]
    shielded = {w.pod.uid for w in result.create} | {u.pod.uid for u in result.unshieldable}
    wanted = {p.uid for p in pods if p.node == NODE and p.running and "a" in p.labels}
    assert shielded == wanted
    # Every node, seeing every pod: the same guarantee over all of them.
    everywhere = plan(EVERY_NODE, pods, [], selectors, shared=checked(pods))
    for want in everywhere.create:
        budget = BudgetState.from_dict(
            {**want.manifest(), "metadata": {**want.manifest()["metadata"], "uid": "u"}}
        )
        assert [p for p in pods if p.running and budget.selects(p)] == [want.pod]
    covered = {w.pod.uid for w in everywhere.create} | {u.pod.uid for u in everywhere.unshieldable}
    assert covered == {p.uid for p in pods if p.running and "a" in p.labels}


_budget_labels = st.sampled_from([None, {}, {"a": "1"}, {"a": "2"}, {"b": "1"}])


@given(
    st.lists(
        st.tuples(_labels, st.sampled_from([NODE, OTHER]), st.sampled_from(["Running", "Failed"])),
        max_size=5,
    ),
    st.lists(st.tuples(_budget_labels, st.booleans()), max_size=4),
)
def test_no_created_budget_makes_a_second_one_over_an_active_pod(
    specs: list[tuple[dict[str, str], str, str]],
    budget_specs: list[tuple[dict[str, str] | None, bool]],
) -> None:
    selectors = (parse_build_pod_selector(f"{MCO_NAMESPACE}:a"),)
    pods = [
        pod(f"p{i}", labels=labels, node=n, phase=ph) for i, (labels, n, ph) in enumerate(specs)
    ]
    budgets = []
    for i, (match, mine) in enumerate(budget_specs):
        b = foreign(f"b{i}", match)
        budgets.append(_replace(b, labels=ours_for(pod()).labels) if mine else b)
    local = [p for p in pods if p.node == NODE]
    result = plan(HERE, local, budgets, selectors, shared=checked(pods))
    created = [BudgetState.from_dict(w.manifest()) for w in result.create]
    kept = [b for b in budgets if b not in result.delete]
    for p in pods:
        if not p.running:
            continue
        new = [b for b in created if b.selects(p)]
        assert len(new) <= 1
        if new:
            assert not [b for b in kept if b.selects(p)]
