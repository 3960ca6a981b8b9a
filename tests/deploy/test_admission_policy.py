"""The ValidatingAdmissionPolicy, evaluated with a CEL interpreter (cel-python).

The policy's own expressions, as rendered, run against admission requests built from the
agent's real patches (``drain_guard.protocol`` applied with ``jsonpatch``) and from the writes a
compromised or buggy agent could try. cel-python implements standard CEL; the policy uses
only standard CEL (``has``, ``in``, ``all``, ``startsWith``, ``+``, the conditional), not the
Kubernetes CEL libraries, so the interpreter sees what the API server would. Evaluation
follows the API server: no matching condition means the policy does not apply; variables
are evaluated in order; every validation must yield true, and an evaluation error denies
(``failurePolicy: Fail``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import celpy
import jsonpatch
import pytest
from celpy.adapter import json_to_cel
from celpy.celtypes import BoolType, MapType, StringType
from celpy.evaluation import CELEvalError
from hypothesis import given, settings
from hypothesis import strategies as st

from drain_guard import protocol
from drain_guard.protocol import Reason
from tests.deploy.tools import WITH_ADMISSION_POLICY, Obj, one

AGENT = "system:serviceaccount:drain-guard:drain-guard"
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
NODE = "worker-0"
REQUEST = "drain-rendered-worker-5620aa"
LAST_APPLIED = "uncordon-rendered-worker-11b0cc"
SINCE = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Verdict:
    applies: bool
    denied: tuple[str, ...]  # messages of the failed validations

    @property
    def admitted(self) -> bool:
        return not self.denied


class Policy:
    """A ValidatingAdmissionPolicy's CEL, compiled once, evaluated like the API server."""

    def __init__(self, policy: Obj) -> None:
        self.env = celpy.Environment()
        spec = policy["spec"]
        self.conditions = [self._compile(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec["variables"]]
        self.validations = [
            (self._compile(v["expression"]), v["message"]) for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> celpy.Runner:
        return self.env.program(self.env.compile(expression))

    @staticmethod
    def _true(program: celpy.Runner, activation: dict[str, Any]) -> bool:
        try:
            result = program.evaluate(activation)
        except CELEvalError:
            return False
        return isinstance(result, BoolType) and bool(result)

    def review(
        self, username: str, extra: Mapping[str, list[str]] | None, old: Obj, new: Obj
    ) -> Verdict:
        user: dict[str, Any] = {"username": username}
        if extra is not None:
            user["extra"] = dict(extra)
        activation: dict[str, Any] = {
            "request": json_to_cel({"operation": "UPDATE", "userInfo": user}),
            "object": json_to_cel(new),
            "oldObject": json_to_cel(old),
        }
        if not all(self._true(c, activation) for c in self.conditions):
            return Verdict(applies=False, denied=())
        variables = MapType({})
        for name, program in self.variables:
            activation["variables"] = variables
            variables = MapType({**variables, StringType(name): program.evaluate(activation)})
        activation["variables"] = variables
        denied = tuple(
            msg for program, msg in self.validations if not self._true(program, activation)
        )
        return Verdict(applies=True, denied=denied)


@pytest.fixture(scope="module")
def policy(rendered: Callable[[str], list[Obj]]) -> Policy:
    return Policy(one(rendered("kubernetes"), "ValidatingAdmissionPolicy"))


def test_overlays_ship_the_same_policy(rendered: Callable[[str], list[Obj]]) -> None:
    """What is evaluated here (the kubernetes overlay's) is what every overlay with it ships."""
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    for overlay in WITH_ADMISSION_POLICY:
        for kind in kinds:
            assert one(rendered(overlay), kind) == one(rendered("kubernetes"), kind)


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
        REQUEST, LAST_APPLIED, "100", [Reason.BUILD_POD], SINCE, "build pod openshift-mco/b-build"
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
    ops = protocol.update_hold_patch(record, [Reason.BUILD_POD, Reason.NOOP_IMAGE], "more")
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
    ops = protocol.hold_patch(newer, LAST_APPLIED, "103", [Reason.MANUAL], SINCE, "operator")
    assert by_agent(policy, before, patched(before, ops)).admitted


def test_cleanup_of_stale_keys_is_admitted(policy: Policy) -> None:
    before = node(**{protocol.HOLD_REASONS: "build-pod", protocol.RELEASED: REQUEST})
    ann = before["metadata"]["annotations"]
    ops = protocol.cleanup_patch(REQUEST, ann, [protocol.HOLD_REASONS, protocol.RELEASED])
    assert by_agent(policy, before, patched(before, ops)).admitted


def test_other_users_are_not_affected(policy: Policy) -> None:
    """The MCD, the MCC and admins are outside the policy, whatever they change."""
    before = held()
    after = copy.deepcopy(before)
    after["spec"]["unschedulable"] = True
    after["metadata"]["annotations"][protocol.LAST_APPLIED_DRAIN] = REQUEST
    mcc = "system:serviceaccount:openshift-machine-config-operator:machine-config-controller"
    assert not policy.review(mcc, None, before, after).applies
    assert not policy.review("system:serviceaccount:other:drain-guard", None, before, after).applies


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
def test_any_drain_guard_annotation_is_allowed(
    policy: Policy, name: str, value: str, remove: bool
) -> None:
    before = held()
    after = copy.deepcopy(before)
    key = protocol.DG_PREFIX + name
    if remove:
        _ann(after).pop(key, None)
    else:
        _ann(after)[key] = value
    assert by_agent(policy, before, after).admitted
