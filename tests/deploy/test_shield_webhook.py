"""``daemonset/overlays/systemd-4.15``: the systemd install's cluster side on OpenShift
4.15/4.16, which serve no ValidatingAdmissionPolicy. The central shield as the ``systemd``
overlay ships it, its policy replaced by the admission webhook the ``openshift-4.15`` overlay
runs, with one entry: called for exactly the accounts the policy matches, for their budget
writes only, refusing them while it cannot answer; valid on Kubernetes 1.28."""

from __future__ import annotations

from collections.abc import Callable

import kubernetes_validate
import pytest

from drain_guard.confine.permissions import MCO_NAMESPACES, WEBHOOK_PERMISSIONS, Scope
from drain_guard.kube.client import ADMISSION_TIMEOUT
from tests.deploy.admission import MatchConditions
from tests.deploy.rbac import Grant, granted
from tests.deploy.test_admission_policy import budget
from tests.deploy.tools import MIN_KUBERNETES, Obj, one

OVERLAY = "systemd-4.15"
POLICY = "drain-guard-shield-confinement"
ENTRY = "shield.drain-guard.io"
WEBHOOK = "drain-guard-webhook"
CUSTOM_KINDS = {"monitoring.coreos.com/v1 ServiceMonitor"}
#: Who the central shield is (True), as the policy on 1.30+ matches it, and who is not.
USERS = {
    "system:serviceaccount:drain-guard:drain-guard-shield": True,
    "system:serviceaccount:platform:acme-drain-guard-shield": True,
    "system:serviceaccount:drain-guard:drain-guard-shield-x": True,
    "system:serviceaccount:drain-guard:drain-guard": False,
    "system:serviceaccount:drain-guard:drain-guard-webhook": False,
    "system:serviceaccount:drain-guard:shield": False,
    "system:serviceaccount:openshift-machine-config-operator:machine-os-builder": False,
    "system:node:drain-guard-shield": False,
    "drain-guard-shield": False,
}


@pytest.fixture(scope="module")
def objects(rendered: Callable[[str], list[Obj]]) -> list[Obj]:
    return rendered(OVERLAY)


def names(objects: list[Obj]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def test_it_is_the_systemd_cluster_side_with_the_webhook_for_the_policy(
    rendered: Callable[[str], list[Obj]], objects: list[Obj]
) -> None:
    """Everything of the systemd overlay but its policy; the webhook's Deployment as the
    openshift-4.15 overlay runs it (one component), less its read of the agents' pods."""
    systemd = names(rendered("systemd")) - {
        ("ValidatingAdmissionPolicy", POLICY),
        ("ValidatingAdmissionPolicyBinding", POLICY),
    }
    webhook = {
        ("ServiceAccount", WEBHOOK),
        ("Deployment", WEBHOOK),
        ("Service", WEBHOOK),
        ("PodDisruptionBudget", WEBHOOK),
        ("NetworkPolicy", WEBHOOK),
        ("Role", f"{WEBHOOK}-build-pods"),
        ("RoleBinding", f"{WEBHOOK}-build-pods"),
        ("ValidatingWebhookConfiguration", "drain-guard-shield"),
    }
    assert names(objects) == systemd | webhook
    for kind in ("Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget"):
        assert one(objects, kind, WEBHOOK) == one(rendered("openshift-4.15"), kind, WEBHOOK)


def test_it_validates_against_the_oldest_kubernetes_it_is_for(objects: list[Obj]) -> None:
    without_schema = set()
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, MIN_KUBERNETES["openshift-4.15"], strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            without_schema.add(f"{obj['apiVersion']} {obj['kind']}")
    assert without_schema == CUSTOM_KINDS


def test_one_entry_for_the_shields_budget_writes_that_fails_closed(objects: list[Obj]) -> None:
    configuration = one(objects, "ValidatingWebhookConfiguration", "drain-guard-shield")
    annotations = configuration["metadata"]["annotations"]
    assert annotations["service.beta.openshift.io/inject-cabundle"] == "true"
    (webhook,) = configuration["webhooks"]
    assert webhook["name"] == ENTRY
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["timeoutSeconds"] <= ADMISSION_TIMEOUT
    assert webhook["sideEffects"] == "None"
    service = webhook["clientConfig"]["service"]
    assert (service["namespace"], service["name"]) == ("drain-guard", WEBHOOK)
    (rule,) = webhook["rules"]
    assert (rule["apiGroups"], rule["resources"]) == (["policy"], ["poddisruptionbudgets"])
    assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"]


@pytest.mark.parametrize("user", USERS)
def test_it_is_called_for_the_accounts_the_policy_confines(
    rendered: Callable[[str], list[Obj]], objects: list[Obj], user: str
) -> None:
    """The entry and the 1.30+ policy match the same callers: no account the policy confines
    goes unjudged on 4.15/4.16 (a namePrefix, nameSuffix or namespace rename included)."""
    webhook = one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    policy = one(rendered("systemd"), "ValidatingAdmissionPolicy", POLICY)
    shield = budget()
    called = MatchConditions(webhook).matches(user, None, shield, "CREATE", "poddisruptionbudgets")
    confined = MatchConditions(policy["spec"]).matches(
        user, None, shield, "CREATE", "poddisruptionbudgets"
    )
    assert (called, confined) == (USERS[user], USERS[user])


def test_the_webhooks_account_reads_build_pods_and_nothing_else(objects: list[Obj]) -> None:
    """Its openshift-4.15 grants less the agents' pods: here it judges no agent."""
    wanted = {
        Grant(p.api_group, p.resource, verb, namespace, ())
        for p in WEBHOOK_PERMISSIONS
        if p.scope is Scope.MCO
        for verb in p.verbs
        for namespace in MCO_NAMESPACES
    }
    assert granted(objects, ("drain-guard", WEBHOOK)) == wanted
