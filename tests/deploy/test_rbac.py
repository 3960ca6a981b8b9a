"""Each overlay's rendered RBAC grants the agent exactly what ``drain_guard.confine.permissions``
lists for its install mode (``service_account_grants``).

Exactly: the test fails when a role lacks a verb the code uses and when a role grants one the
list does not have. Only the roles bound to the agent's service account count. The OpenShift
overlays also grant that account what its sidecar and its pod admission need; those grants
are listed here, each with its reason, and compared exactly too. What the agent does with the
node's own identity instead (``node_identity_calls``) must be within the Node authorizer's
rules, as the simulator models them from Kubernetes' source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from drain_guard.confine.permissions import (
    EVENTS_NAMESPACE,
    INSTALL_MODES,
    MCO_NAMESPACES,
    PERMISSIONS,
    Permission,
    Scope,
    node_identity_calls,
    service_account_grants,
)
from drain_guard.node import events
from drain_guard_sim.apiserver import nodeauth
from tests.deploy.admission import Policy
from tests.deploy.rbac import Grant, granted
from tests.deploy.tools import WITH_ADMISSION_POLICY, Obj, agent_container, one

# Granted to the agent's service account on OpenShift besides what the agent calls:
# kube-rbac-proxy (in the agent's pod, so with its account) reviews scrapers' tokens and
# access; the pod is admitted under the drain-guard SCC.
OPENSHIFT_EXTRA = {
    Grant("authentication.k8s.io", "tokenreviews", "create", "", ()),
    Grant("authorization.k8s.io", "subjectaccessreviews", "create", "", ()),
    Grant(
        "security.openshift.io",
        "securitycontextconstraints",
        "use",
        "drain-guard",
        ("drain-guard",),
    ),
}


def expected(objects: list[Obj], permissions: Iterable[Permission]) -> set[Grant]:
    """The grants ``permissions`` call for, placed as the rendered DaemonSet needs them."""
    namespace, name = _own_daemonset(objects)
    grants: set[Grant] = set()
    for p in permissions:
        for verb in p.verbs:
            if p.scope is Scope.CLUSTER:
                grants.add(Grant(p.api_group, p.resource, verb, "", ()))
            elif p.scope is Scope.MCO:
                for shielded in MCO_NAMESPACES:
                    grants.add(Grant(p.api_group, p.resource, verb, shielded, ()))
            elif p.scope is Scope.EVENTS:
                grants.add(Grant(p.api_group, p.resource, verb, EVENTS_NAMESPACE, ()))
            elif p.scope is Scope.OWN_NAMESPACE:
                grants.add(Grant(p.api_group, p.resource, verb, namespace, ()))
            else:
                grants.add(Grant(p.api_group, p.resource, verb, namespace, (name,)))
    return grants


def _own_daemonset(objects: list[Obj]) -> tuple[str, str]:
    """The DaemonSet the agent is told to look up (``--daemonset``), resolved."""
    container = agent_container(objects)
    args = [a for a in container["args"] if a.startswith("--daemonset=")]
    assert len(args) == 1
    value = args[0].removeprefix("--daemonset=")
    daemonset = one(objects, "DaemonSet", "drain-guard")
    value = value.replace("$(POD_NAMESPACE)", daemonset["metadata"]["namespace"])
    namespace, _, name = value.partition("/")
    assert (namespace, name) == (daemonset["metadata"]["namespace"], daemonset["metadata"]["name"])
    return namespace, name


def _extra(overlay: str) -> set[Grant]:
    return OPENSHIFT_EXTRA if overlay.startswith("openshift") else set()


def _diff(actual: set[Grant], wanted: set[Grant]) -> str:
    lines = [f"missing: {g}" for g in sorted(wanted - actual)]
    lines += [f"granted but unused: {g}" for g in sorted(actual - wanted)]
    return "\n".join(lines)


def _wanted(objects: list[Obj], overlay: str) -> set[Grant]:
    return expected(objects, service_account_grants(INSTALL_MODES[overlay])) | _extra(overlay)


def test_rbac_grants_exactly_what_the_agent_calls(objects: list[Obj], overlay: str) -> None:
    actual = granted(objects)
    wanted = _wanted(objects, overlay)
    assert actual == wanted, _diff(actual, wanted)


def test_a_missing_verb_is_caught(objects: list[Obj], overlay: str) -> None:
    role = one(objects, "ClusterRole", "drain-guard")
    nodes = next(r for r in role["rules"] if r["resources"] == ["nodes"])
    nodes["verbs"].remove("watch")
    assert "missing: Grant(api_group='', resource='nodes', verb='watch'" in _diff(
        granted(objects), _wanted(objects, overlay)
    )


def test_an_unused_verb_is_caught(objects: list[Obj], overlay: str) -> None:
    role = one(objects, "ClusterRole", "drain-guard")
    role["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    assert "granted but unused: Grant(api_group='', resource='secrets', verb='get'" in _diff(
        granted(objects), _wanted(objects, overlay)
    )


def test_a_permission_the_roles_lack_is_caught(objects: list[Obj], overlay: str) -> None:
    """A verb added to the code's list but not to the roles fails the comparison."""
    more = (*PERMISSIONS, Permission("", "pods", frozenset({"get"})))
    assert granted(objects) != expected(objects, more) | _extra(overlay)


def test_events_are_granted_where_the_agent_writes_them() -> None:
    assert events.EVENT_NAMESPACE == EVENTS_NAMESPACE


def test_events_are_granted_in_one_namespace_only(objects: list[Obj], overlay: str) -> None:
    """No cluster-wide grant on Events: a compromised agent cannot write them elsewhere. With
    the node's identity (4.15/4.16) the service account gets no Event right at all."""
    event_grants = {g for g in granted(objects) if g.resource == "events"}
    if INSTALL_MODES[overlay].node_identity:
        assert not event_grants
        return
    assert event_grants
    assert {g.namespace for g in event_grants} == {EVENTS_NAMESPACE}


READS = {"get", "list", "watch"}


def test_on_4_15_every_write_of_the_service_account_goes_through_the_webhook(
    rendered: Callable[[str], list[Obj]],
) -> None:
    """Issue 21: the 4.17+ rights (Node patch, Events, budgets) come back on 4.15/4.16 only
    because the admission webhook's Fail entry sees every one of those writes."""
    objects = rendered("openshift-4.15")
    writes = {
        (g.api_group, g.resource) for g in granted(objects) - OPENSHIFT_EXTRA if g.verb not in READS
    }
    assert writes == {("", "nodes"), ("", "events"), ("policy", "poddisruptionbudgets")}
    configuration = one(objects, "ValidatingWebhookConfiguration", "drain-guard")
    (agents,) = (w for w in configuration["webhooks"] if w["name"] == "agents.drain-guard.io")
    assert agents["failurePolicy"] == "Fail"
    seen = {
        (g, r) for rule in agents["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert writes <= seen


def test_the_systemd_unit_needs_no_service_account() -> None:
    assert service_account_grants(INSTALL_MODES["systemd"]) == ()


@pytest.mark.parametrize("mode", sorted(INSTALL_MODES))
def test_what_goes_with_the_node_identity_is_within_the_node_rules(mode: str) -> None:
    """Nothing the agent does as its node needs more than NodeRules() grant every node; and
    where the node identity makes the writes, the service account is granted none of them."""
    calls = node_identity_calls(INSTALL_MODES[mode])
    assert bool(calls) == INSTALL_MODES[mode].node_identity
    for p in calls:
        for verb in p.verbs:
            assert nodeauth.authorized(p.api_group, p.resource, "", verb), (mode, p, verb)
    assert not set(calls) & set(service_account_grants(INSTALL_MODES[mode]))


def test_the_node_rules_would_refuse_the_shield() -> None:
    """Why the shield is off where the node identity writes: NodeRules() grant no budgets."""
    (budgets,) = (p for p in PERMISSIONS if p.shield)
    assert not any(
        nodeauth.authorized(budgets.api_group, budgets.resource, "", v) for v in budgets.verbs
    )


def test_own_daemonset_read_is_limited_by_name(objects: list[Obj]) -> None:
    role = one(objects, "Role", "drain-guard")
    rule = next(r for r in role["rules"] if r["resources"] == ["daemonsets"])
    assert rule["resourceNames"] == [one(objects, "DaemonSet", "drain-guard")["metadata"]["name"]]


@pytest.mark.parametrize("forbidden", ["*", "secrets", "pods/exec", "nodes/proxy", "escalate"])
def test_no_broad_or_dangerous_grant(objects: list[Obj], forbidden: str) -> None:
    for grant in granted(objects):
        assert forbidden not in {grant.api_group, grant.resource, grant.verb}, grant


@pytest.mark.parametrize("overlay", WITH_ADMISSION_POLICY)
def test_admission_policies_match_the_agent_account(objects: list[Obj]) -> None:
    """Every policy applies to the account the DaemonSet runs as, and not to others."""
    account = one(objects, "ServiceAccount")
    daemonset = one(objects, "DaemonSet", "drain-guard")
    assert (
        daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    )
    meta = account["metadata"]
    username = f"system:serviceaccount:{meta['namespace']}:{meta['name']}"
    # The writes' policies; drain-guard-pod-confinement matches the account's pods by their
    # spec instead (test_pod_confinement), drain-guard-hold-request-format and
    # drain-guard-released-by everyone's hold requests and releases (test_admission_policy).
    policies = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
        and o["metadata"]["name"]
        not in (
            "drain-guard-pod-confinement",
            "drain-guard-hold-request-format",
            "drain-guard-released-by",
        )
    ]
    assert len(policies) == 3
    for obj in policies:
        policy = Policy(obj)
        assert policy.review(username, None, {}, {}).applies, obj["metadata"]["name"]
        for other in (
            "system:serviceaccount:openshift-machine-config-operator:machine-config-daemon",
            f"system:serviceaccount:{meta['namespace']}:default",
            "system:node:worker-0",
            "kube:admin",
        ):
            assert not policy.review(other, None, {}, {}).applies, (obj["metadata"]["name"], other)


@pytest.mark.parametrize("overlay", WITH_ADMISSION_POLICY)
def test_admission_policies_are_bound_and_deny(objects: list[Obj]) -> None:
    policies = {
        o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
    }
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(policies)
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in binding["spec"]
    for name, policy in policies.items():
        # A confinement fails closed; the hold request's format check is a convenience that
        # must never block the kubelet's or MCO's Node writes.
        expected = "Ignore" if name == "drain-guard-hold-request-format" else "Fail"
        assert policy["spec"]["failurePolicy"] == expected, name


def test_scc_use_is_granted_for_the_drain_guard_scc_only(
    rendered: Callable[[str], list[Obj]],
) -> None:
    objects = rendered("openshift")
    scc_grants = {g for g in granted(objects) if g.resource == "securitycontextconstraints"}
    assert {g.resource_names for g in scc_grants} == {
        (one(objects, "SecurityContextConstraints")["metadata"]["name"],)
    }


def test_pods_are_read_only_where_build_pods_run(objects: list[Obj]) -> None:
    """No cluster-wide pod list/watch in the default install: the agent's one pod watch is of
    its node's pods in MCO's namespace, and only pods there can hold a drain."""
    pod_reads = {
        g for g in granted(objects) if g.resource == "pods" and g.verb in ("list", "watch")
    }
    assert {(g.verb, g.namespace) for g in pod_reads} == {
        ("list", "openshift-machine-config-operator"),
        ("watch", "openshift-machine-config-operator"),
    }
