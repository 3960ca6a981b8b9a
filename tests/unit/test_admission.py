"""The webhook's decisions (drain_guard.confine.admission), on the writes the agent really makes and
on the ones the ValidatingAdmissionPolicies deny (the same cases as tests/deploy's, so the
webhook of OpenShift 4.15/4.16 and the policies of 4.17+ are checked against one list), plus
what only the webhook can check: the token's pod, its owner and node, a budget's owner pod."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import jsonpatch
import pytest

from drain_guard import protocol
from drain_guard.confine.admission import (
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    PodKey,
    Verdict,
    decide,
    lookups,
)
from drain_guard.protocol import Reason
from tests.deploy.test_admission_policy import (
    DENIED_BUDGETS,
    DENIED_CHANGES,
    LAST_APPLIED,
    NODE,
    REQUEST,
    SINCE,
    budget,
    forged_pool_events,
    held,
    node,
    recorded_event,
)

NAMESPACE = "drain-guard"
AGENT = f"system:serviceaccount:{NAMESPACE}:drain-guard"
SHIELD = f"system:serviceaccount:{NAMESPACE}:drain-guard-shield"
MCO = "openshift-machine-config-operator"
Obj = dict[str, Any]


def agent_pod(
    node_name: str = NODE, name: str = "drain-guard-x7k2p", uid: str = "pod-uid-1"
) -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "drain-guard",
                    "uid": "ds-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {"serviceAccountName": "drain-guard", "nodeName": node_name},
    }


class Cluster:
    """The pods the webhook may look up: one agent pod per node, and MCO's build pods."""

    def __init__(self) -> None:
        self.pods: dict[PodKey, Obj] = {}
        for name in (NODE, "worker-1"):
            self.add(agent_pod(name, f"drain-guard-{name}", f"uid-{name}"))
        for name in (NODE, "worker-1"):
            owner = budget(name)["metadata"]["ownerReferences"][0]
            self.add(
                {
                    "metadata": {
                        "name": owner["name"] if name == NODE else owner["name"] + "-1",
                        "namespace": MCO,
                        "uid": owner["uid"] if name == NODE else "other-uid",
                        "labels": budget(name)["spec"]["selector"]["matchLabels"],
                    },
                    "spec": {"nodeName": name},
                }
            )

    def add(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self.pods[PodKey(meta["namespace"], meta["name"])] = pod

    def review(
        self,
        operation: str,
        resource: str,
        old: Obj | None,
        new: Obj | None,
        *,
        user: str = AGENT,
        on: str | None = NODE,
        extra: dict[str, list[str]] | None = None,
        agent: str = f"{NAMESPACE}:drain-guard",
    ) -> Verdict:
        subject = new if new is not None else old
        assert subject is not None
        meta = subject.get("metadata", {})
        if extra is None and on is not None:
            extra = {POD_NAME_EXTRA: [f"drain-guard-{on}"], POD_UID_EXTRA: [f"uid-{on}"]}
        request: Obj = {
            "uid": "req-1",
            "operation": operation,
            "resource": {"group": "", "version": "v1", "resource": resource},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "userInfo": {"username": user, **({"extra": extra} if extra else {})},
            "object": new,
            "oldObject": old,
        }
        found = {key: self.pods.get(key) for key in lookups(request, agent)}
        return decide(request, found, agent)


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def patched(obj: Obj, ops: list[protocol.JsonPatchOp]) -> Obj:
    result: Obj = jsonpatch.apply_patch(obj, ops)
    return result


def denied(verdict: Verdict, text: str = "") -> bool:
    return not verdict.allowed and text in verdict.message


# --- Nodes -------------------------------------------------------------------------------


def test_the_agents_hold_update_and_release_are_allowed(cluster: Cluster) -> None:
    assert cluster.review("UPDATE", "nodes", node(), held()).allowed
    before = held()
    record = protocol.read_hold(before["metadata"]["annotations"])
    assert record is not None
    ops = protocol.update_hold_patch(
        record,
        [Reason.BUILD_POD, Reason.NOOP_IMAGE],
        "more",
        record.since + timedelta(minutes=45),
        seen=before["metadata"]["annotations"],
        resource_version=before["metadata"].get("resourceVersion", ""),
    )
    assert cluster.review("UPDATE", "nodes", before, patched(before, ops)).allowed
    ops = protocol.release_patch(REQUEST, LAST_APPLIED, "101", before["metadata"]["annotations"])
    assert cluster.review("UPDATE", "nodes", before, patched(before, ops)).allowed
    marked = protocol.release_patch(
        REQUEST, LAST_APPLIED, "101", before["metadata"]["annotations"], mark_released=True
    )
    assert cluster.review("UPDATE", "nodes", before, patched(before, marked)).allowed


def test_cleanup_and_the_longest_detail_are_allowed(cluster: Cluster) -> None:
    before = node(**{protocol.HOLD_REASONS: "build-pod", protocol.RELEASED: REQUEST})
    ann = before["metadata"]["annotations"]
    ops = protocol.cleanup_patch(REQUEST, ann, [protocol.HOLD_REASONS, protocol.RELEASED])
    assert cluster.review("UPDATE", "nodes", before, patched(before, ops)).allowed
    ops = protocol.hold_patch(
        REQUEST,
        LAST_APPLIED,
        "1",
        [Reason.MANUAL],
        SINCE,
        "é" * 5000,
        expires=SINCE + timedelta(minutes=45),
    )
    assert cluster.review("UPDATE", "nodes", node(), patched(node(), ops)).allowed


def test_the_agent_removes_released_by_but_never_writes_it(cluster: Cluster) -> None:
    """The same rule as the policy's: who released is the releaser's record."""
    marker = {protocol.RELEASED: REQUEST, protocol.RELEASED_BY: "kube:admin"}
    before = node(**{**marker, protocol.DESIRED_DRAIN: "drain-rendered-worker-77dd01"})
    ann = before["metadata"]["annotations"]
    ops = protocol.cleanup_patch(ann[protocol.DESIRED_DRAIN], ann, list(marker))
    assert cluster.review("UPDATE", "nodes", before, patched(before, ops)).allowed
    for start in (node(), node(**{protocol.RELEASED: REQUEST}), before):
        after = copy.deepcopy(start)
        after["metadata"]["annotations"][protocol.RELEASED_BY] = AGENT
        verdict = cluster.review("UPDATE", "nodes", start, after)
        assert denied(verdict, "may remove drain-guard.io/released-by but not write it")


@pytest.mark.parametrize("change", DENIED_CHANGES)
def test_what_the_policy_denies_is_denied(cluster: Cluster, change: str) -> None:
    before = node()
    after = copy.deepcopy(before)
    DENIED_CHANGES[change](after)
    assert denied(cluster.review("UPDATE", "nodes", before, after))


def test_another_node_is_denied(cluster: Cluster) -> None:
    verdict = cluster.review("UPDATE", "nodes", node(), held(), on="worker-1")
    assert denied(verdict, "only the Node it runs on (worker-1)")


def test_a_key_drain_guard_does_not_write_is_denied(cluster: Cluster) -> None:
    """Stricter than the policy (any drain-guard.io/ key): the hold-request is the operator's."""
    after = held()
    after["metadata"]["annotations"][protocol.HOLD_REQUEST] = "2099-01-01T00:00:00Z"
    assert denied(cluster.review("UPDATE", "nodes", node(), after), protocol.HOLD_REQUEST)


def test_a_hold_without_its_record_and_an_applied_request_are_denied(cluster: Cluster) -> None:
    after = node(**{protocol.DESIRED_DRAIN: "hold-" + REQUEST})
    assert denied(cluster.review("UPDATE", "nodes", node(), after), "record the held request")
    applied = node(**{protocol.LAST_APPLIED_DRAIN: REQUEST})
    after = copy.deepcopy(applied)
    after["metadata"]["annotations"][protocol.DESIRED_DRAIN] = "hold-" + REQUEST
    verdict = cluster.review("UPDATE", "nodes", applied, after)
    assert denied(verdict, "equal to lastAppliedDrain")


# --- who is calling ----------------------------------------------------------------------------


def test_a_token_without_the_pod_extras_is_denied(cluster: Cluster) -> None:
    assert denied(cluster.review("UPDATE", "nodes", node(), held(), on=None), "pod-bound token")
    half = {POD_NAME_EXTRA: [f"drain-guard-{NODE}"]}
    assert denied(cluster.review("UPDATE", "nodes", node(), held(), extra=half))


def test_the_tokens_pod_must_be_the_live_agent_pod(cluster: Cluster) -> None:
    stale = {POD_NAME_EXTRA: [f"drain-guard-{NODE}"], POD_UID_EXTRA: ["old-uid"]}
    assert denied(cluster.review("UPDATE", "nodes", node(), held(), extra=stale), "replaced")
    gone = {POD_NAME_EXTRA: ["drain-guard-gone"], POD_UID_EXTRA: ["u"]}
    assert denied(cluster.review("UPDATE", "nodes", node(), held(), extra=gone), "not exist")
    # A pod of the account that the DaemonSet does not control (made by hand).
    stray = agent_pod(name="stray", uid="stray-uid")
    stray["metadata"]["ownerReferences"] = []
    cluster.add(stray)
    by_hand = {POD_NAME_EXTRA: ["stray"], POD_UID_EXTRA: ["stray-uid"]}
    verdict = cluster.review("UPDATE", "nodes", node(), held(), extra=by_hand)
    assert denied(verdict, "DaemonSet")
    unbound = agent_pod(name="unbound", uid="u2")
    del unbound["spec"]["nodeName"]
    cluster.add(unbound)
    extra = {POD_NAME_EXTRA: ["unbound"], POD_UID_EXTRA: ["u2"]}
    assert denied(cluster.review("UPDATE", "nodes", node(), held(), extra=extra), "no node")


def test_a_renamed_account_is_the_agent_only_when_the_webhook_is_told_it(
    cluster: Cluster,
) -> None:
    """Issue 34: the webhook judges the account it is given (``--agent-account``, written by
    the renamed-namespace transformer) and no other: one that merely ends like it is not."""
    for namespace, account in (
        ("platform", "drain-guard"),
        (NAMESPACE, "acme-drain-guard"),
        (NAMESPACE, "drain-guard-x"),
    ):
        pod = agent_pod("worker-1", "p", "u")
        pod["metadata"]["namespace"] = namespace
        pod["metadata"]["ownerReferences"][0]["name"] = account
        pod["spec"]["serviceAccountName"] = account
        cluster.add(pod)
        user = f"system:serviceaccount:{namespace}:{account}"
        extra = {POD_NAME_EXTRA: ["p"], POD_UID_EXTRA: ["u"]}
        told = f"{namespace}:{account}"
        verdict = cluster.review(
            "UPDATE", "nodes", node(), held(), user=user, extra=extra, agent=told
        )
        assert denied(verdict, "only the Node it runs on (worker-1)"), account
        # Not told: not an agent (the configuration does not send it either).
        assert cluster.review("UPDATE", "nodes", node(), held(), user=user, extra=extra).allowed


def test_other_users_are_allowed_whatever_they_write(cluster: Cluster) -> None:
    after = node()
    after["spec"]["unschedulable"] = True
    for user in (
        "system:serviceaccount:openshift-machine-config-operator:machine-config-controller",
        "system:serviceaccount:drain-guard:other",
        "drain-guard",
    ):
        assert cluster.review("UPDATE", "nodes", node(), after, user=user, on=None).allowed


def test_an_agent_writes_nothing_else(cluster: Cluster) -> None:
    secret = {"metadata": {"name": "s", "namespace": MCO}}
    assert denied(cluster.review("CREATE", "secrets", None, secret), "may not write secrets")


# --- budgets -------------------------------------------------------------------------------


def test_the_shields_budget_is_allowed_to_the_agent_and_the_central_shield(
    cluster: Cluster,
) -> None:
    assert cluster.review("CREATE", "poddisruptionbudgets", None, budget()).allowed
    assert cluster.review("DELETE", "poddisruptionbudgets", budget(), None).allowed
    other = budget("worker-1")
    other["metadata"]["ownerReferences"][0].update(
        name=other["metadata"]["ownerReferences"][0]["name"] + "-1", uid="other-uid"
    )
    assert cluster.review("CREATE", "poddisruptionbudgets", None, other, user=SHIELD).allowed
    assert cluster.review("DELETE", "poddisruptionbudgets", other, None, user=SHIELD).allowed


@pytest.mark.parametrize(
    "account", ["drain-guard-shield", "acme-drain-guard-shield", "drain-guard-shield-x"]
)
def test_the_central_shield_is_any_account_whose_name_holds_drain_guard_shield(
    cluster: Cluster, account: str
) -> None:
    """As the webhook configuration of daemonset/overlays/systemd-4.15 and the policy on
    1.30+ match it: a nameSuffix is judged as the shield, not let through as a stranger."""
    user = f"system:serviceaccount:{NAMESPACE}:{account}"
    assert cluster.review("CREATE", "poddisruptionbudgets", None, budget(), user=user).allowed
    stall = budget(spec__maxUnavailable=0)
    assert denied(cluster.review("CREATE", "poddisruptionbudgets", None, stall, user=user))
    node_write = cluster.review("UPDATE", "nodes", node(), held(), user=user)
    assert denied(node_write, "budgets only")


@pytest.mark.parametrize("change", DENIED_BUDGETS)
@pytest.mark.parametrize("user", [AGENT, SHIELD])
def test_what_the_policy_denies_of_budgets_is_denied(
    cluster: Cluster, change: str, user: str
) -> None:
    obj = budget(**DENIED_BUDGETS[change])
    if change == "another node's" and user == SHIELD:
        pytest.skip("the central shield keeps every node's budgets")
    assert denied(cluster.review("CREATE", "poddisruptionbudgets", None, obj, user=user))


def test_a_budget_must_be_on_its_own_pod_of_the_agents_node_in_mcos_namespace(
    cluster: Cluster,
) -> None:
    elsewhere = budget()
    elsewhere["metadata"]["namespace"] = "default"
    assert denied(cluster.review("CREATE", "poddisruptionbudgets", None, elsewhere), MCO)
    # Labelled for the agent's node, but its pod runs on worker-1.
    lying = budget()
    owner = lying["metadata"]["ownerReferences"][0]
    owner.update(name=owner["name"] + "-1", uid="other-uid")
    assert denied(cluster.review("CREATE", "poddisruptionbudgets", None, lying), "pod's node")
    ghost = budget()
    ghost["metadata"]["ownerReferences"][0]["uid"] = "not-the-pods"
    assert denied(cluster.review("CREATE", "poddisruptionbudgets", None, ghost), "existing pod")
    wider = budget(spec__selector={"matchLabels": {"openshift.io/build.name": "another"}})
    assert denied(cluster.review("CREATE", "poddisruptionbudgets", None, wider), "select the pod")
    changed = cluster.review("UPDATE", "poddisruptionbudgets", budget(), budget())
    assert denied(changed, "never changes")
    verdict = cluster.review("DELETE", "poddisruptionbudgets", budget("worker-1"), None)
    assert denied(verdict, "own node's")


# --- Events ----------------------------------------------------------------------------------


def test_the_agents_events_are_allowed(cluster: Cluster) -> None:
    body = recorded_event()
    assert cluster.review("CREATE", "events", None, body).allowed
    bumped = copy.deepcopy(body) | {"count": 2, "message": "again"}
    assert cluster.review("UPDATE", "events", body, bumped).allowed


def test_events_about_anything_else_are_denied(cluster: Cluster) -> None:
    other = recorded_event("worker-1")
    assert denied(cluster.review("CREATE", "events", None, other), "own Node")
    # An UPDATE that turns another node's Event into one about its own is judged on both.
    mine = recorded_event()
    assert denied(cluster.review("UPDATE", "events", other, mine), "own Node")
    spoofed = recorded_event() | {"source": {"component": "kubelet", "host": NODE}}
    assert denied(cluster.review("CREATE", "events", None, spoofed), "reporting component")
    posing = recorded_event() | {"reportingComponent": "machineconfigdaemon"}
    assert denied(cluster.review("CREATE", "events", None, posing), "reporting component")
    assert denied(cluster.review("DELETE", "events", mine, None), "never deletes")
    # Its own Node's Event, but a message of 1 MiB (issue 34): capped as the pool Events'.
    huge = recorded_event() | {"message": "x" * (1024 * 1024)}
    assert denied(cluster.review("CREATE", "events", None, huge), "at most 1024 bytes")
    assert denied(cluster.review("UPDATE", "events", mine, huge), "at most 1024 bytes")
    assert denied(cluster.review("CREATE", "events", None, mine, on=None), "pod-bound")
    assert denied(cluster.review("CREATE", "events", None, mine, user=SHIELD), "budgets only")


def test_the_agents_pool_events_are_allowed_and_forged_ones_denied(cluster: Cluster) -> None:
    mine = recorded_event(pool="worker")
    assert cluster.review("CREATE", "events", None, mine).allowed
    bumped = copy.deepcopy(mine) | {"count": 2, "message": "again"}
    assert cluster.review("UPDATE", "events", mine, bumped).allowed
    allowed = [
        name
        for name, body in forged_pool_events().items()
        if cluster.review("CREATE", "events", None, body).allowed
    ]
    assert allowed == []
    another_nodes = recorded_event("worker-1", pool="worker")
    verdict = cluster.review("UPDATE", "events", another_nodes, mine)
    assert denied(verdict, "may update only its own Events")
