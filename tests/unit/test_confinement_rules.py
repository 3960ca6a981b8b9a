"""The confinement predicates (drain_guard.confine.rules) and the two Python checkers that ask
them: the 4.15 webhook (confine.admission, on the Node before and after) and the systemd node
proxy (confine.nodeaccess, on the agent's JSON Patch) answer as the predicates do over many
generated writes (tests/confinement.py); tests/controlplane/test_confinement_agreement.py
adds the CEL policy on a real API server over the same cases."""

from __future__ import annotations

import pytest

from drain_guard import protocol
from drain_guard.confine import admission, nodeaccess, rules
from tests.confinement import NodeWrite, node_writes

NODE = "worker-0"


def _webhook(case: NodeWrite) -> bool:
    old, new = case.objects(NODE)
    request = {"operation": "UPDATE", "name": NODE, "object": new, "oldObject": old}
    return admission.review_node(request, NODE).allowed


def _node_proxy(case: NodeWrite) -> bool:
    try:
        nodeaccess.check_node_patch(case.patch())
    except protocol.ProtocolError:
        return False
    return True


@pytest.mark.parametrize("seed", range(4))
def test_the_webhook_and_the_node_proxy_answer_as_the_predicates(seed: int) -> None:
    cases = node_writes(seed, 500)
    answers = [
        (rules.annotations_problem(c.before, c.after) is None, _webhook(c), _node_proxy(c))
        for c in cases
    ]
    differ = [(a, c) for a, c in zip(answers, cases, strict=True) if len(set(a)) != 1]
    assert not differ, differ[:3]
    allowed = sum(a[0] for a in answers)
    assert 50 <= allowed <= 450, allowed


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        (protocol.HOLD_DETAIL, "x" * 1024, None),
        (protocol.HOLD_DETAIL, "é" * 512, None),
        (protocol.HOLD_DETAIL, "é" * 513, "longer than 1024 bytes"),
        (protocol.HOLD_DETAIL, None, None),
        (protocol.RELEASED_BY, None, None),
        (protocol.RELEASED_BY, "admin", "remove drain-guard.io/released-by but not write it"),
        (protocol.HOLD_REQUEST, "2099-01-01T00:00:00Z;x", "may not change the annotation"),
        (protocol.DG_PREFIX + "other", "v", "may not change the annotation"),
        (protocol.LAST_APPLIED_DRAIN, "drain-a", "may not change the annotation"),
    ],
)
def test_which_keys_an_agent_may_write(key: str, value: str | None, problem: str | None) -> None:
    found = rules.key_problem(key, value)
    assert (found is None) == (problem is None), found
    if problem is not None:
        assert found is not None
        assert problem in found


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        ("drain-a", "drain-a", True),
        ("drain-a", "hold-drain-a", True),
        ("hold-drain-a", "drain-a", True),
        ("", "", True),
        ("drain-a", "hold-drain-b", False),
        ("uncordon-a", "hold-uncordon-a", False),
        ("hold-drain-a", "uncordon-a", False),
        ("drain-a", "", False),
        ("", "drain-a", False),
    ],
)
def test_the_steps_of_desired_drain(old: str, new: str, allowed: bool) -> None:
    assert (rules.drain_step_problem(old, new) is None) is allowed


def test_a_hold_is_never_of_the_applied_request_and_always_with_its_record() -> None:
    assert rules.hold_problem("drain-a", "hold-drain-a", "uncordon-a", "drain-a") is None
    applied = rules.hold_problem("drain-a", "hold-drain-a", "drain-a", "drain-a")
    assert applied is not None
    assert "lastAppliedDrain" in applied
    unrecorded = rules.hold_problem("drain-a", "hold-drain-a", "", None)
    assert unrecorded is not None
    assert protocol.HELD_DRAIN in unrecorded
    # A release is no hold: the record goes with it.
    assert rules.hold_problem("hold-drain-a", "drain-a", "", None) is None
