"""The Event, budget and pod policies as shipped, interpreted (tests/deploy/admission.py), and
the predicates of drain_guard.confine.rules with the checkers that ask them, over generated
cases (tests/confinement_objects.py) from another seed than
tests/controlplane/test_confinement_agreement.py's on the real API server: one answer, case by
case."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from drain_guard.confine import admission, nodeaccess, rules
from drain_guard.confine.rules import EVENT_NAMESPACE
from drain_guard.core.pods import NODE_KEY
from drain_guard.core.selectors import MCO_NAMESPACE
from tests.confinement_objects import budget_writes, event_writes, pod_writes
from tests.deploy.admission import Policy, admitted_pod
from tests.deploy.tools import Obj, one

AGENT = "drain-guard"
USER = f"system:serviceaccount:{AGENT}:{AGENT}"
NODE, OTHER, POOL = "worker-0", "worker-1", "worker"
CLAIM = {"authentication.kubernetes.io/node-name": [NODE]}
#: Another seed than the control plane's, as many cases (the interpreter takes about 0.1 s
#: a pod).
SEED = 1
CASES = 150


def _policy(rendered: Callable[[str], list[Obj]], name: str) -> Policy:
    return Policy(one(rendered("openshift"), "ValidatingAdmissionPolicy", name))


def _balanced(answers: list[bool]) -> None:
    """Both answers come, each often: the cases try the rule, not one side of it."""
    assert len(answers) // 10 <= sum(answers) <= len(answers) - len(answers) // 10, sum(answers)


def test_events(rendered: Callable[[str], list[Obj]]) -> None:
    policy = _policy(rendered, "drain-guard-event-confinement")
    differ, looser, allowed = [], [], []
    for case in event_writes(SEED, CASES, NODE, OTHER, POOL):
        operation = "CREATE" if case.old is None else "UPDATE"
        cel = policy.review(USER, CLAIM, case.old, case.event, operation=operation).admitted
        request = {
            "operation": operation,
            "namespace": EVENT_NAMESPACE,
            "object": case.event,
            "oldObject": case.old,
        }
        answers = {
            "policy": cel,
            "rules": rules.event_problem(case.event, NODE) is None
            and (case.old is None or rules.updated_event_problem(case.old, NODE) is None),
            "webhook": admission.review_event(request, NODE).allowed,
        }
        if len(set(answers.values())) != 1:
            differ.append((answers, case))
        if case.old is None and not cel:
            body = json.dumps(case.event).encode()
            path = f"/api/v1/namespaces/{EVENT_NAMESPACE}/events"
            if nodeaccess.decide("POST", path, (), "application/json", body, NODE, ()).allowed:
                looser.append(case)
        allowed.append(cel)
    assert not differ, differ[:3]
    assert not looser, looser[:3]
    _balanced(allowed)


def test_budgets(rendered: Callable[[str], list[Obj]]) -> None:
    policy = _policy(rendered, "drain-guard-budget-confinement")
    differ, allowed = [], []
    for case in budget_writes(SEED, CASES, NODE, OTHER):
        creating = case.operation == "CREATE"
        old, new = (None, case.budget) if creating else (case.budget, None)
        cel = policy.review(USER, CLAIM, old, new, operation=case.operation).admitted
        metadata = case.budget["metadata"]
        owner = (metadata.get("ownerReferences") or [{}])[0]
        pod: Any = {
            "metadata": {
                "uid": owner.get("uid"),
                "labels": case.budget["spec"]["selector"].get("matchLabels") or {},
            },
            "spec": {"nodeName": metadata["labels"].get(NODE_KEY, NODE)},
        }
        key = "object" if creating else "oldObject"
        request = {"operation": case.operation, "namespace": MCO_NAMESPACE, key: case.budget}
        pods = {admission.PodKey(MCO_NAMESPACE, str(owner.get("name"))): pod}
        answers = {
            "policy": cel,
            "rules": rules.budget_problem(case.operation, case.budget, NODE) is None,
            "webhook": admission.review_budget(request, pods, NODE).allowed,
        }
        if len(set(answers.values())) != 1:
            differ.append((answers, case))
        allowed.append(cel)
    assert not differ, differ[:3]
    _balanced(allowed)


def test_pods(rendered: Callable[[str], list[Obj]]) -> None:
    objects = rendered("openshift")
    policy = Policy(one(objects, "ValidatingAdmissionPolicy", "drain-guard-pod-confinement"))
    differ, allowed = [], []
    for case in pod_writes(SEED, CASES, AGENT, admitted_pod(objects)["spec"]):
        cel = policy.review("kube:admin", None, None, case.pod, operation="CREATE").admitted
        request = {"namespace": AGENT, "object": case.pod}
        answers = {
            "policy": cel,
            "rules": rules.agent_pod_problem(case.pod) is None,
            "webhook": admission.review_pod(request, f"{AGENT}:{AGENT}").allowed,
        }
        if len(set(answers.values())) != 1:
            differ.append((answers, case))
        allowed.append(cel)
    assert not differ, differ[:3]
    _balanced(allowed)
