"""The ValidatingAdmissionPolicies, evaluated with a CEL interpreter (tests/deploy/admission.py).

Each policy's own expressions, as rendered, run against admission requests built from what
the agent really writes (its Node patches from ``drain_guard.protocol`` applied with
``jsonpatch``, the shield's budget manifest, the Event recorder's body) and from the writes a
compromised or buggy agent could try.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drain_guard import guards, protocol
from drain_guard.core.pods import Pod
from drain_guard.decision import decide
from drain_guard.kube.client import Kube
from drain_guard.kube.kubeclient import ApiClient
from drain_guard.node.events import EventRecorder
from drain_guard.protocol import Reason
from drain_guard.shield.plan import Role, Want, budget_name
from tests.deploy.admission import Policy, Verdict
from tests.deploy.tools import WITH_ADMISSION_POLICY, Obj, one

AGENT = "system:serviceaccount:drain-guard:drain-guard"
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
NODE = "worker-0"
REQUEST = "drain-rendered-worker-5620aa"
LAST_APPLIED = "uncordon-rendered-worker-11b0cc"
SINCE = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


OPERATOR = "kube:admin"
NODE_POLICY = "drain-guard-node-confinement"
BUDGET_POLICY = "drain-guard-budget-confinement"
EVENT_POLICY = "drain-guard-event-confinement"


@pytest.fixture(scope="module")
def policy(rendered: Callable[[str], list[Obj]]) -> Policy:
    return Policy(one(rendered("kubernetes"), "ValidatingAdmissionPolicy", NODE_POLICY))


@pytest.fixture(scope="module")
def budgets(rendered: Callable[[str], list[Obj]]) -> Policy:
    return Policy(one(rendered("kubernetes"), "ValidatingAdmissionPolicy", BUDGET_POLICY))


@pytest.fixture(scope="module")
def events(rendered: Callable[[str], list[Obj]]) -> Policy:
    return Policy(one(rendered("kubernetes"), "ValidatingAdmissionPolicy", EVENT_POLICY))


def test_overlays_ship_the_same_policies(rendered: Callable[[str], list[Obj]]) -> None:
    """What is evaluated here (the kubernetes overlay's) is what every overlay with it ships."""
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    for overlay in WITH_ADMISSION_POLICY:
        for kind in kinds:
            mine = sorted((o for o in rendered(overlay) if o["kind"] == kind), key=str)
            theirs = sorted((o for o in rendered("kubernetes") if o["kind"] == kind), key=str)
            assert mine == theirs
            # these three, the pod's (test_pod_confinement), hold requests, released-by
            assert len(mine) == 6


def node(**annotations: str) -> Obj:
    base = {
        protocol.CURRENT_CONFIG: "rendered-worker-11b0cc",
        protocol.DESIRED_CONFIG: "rendered-worker-5620aa",
        protocol.STATE: "Working",
        protocol.DESIRED_DRAIN: REQUEST,
        protocol.LAST_APPLIED_DRAIN: LAST_APPLIED,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "resourceVersion": "100",
            "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/hostname": NODE},
            "annotations": {**base, **annotations},
        },
        "spec": {"providerID": "aws:///us-east-1a/i-0abc", "podCIDR": "10.128.2.0/23"},
        "status": {"nodeInfo": {"kubeletVersion": "v1.30.4"}},
    }


def patched(obj: Obj, ops: list[protocol.JsonPatchOp]) -> Obj:
    result: Obj = jsonpatch.apply_patch(obj, ops)
    return result


def held() -> Obj:
    before = node()
    ops = protocol.hold_patch(
        REQUEST,
        LAST_APPLIED,
        "100",
        [Reason.BUILD_POD],
        SINCE,
        "build pod openshift-mco/b-build",
        expires=SINCE + timedelta(minutes=45),
    )
    return patched(before, ops)


def by_agent(policy: Policy, old: Obj, new: Obj, on: str | None = NODE) -> Verdict:
    extra = None if on is None else {NODE_NAME_CLAIM: [on]}
    return policy.review(AGENT, extra, old, new)


# --- what the agent really writes is admitted ----------------------------------------------


def test_hold_is_admitted(policy: Policy) -> None:
    verdict = by_agent(policy, node(), held())
    assert verdict.applies
    assert verdict.admitted, verdict.denied


def test_update_of_a_hold_is_admitted(policy: Policy) -> None:
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
    assert by_agent(policy, before, patched(before, ops)).admitted


def test_release_is_admitted(policy: Policy) -> None:
    before = held()
    ops = protocol.release_patch(REQUEST, LAST_APPLIED, "101", before["metadata"]["annotations"])
    after = patched(before, ops)
    assert after["metadata"]["annotations"][protocol.DESIRED_DRAIN] == REQUEST
    assert by_agent(policy, before, after).admitted


def test_release_after_a_lost_race_is_admitted(policy: Policy) -> None:
    """The MCC finished the drain it had started before the hold: restoring the request that
    now equals lastAppliedDrain is what lets the MCD go on."""
    before = held()
    before["metadata"]["annotations"][protocol.LAST_APPLIED_DRAIN] = REQUEST
    ops = protocol.release_patch(
        REQUEST, REQUEST, "102", before["metadata"]["annotations"], allow_completed=True
    )
    assert by_agent(policy, before, patched(before, ops)).admitted


def test_rehold_of_a_newer_request_is_admitted(policy: Policy) -> None:
    """The MCD overwrote a hold with a newer request; the agent holds that one."""
    before = held()
    newer = "drain-rendered-worker-77dd01"
    before["metadata"]["annotations"][protocol.DESIRED_DRAIN] = newer
    ops = protocol.hold_patch(
        newer,
        LAST_APPLIED,
        "103",
        [Reason.MANUAL],
        SINCE,
        "operator",
        expires=SINCE + timedelta(minutes=45),
    )
    assert by_agent(policy, before, patched(before, ops)).admitted


def test_cleanup_of_stale_keys_is_admitted(policy: Policy) -> None:
    before = node(**{protocol.HOLD_REASONS: "build-pod", protocol.RELEASED: REQUEST})
    ann = before["metadata"]["annotations"]
    ops = protocol.cleanup_patch(REQUEST, ann, [protocol.HOLD_REASONS, protocol.RELEASED])
    assert by_agent(policy, before, patched(before, ops)).admitted


def test_removing_released_by_with_the_released_marker_is_admitted(policy: Policy) -> None:
    """The agent's cleanup once desiredDrain moved on, and its hold of a newer request: the
    marker goes, ``released-by`` with it."""
    marker = {protocol.RELEASED: REQUEST, protocol.RELEASED_BY: OPERATOR}
    before = node(**{**marker, protocol.DESIRED_DRAIN: "drain-rendered-worker-77dd01"})
    ann = before["metadata"]["annotations"]
    ops = protocol.cleanup_patch(ann[protocol.DESIRED_DRAIN], ann, list(marker))
    assert by_agent(policy, before, patched(before, ops)).admitted
    newer = "drain-rendered-worker-77dd01"
    ops = protocol.hold_patch(
        newer,
        LAST_APPLIED,
        "100",
        [Reason.MANUAL],
        SINCE,
        "operator",
        remove=list(marker),
        expires=SINCE + timedelta(minutes=45),
    )
    assert by_agent(policy, before, patched(before, ops)).admitted


@pytest.mark.parametrize("value", [AGENT, OPERATOR])
def test_an_agent_may_not_write_released_by(policy: Policy, value: str) -> None:
    """Not even its own name: who released is the releaser's record, not the agent's."""
    for start in (node, lambda: node(**{protocol.RELEASED: REQUEST})):
        before, after = _changed(lambda n: _ann(n).update({protocol.RELEASED_BY: value}), start)
        verdict = by_agent(policy, before, after)
        assert verdict.denied == (
            "drain-guard: an agent may remove drain-guard.io/released-by but not write it",
        )


def test_other_users_are_not_affected(policy: Policy) -> None:
    """The MCD, the MCC and admins are outside the policy, whatever they change."""
    before = held()
    after = copy.deepcopy(before)
    after["spec"]["unschedulable"] = True
    after["metadata"]["annotations"][protocol.LAST_APPLIED_DRAIN] = REQUEST
    mcc = "system:serviceaccount:openshift-machine-config-operator:machine-config-controller"
    assert not policy.review(mcc, None, before, after).applies
    assert not policy.review("system:serviceaccount:drain-guard:other", None, before, after).applies
    assert not policy.review("drain-guard", None, before, after).applies


def test_the_agent_account_is_matched_exactly(policy: Policy) -> None:
    """The install's own account and no other (issue 34): a renamed install's policies name
    its renamed account (the renamed-namespace transformer; test_renamed_namespace.py and
    tests/controlplane/test_renamed_confinement.py), and an account of the same name
    elsewhere, or one that only ends like it, is not the agent."""
    user = "system:serviceaccount:drain-guard:drain-guard"
    verdict = policy.review(user, {NODE_NAME_CLAIM: ["worker-1"]}, node(), held())
    assert verdict.applies
    assert "only the Node it runs on" in " ".join(verdict.denied)
    for other in ("platform-drain-guard:drain-guard", "drain-guard:acme-drain-guard"):
        user = f"system:serviceaccount:{other}"
        assert not policy.review(user, {NODE_NAME_CLAIM: ["w"]}, node(), held()).applies


# --- what the agent may not do is denied -----------------------------------------------------


def test_another_node_is_denied(policy: Policy) -> None:
    verdict = by_agent(policy, node(), held(), on="worker-1")
    assert "only the Node it runs on" in " ".join(verdict.denied)


def test_a_token_without_the_node_claim_is_denied(policy: Policy) -> None:
    verdict = by_agent(policy, node(), held(), on=None)
    assert "no node-name claim" in " ".join(verdict.denied)


def _changed(change: Callable[[Obj], object], start: Callable[[], Obj] = node) -> tuple[Obj, Obj]:
    before = start()
    after = copy.deepcopy(before)
    change(after)
    return before, after


def _ann(obj: Obj) -> dict[str, str]:
    annotations: dict[str, str] = obj["metadata"]["annotations"]
    return annotations


DENIED_CHANGES: dict[str, Callable[[Obj], object]] = {
    "cordon": lambda n: n["spec"].update(unschedulable=True),
    "taint": lambda n: n["spec"].update(taints=[{"key": "k", "effect": "NoSchedule"}]),
    "label": lambda n: n["metadata"]["labels"].update(role="x"),
    "remove labels": lambda n: n["metadata"].pop("labels"),
    "finalizer": lambda n: n["metadata"].update(finalizers=["x/y"]),
    "owner": lambda n: n["metadata"].update(ownerReferences=[{"kind": "X", "name": "y"}]),
    "lastAppliedDrain": lambda n: _ann(n).update({protocol.LAST_APPLIED_DRAIN: REQUEST}),
    "desiredConfig": lambda n: _ann(n).update({protocol.DESIRED_CONFIG: "rendered-other"}),
    "remove currentConfig": lambda n: _ann(n).pop(protocol.CURRENT_CONFIG),
    "new annotation": lambda n: _ann(n).update({"example.com/x": "1"}),
    "rewrite request": lambda n: _ann(n).update({protocol.DESIRED_DRAIN: "drain-other"}),
    "drop request": lambda n: _ann(n).pop(protocol.DESIRED_DRAIN),
    "fake applied": lambda n: _ann(n).update({protocol.DESIRED_DRAIN: LAST_APPLIED}),
    "hold twice": lambda n: _ann(n).update({protocol.DESIRED_DRAIN: "hold-hold-" + REQUEST}),
}


@pytest.mark.parametrize("change", DENIED_CHANGES)
def test_change_is_denied(policy: Policy, change: str) -> None:
    before, after = _changed(DENIED_CHANGES[change])
    verdict = by_agent(policy, before, after)
    assert verdict.applies
    assert not verdict.admitted


def test_holding_an_uncordon_is_denied(policy: Policy) -> None:
    before = node(**{protocol.DESIRED_DRAIN: "uncordon-rendered-worker-5620aa"})
    after = copy.deepcopy(before)
    _ann(after)[protocol.DESIRED_DRAIN] = "hold-uncordon-rendered-worker-5620aa"
    assert not by_agent(policy, before, after).admitted


def test_holding_an_applied_request_is_denied(policy: Policy) -> None:
    before = node(**{protocol.LAST_APPLIED_DRAIN: REQUEST})
    after = copy.deepcopy(before)
    _ann(after)[protocol.DESIRED_DRAIN] = "hold-" + REQUEST
    verdict = by_agent(policy, before, after)
    assert "equal to lastAppliedDrain may not be held" in " ".join(verdict.denied)


def test_unwrapping_into_something_else_is_denied(policy: Policy) -> None:
    before = held()
    after = copy.deepcopy(before)
    _ann(after)[protocol.DESIRED_DRAIN] = "uncordon-rendered-worker-5620aa"
    assert not by_agent(policy, before, after).admitted


def test_a_long_drain_guard_value_is_denied(policy: Policy) -> None:
    before, after = _changed(lambda n: _ann(n).update({protocol.HOLD_DETAIL: "x" * 1025}))
    assert "longer than 1024" in " ".join(by_agent(policy, before, after).denied)
    _ann(after)[protocol.HOLD_DETAIL] = "x" * 1024
    assert by_agent(policy, before, after).admitted
    # Bytes, not characters, as the agent cuts its texts and the Python checkers count.
    _ann(after)[protocol.HOLD_DETAIL] = "é" * 513
    assert "longer than 1024 bytes" in " ".join(by_agent(policy, before, after).denied)


def test_a_hold_without_its_record_is_denied(policy: Policy) -> None:
    before = node()
    after = copy.deepcopy(before)
    _ann(after)[protocol.DESIRED_DRAIN] = "hold-" + REQUEST
    verdict = by_agent(policy, before, after)
    assert "must record the held request" in " ".join(verdict.denied)
    _ann(after)[protocol.HELD_DRAIN] = REQUEST
    assert by_agent(policy, before, after).admitted


def test_the_longest_detail_the_agent_writes_is_admitted(policy: Policy) -> None:
    before = node()
    ops = protocol.hold_patch(
        REQUEST,
        LAST_APPLIED,
        "100",
        [Reason.BUILD_POD],
        SINCE,
        "é" * 5000,
        expires=SINCE + timedelta(minutes=45),
    )
    assert by_agent(policy, before, patched(before, ops)).admitted


def test_the_policy_lists_the_keys_the_agent_writes(
    rendered: Callable[[str], list[Obj]],
) -> None:
    """The policy's list is the protocol's (the hold record and the released marker), as the
    4.15 webhook and the node proxy have it."""
    spec = one(rendered("kubernetes"), "ValidatingAdmissionPolicy", NODE_POLICY)["spec"]
    (listed,) = [v for v in spec["variables"] if v["name"] == "agentKeys"]
    keys = {k.strip(" '") for k in listed["expression"].strip("[]").split(",")}
    assert keys == {*protocol.OWNED_KEYS, *protocol.RELEASED_KEYS}


def test_an_operators_drain_guard_keys_never_stop_a_hold(policy: Policy) -> None:
    """No count of drain-guard.io/ keys: with the operator's hold request, a released marker
    and keys of the operator's own beside them, the agent's hold (its five keys) is admitted
    (a limit of 8 refused it: issue 34)."""
    marker = {protocol.RELEASED: "drain-old", protocol.RELEASED_BY: OPERATOR}
    own = {f"{protocol.DG_PREFIX}note-{i}": "operator's" for i in range(4)}
    before = node(**marker, **own, **{protocol.HOLD_REQUEST: "2099-01-01T00:00:00Z;x"})
    ops = protocol.hold_patch(
        REQUEST,
        LAST_APPLIED,
        "100",
        [Reason.BUILD_POD],
        SINCE,
        "build pod openshift-mco/b-build",
        expires=SINCE + timedelta(minutes=45),
    )
    after = patched(before, ops)
    assert sum(k.startswith(protocol.DG_PREFIX) for k in _ann(after)) == 12
    assert by_agent(policy, before, after).admitted


# --- budgets (the shield) -------------------------------------------------------------------

BUILD_POD_LABELS = {
    "openshift.io/build.name": "build-rendered-worker-5620aa",
    "openshift.io/build.start-policy": "Serial",
}


def budget(node_name: str = NODE, **changes: Any) -> Obj:
    """The budget the shield itself makes for a build pod (``drain_guard.shield.loop``)."""
    pod = Pod.from_dict(
        {
            "metadata": {
                "name": "build-rendered-worker-5620aa-build",
                "namespace": "openshift-machine-config-operator",
                "uid": "0a1b2c",
                "labels": BUILD_POD_LABELS,
            },
            "spec": {"nodeName": node_name},
            "status": {"phase": "Running"},
        }
    )
    manifest: Obj = Want(pod, Role.BUILD_POD, budget_name(pod.name, pod.uid)).manifest()
    for path, value in changes.items():
        target = manifest
        *parents, leaf = path.split("__")
        for part in parents:
            target = target[part]
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return manifest


def create(policy: Policy, obj: Obj, on: str | None = NODE) -> Verdict:
    extra = None if on is None else {NODE_NAME_CLAIM: [on]}
    return policy.review(AGENT, extra, None, obj, operation="CREATE")


def delete(policy: Policy, obj: Obj, on: str | None = NODE) -> Verdict:
    extra = None if on is None else {NODE_NAME_CLAIM: [on]}
    return policy.review(AGENT, extra, obj, None, operation="DELETE")


def test_the_shields_budget_is_admitted(budgets: Policy) -> None:
    verdict = create(budgets, budget())
    assert verdict.applies
    assert verdict.admitted, verdict.denied
    assert delete(budgets, budget()).admitted


@pytest.mark.parametrize(
    "labels",
    [
        {"machineconfiguration.openshift.io/buildPod": "", "a": "b"},
        {"machineconfiguration.openshift.io/on-cluster-layering": ""},
        {"batch.kubernetes.io/job-name": "build-layered-abc", "job-name": "build-layered-abc"},
    ],
)
def test_every_default_build_pod_form_is_admitted(budgets: Policy, labels: dict[str, str]) -> None:
    obj = budget(spec__selector={"matchLabels": labels})
    assert create(budgets, obj).admitted


DENIED_BUDGETS: dict[str, dict[str, Any]] = {
    "another node's": {"metadata__labels__drain-guard.io/node": "worker-1"},
    "unlabelled": {"metadata__labels": None},
    "not managed by drain-guard": {"metadata__labels__app.kubernetes.io/managed-by": "x"},
    "no owner": {"metadata__ownerReferences": None},
    "two owners": {
        "metadata__ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "a", "uid": "1"},
            {"apiVersion": "v1", "kind": "Pod", "name": "b", "uid": "2"},
        ]
    },
    "owned by a Deployment": {
        "metadata__ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a", "uid": "1"}
        ]
    },
    "controller owner": {
        "metadata__ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "a", "uid": "1", "controller": True}
        ]
    },
    "minAvailable 0": {"spec__minAvailable": 0},
    "minAvailable 100%": {"spec__minAvailable": "100%"},
    "maxUnavailable": {"spec__minAvailable": None, "spec__maxUnavailable": 0},
    "MCO's controller": {
        "spec__selector": {"matchLabels": {"k8s-app": "machine-config-controller"}}
    },
    "machine-os-builder": {"spec__selector": {"matchLabels": {"k8s-app": "machine-os-builder"}}},
    "k8s-app with a build key": {
        "spec__selector": {
            "matchLabels": {"k8s-app": "machine-config-controller", **BUILD_POD_LABELS}
        }
    },
    "a job not a build": {"spec__selector": {"matchLabels": {"batch.kubernetes.io/job-name": "x"}}},
    "matchExpressions": {
        "spec__selector": {
            "matchLabels": BUILD_POD_LABELS,
            "matchExpressions": [{"key": "k8s-app", "operator": "Exists"}],
        }
    },
    "no selector": {"spec__selector": None},
}


@pytest.mark.parametrize("change", DENIED_BUDGETS)
def test_budget_is_denied(budgets: Policy, change: str) -> None:
    verdict = create(budgets, budget(**DENIED_BUDGETS[change]))
    assert verdict.applies
    # Denied by the one rule about it, not by an evaluation error elsewhere.
    assert len(verdict.denied) == 1, verdict.denied


def test_another_nodes_budget_may_not_be_deleted(budgets: Policy) -> None:
    verdict = delete(budgets, budget("worker-1"))
    assert "only its own node's budgets" in " ".join(verdict.denied)
    stranger = budget(metadata__labels={"app": "x"})
    assert not delete(budgets, stranger).admitted


def test_a_budget_is_never_changed(budgets: Policy) -> None:
    before = budget()
    after = budget(spec__minAvailable=0)
    verdict = budgets.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, before, after)
    assert "never changes a budget" in " ".join(verdict.denied)


def test_budgets_without_the_node_claim_are_denied(budgets: Policy) -> None:
    assert "no node-name claim" in " ".join(create(budgets, budget(), on=None).denied)
    assert not delete(budgets, budget(), on=None).admitted


# --- events ---------------------------------------------------------------------------------


class _Core:
    """Stands in for kubernetes_asyncio's CoreV1Api: keeps the Event bodies the recorder sends."""

    def __init__(self) -> None:
        self.bodies: list[Obj] = []

    async def create_namespaced_event(self, namespace: str, body: Obj, **_: Any) -> Any:
        self.bodies.append(body)
        return _Created()

    async def patch_namespaced_event(self, *_: Any, **__: Any) -> Any:
        return _Created()


class _Created:
    status = 201

    async def __aenter__(self) -> _Created:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def text(self) -> str:
        return ""


def recorded_event(node_name: str = NODE, pool: str | None = None) -> Obj:
    """An Event body exactly as ``drain_guard.node.events.EventRecorder`` writes it: about the
    Node, or (``pool``) the pool's ``PoolRolloutHeld`` related to the Node."""
    core = _Core()

    async def emit() -> None:
        async with ApiClient() as api:
            kube = Kube(api)
            # A stand-in CoreV1Api that records the body instead of sending it.
            kube.core = core  # type: ignore[assignment]
            # No pool read (the uid is not what admission looks at).
            recorder = EventRecorder(kube, node_name, node_uid="a-uid", pool_uids=False)
            if pool is None:
                await recorder.emit("DrainHeld", "Holding drain request")
            else:
                await recorder.pool_held(pool, REQUEST, ["build-pod"], "build-pod: x", SINCE, SINCE)

    asyncio.run(emit())
    (body,) = core.bodies
    return body


def test_the_agents_event_is_admitted(events: Policy) -> None:
    body = recorded_event()
    verdict = create(events, body)
    assert verdict.applies
    assert verdict.admitted, verdict.denied
    bumped = copy.deepcopy(body) | {"count": 2, "message": "again"}
    assert events.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, body, bumped).admitted


def test_events_about_anything_else_are_denied(events: Policy) -> None:
    other = recorded_event("worker-1")
    assert "its own Node only" in " ".join(create(events, other).denied)
    pod = recorded_event() | {
        "involvedObject": {"kind": "Pod", "namespace": "x", "name": NODE, "apiVersion": "v1"}
    }
    assert not create(events, pod).admitted
    bumped = copy.deepcopy(other) | {"count": 2}
    assert not events.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, other, bumped).admitted
    assert not create(events, recorded_event(), on=None).admitted
    assert not delete(events, recorded_event()).admitted
    spoofed = recorded_event() | {"source": {"component": "kubelet", "host": "worker-1"}}
    assert not create(events, spoofed).admitted
    # Item 7 of issue 21: an UPDATE is judged on the old Event too, and the component pinned.
    mine = recorded_event()
    verdict = events.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, other, mine)
    assert "update only its own Events" in " ".join(verdict.denied)
    kubelets = recorded_event() | {"reportingComponent": "kubelet"}
    verdict = events.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, kubelets, mine)
    assert "update only its own Events" in " ".join(verdict.denied)
    posing = recorded_event() | {"reportingComponent": "machineconfigdaemon"}
    assert "reporting component" in " ".join(create(events, posing).denied)
    spoofed = recorded_event() | {"source": {"component": "kubelet", "host": NODE}}
    assert "reporting component" in " ".join(create(events, spoofed).denied)


def test_the_agents_pool_event_is_admitted(events: Policy) -> None:
    body = recorded_event(pool="worker")
    assert body["involvedObject"]["kind"] == "MachineConfigPool"
    verdict = create(events, body)
    assert verdict.applies
    assert verdict.admitted, verdict.denied
    bumped = copy.deepcopy(body) | {"count": 2, "message": "again"}
    assert events.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, body, bumped).admitted
    # Any pool (CEL cannot read which is the node's): infra's too.
    assert create(events, recorded_event(pool="infra")).admitted


def forged_pool_events() -> dict[str, Obj]:
    """What a compromised agent of NODE could try with the pool right; every confinement
    (this policy, the webhook, the node proxy) refuses each."""
    mine = recorded_event(pool="worker")
    another_nodes = recorded_event("worker-1", pool="worker")
    return {
        "another node as related": mine | {"related": another_nodes["related"]},
        "another node's whole Event": another_nodes,
        "no related object": {k: v for k, v in mine.items() if k != "related"},
        "a Pod as related": mine | {"related": mine["related"] | {"kind": "Pod"}},
        "another reason": mine | {"reason": "DrainHeld"},
        "MCO's reason": mine | {"reason": "SetDesiredConfig"},
        "another instance": mine | {"reportingInstance": "drain-guard-worker-1"},
        "another source host": mine | {"source": {"component": "drain-guard", "host": "worker-1"}},
        "as MCO": mine | {"reportingComponent": "machineconfigcontroller"},
        "another API of the kind": mine
        | {"involvedObject": mine["involvedObject"] | {"apiVersion": "v1"}},
        "a namespaced pool": mine
        | {"involvedObject": mine["involvedObject"] | {"namespace": "default"}},
        "a message over 1 KiB": mine | {"message": "x" * 1025},
        # 600 characters, 1200 bytes: every checker counts bytes, as the recorder cuts them.
        "a message over 1 KiB in two-byte characters": mine | {"message": "é" * 600},
    }


def test_forged_pool_events_are_denied(events: Policy) -> None:
    mine = recorded_event(pool="worker")
    another_nodes = recorded_event("worker-1", pool="worker")
    forged = forged_pool_events()
    admitted = [name for name, body in forged.items() if create(events, body).admitted]
    assert admitted == []
    assert "PoolRolloutHeld or PoolRolloutReleased" in " ".join(
        create(events, forged["another node as related"]).denied
    )
    # Another kind of object stays refused as before.
    machineconfig = mine | {"involvedObject": {"kind": "MachineConfig", "name": "x"}}
    assert "its own Node only" in " ".join(create(events, machineconfig).denied)
    # An UPDATE of another node's pool Event, or of a Node Event into a pool Event.
    verdict = events.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, another_nodes, mine)
    assert "update only its own Events" in " ".join(verdict.denied)
    other_node = recorded_event("worker-1")
    assert not events.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, other_node, mine).admitted


# --- properties ---------------------------------------------------------------------------

_key_part = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=12)
_value = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", max_size=20)
_foreign_key = st.builds(lambda a, b: f"{a}/{b}", _key_part, _key_part).filter(
    lambda k: not k.startswith(protocol.DG_PREFIX) and k != protocol.DESIRED_DRAIN
)


@settings(max_examples=40, deadline=None)
@given(key=_foreign_key, value=_value)
def test_any_foreign_annotation_riding_on_a_hold_is_denied(
    policy: Policy, key: str, value: str
) -> None:
    before = node()
    after = held()
    if _ann(after).get(key) == value:
        return
    _ann(after)[key] = value
    assert not by_agent(policy, before, after).admitted


@settings(max_examples=40, deadline=None)
@given(name=_key_part, value=_value, remove=st.booleans())
def test_only_the_agents_own_drain_guard_keys_are_allowed(
    policy: Policy, name: str, value: str, remove: bool
) -> None:
    """The hold record and the released marker (written, changed or removed; released-by only
    removed): any other drain-guard.io/ key, an operator's, is not the agent's to touch."""
    before = _with_request(held(), "2099-01-01T00:00:00Z;x")
    _ann(before)[protocol.DG_PREFIX + name] = "operator's"
    _ann(before)[protocol.RELEASED_BY] = OPERATOR
    after = copy.deepcopy(before)
    key = protocol.DG_PREFIX + name
    if remove:
        _ann(after).pop(key, None)
    else:
        _ann(after)[key] = value
    mine = key in {*protocol.OWNED_KEYS, *protocol.RELEASED_KEYS}
    admitted = (mine and (remove or key != protocol.RELEASED_BY)) or after == before
    assert by_agent(policy, before, after).admitted == admitted


def _with_request(obj: Obj, request: str) -> Obj:
    _ann(obj)[protocol.HOLD_REQUEST] = request
    return obj


@pytest.mark.parametrize("change", ["add", "change", "remove"])
def test_the_agent_may_not_write_the_hold_request(policy: Policy, change: str) -> None:
    """The operator's request (``drain-guard hold``), as the webhook has it: the agent reads
    it and never writes it, so its account may not, not even riding on a hold."""
    request = "2099-01-01T00:00:00Z;maintenance"
    before = held() if change == "add" else _with_request(held(), request)
    after = copy.deepcopy(before)
    if change == "remove":
        _ann(after).pop(protocol.HOLD_REQUEST)
    else:
        _ann(after)[protocol.HOLD_REQUEST] = "2099-06-01T00:00:00Z;longer"
    verdict = by_agent(policy, before, after)
    assert verdict.applies
    assert "not the operator's hold-request" in " ".join(verdict.denied)
    # Left as it is, it does not stand in the way of a release.
    release = _with_request(held(), request)
    released = copy.deepcopy(release)
    _ann(released)[protocol.DESIRED_DRAIN] = REQUEST
    for key in protocol.OWNED_KEYS:
        _ann(released).pop(key, None)
    assert by_agent(policy, release, released).admitted


# --- the hold request's format (issue 25) ---------------------------------------------------

HOLD_REQUEST_POLICY = "drain-guard-hold-request-format"


@pytest.fixture(scope="module")
def hold_requests(rendered: Callable[[str], list[Obj]]) -> Policy:
    return Policy(one(rendered("kubernetes"), "ValidatingAdmissionPolicy", HOLD_REQUEST_POLICY))


def _requested(value: str, old: Obj | None = None) -> Obj:
    new = copy.deepcopy(old or node())
    new["metadata"]["annotations"][protocol.HOLD_REQUEST] = value
    return new


@given(
    until=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2999, 1, 1), timezones=st.just(UTC)
    ),
    reason=st.text(
        st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\x85"),
        min_size=1,
        max_size=40,
    ).filter(lambda r: r.strip()),
)
@settings(max_examples=30, deadline=None)
def test_a_hold_request_written_by_drain_guard_hold_is_admitted(
    hold_requests: Policy, until: datetime, reason: str
) -> None:
    value = guards.format_hold_request(until.replace(microsecond=0), reason)
    verdict = hold_requests.review(OPERATOR, None, node(), _requested(value))
    assert verdict.applies
    assert verdict.admitted, verdict.denied


@pytest.mark.parametrize(
    "value",
    [
        "30m;db failover",
        "tomorrow",
        "2026-03-01 14:00:00Z;space instead of T",
        "2026-03-01T14:00:00;no zone",
        "2026-03-01T14:00Z;no seconds",
        "",
    ],
)
def test_a_malformed_hold_request_is_refused_when_written(
    hold_requests: Policy, value: str
) -> None:
    verdict = hold_requests.review(OPERATOR, None, node(), _requested(value))
    assert verdict.denied
    assert "drain-guard hold --node-name NODE" in verdict.denied[0]
    # The agent itself would ignore it: the policy refuses nothing the agent accepts.
    with pytest.raises(ValueError, match="RFC 3339"):
        guards.parse_hold_request(value)


def test_writes_that_leave_the_hold_request_alone_are_not_checked(hold_requests: Policy) -> None:
    """A malformed value already there (written before the policy) never blocks other writes
    (the kubelet's, MCO's, the agent's hold)."""
    old = _requested("30m;written before the policy")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][protocol.DESIRED_DRAIN] = REQUEST
    assert not hold_requests.review(OPERATOR, None, old, new).applies
    assert not hold_requests.review(OPERATOR, None, node(), node()).applies
    assert hold_requests.review(OPERATOR, None, None, old, operation="CREATE").denied


# --- who released a hold (issue 25) ---------------------------------------------------------

RELEASED_BY_POLICY = "drain-guard-released-by"


@pytest.fixture(scope="module")
def released_by(rendered: Callable[[str], list[Obj]]) -> Policy:
    return Policy(one(rendered("kubernetes"), "ValidatingAdmissionPolicy", RELEASED_BY_POLICY))


def _released(by: str) -> tuple[Obj, Obj]:
    """The Node before and after ``drain-guard release`` by ``by`` (the patch it sends)."""
    before = held()
    release = decide.force_release(_ann(before), "100", protocol.Outcome.MANUAL, released_by=by)
    return before, patched(before, list(release.patch))


@pytest.mark.parametrize("user", [OPERATOR, "system:serviceaccount:ops:releaser", "é" * 200])
def test_a_release_in_the_writers_own_name_is_admitted(released_by: Policy, user: str) -> None:
    before, after = _released(user)
    assert _ann(after)[protocol.RELEASED_BY] == user
    verdict = released_by.review(user, None, before, after)
    assert verdict.applies
    assert verdict.admitted, verdict.denied


def test_a_release_in_anothers_name_is_refused(released_by: Policy) -> None:
    before, after = _released("alice")
    for writer in ("bob", "alice ", "Alice", AGENT):
        verdict = released_by.review(writer, None, before, after)
        assert verdict.denied == (
            "drain-guard.io/released-by must be the writer's own user name"
            " (drain-guard release writes it)",
        ), writer
    created = copy.deepcopy(after)
    assert released_by.review("bob", None, None, created, operation="CREATE").denied


def test_released_by_left_as_it_is_or_removed_is_not_checked(released_by: Policy) -> None:
    """The kubelet's and MCO's writes, and the agent's removal, never meet this policy."""
    _, after = _released("alice")
    kept = copy.deepcopy(after)
    _ann(kept)[protocol.DESIRED_DRAIN] = "drain-rendered-worker-77dd01"
    kubelet = "system:node:worker-0"
    assert not released_by.review(kubelet, None, after, kept).applies
    ann = _ann(kept)
    ops = protocol.cleanup_patch(ann[protocol.DESIRED_DRAIN], ann, list(protocol.RELEASED_KEYS))
    removed = patched(kept, ops)
    assert protocol.RELEASED_BY not in _ann(removed)
    assert not released_by.review(AGENT, {NODE_NAME_CLAIM: [NODE]}, kept, removed).applies
