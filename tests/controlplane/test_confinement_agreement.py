"""One confinement rule, three checkers, one answer: the CEL policies as the real
kube-apiserver evaluates them, and the Python predicates (drain_guard.confine.rules) as the 4.15
webhook (confine.admission) and the systemd node proxy (confine.nodeaccess) ask them, over the
same generated writes, case by case: an agent's writes on its own Node (tests/confinement.py),
its Events, its budgets and pods that run as its account (tests/confinement_objects.py).

The ``openshift`` overlay is installed as test_rights installs it (a real token bound to the
agent's pod on its Node); each case's before-state is written by the administrator, then the
agent sends the case's JSON Patch as a dry run: the policies run on a dry run, nothing is
stored.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

import pytest
from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard.confine import admission, nodeaccess, rules
from drain_guard.confine.nodeaccess import MERGE_PATCH
from drain_guard.confine.rights import ALLOWED
from drain_guard.confine.rules import EVENT_NAMESPACE
from drain_guard.core.pods import NODE_KEY
from drain_guard.core.selectors import MCO_NAMESPACE as MCO_NS
from tests.confinement import KEYS, NodeWrite, node_writes
from tests.confinement_objects import (
    BudgetWrite,
    EventWrite,
    budget_writes,
    event_writes,
    pod_writes,
)
from tests.controlplane.test_rights import (  # noqa: F401 (installed: the fixture)
    Installed,
    answer,
    installed,
    user_name,
)

pytestmark = pytest.mark.controlplane

#: The agents' namespace and service account, as the overlays ship them.
AGENT = "drain-guard"

SEED = 33
CASES = 150


async def _write_before(setup: Installed, case: NodeWrite) -> None:
    """The case's before-state on the Node, as the administrator writes it: every key of the
    cases set or cleared, the others (the pool's config, the controllers') left as they are."""
    core = client.CoreV1Api(setup.admin)
    current = (await core.read_node(setup.node)).metadata.annotations or {}
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": protocol.annotation_path(key), "value": case.before[key]}
        for key in sorted(case.before)
    ]
    ops += [
        {"op": "remove", "path": protocol.annotation_path(key)}
        for key in KEYS
        if key in current and key not in case.before
    ]
    await core.patch_node(setup.node, ops)


async def _by_api_server(setup: Installed, case: NodeWrite) -> bool:
    """Whether the API server admits the agent's patch (a dry run); anything but an answer
    of admission fails the test."""
    call = client.CoreV1Api(setup.agent).patch_node(setup.node, case.patch(), dry_run="All")
    said = await answer(call)
    assert said == ALLOWED or said.startswith("denied: "), (said, case)
    return said == ALLOWED


def _by_webhook(case: NodeWrite, node: str) -> bool:
    old, new = case.objects(node)
    request = {"operation": "UPDATE", "name": node, "object": new, "oldObject": old}
    return admission.review_node(request, node).allowed


def _by_node_proxy(case: NodeWrite) -> bool:
    try:
        nodeaccess.check_node_patch(case.patch())
    except protocol.ProtocolError:
        return False
    return True


@pytest.mark.parametrize("installed", ["openshift"], indirect=True)
async def test_the_policy_and_the_python_checkers_agree_case_by_case(
    installed: Installed,  # noqa: F811 (the fixture imported above)
) -> None:
    setup = installed
    cases = node_writes(SEED, CASES, released_by=await user_name(setup.admin))
    disagreements = []
    allowed = 0
    for case in cases:
        await _write_before(setup, case)
        cel = await _by_api_server(setup, case)
        predicates = rules.annotations_problem(case.before, case.after) is None
        answers = {
            "policy": cel,
            "rules": predicates,
            "webhook": _by_webhook(case, setup.node),
            "node proxy": _by_node_proxy(case),
        }
        if len(set(answers.values())) != 1:
            disagreements.append((answers, case))
        allowed += cel
    assert not disagreements, disagreements[:5]
    # Both answers come, each often: the cases try the rule, not one side of it.
    assert CASES // 10 <= allowed <= CASES - CASES // 10, allowed


# --- Events, budgets and the agent's pod ----------------------------------------------------


async def _event_by_api_server(setup: Installed, case: EventWrite) -> bool:
    """Whether the API server admits the agent's Event (a dry run); an update's old Event is
    written by the administrator first, as the recorder would have."""
    agent: Any = client.CoreV1Api(setup.agent)  # bodies are plain JSON
    call: Awaitable[Any]
    if case.old is None:
        call = agent.create_namespaced_event(EVENT_NAMESPACE, case.event, dry_run="All")
    else:
        admin: Any = client.CoreV1Api(setup.admin)
        await admin.create_namespaced_event(EVENT_NAMESPACE, case.old)
        name = case.event["metadata"]["name"]
        call = agent.patch_namespaced_event(
            name, EVENT_NAMESPACE, case.merge_patch(), dry_run="All", _content_type=MERGE_PATCH
        )
    said = await answer(call)
    assert said == ALLOWED or said.startswith("denied: "), (said, case)
    return said == ALLOWED


def _event_by_webhook(case: EventWrite, node: str) -> bool:
    request = {
        "operation": "CREATE" if case.old is None else "UPDATE",
        "namespace": EVENT_NAMESPACE,
        "object": case.event,
        "oldObject": case.old,
    }
    return admission.review_event(request, node).allowed


def _event_by_node_proxy(case: EventWrite, node: str) -> bool:
    body = json.dumps(case.event).encode()
    path = f"/api/v1/namespaces/{EVENT_NAMESPACE}/events"
    return nodeaccess.decide("POST", path, (), "application/json", body, node, ()).allowed


@pytest.mark.parametrize("installed", ["openshift"], indirect=True)
async def test_the_event_policy_and_the_python_checkers_agree_case_by_case(
    installed: Installed,  # noqa: F811 (the fixture imported above)
) -> None:
    """drain-guard-event-confinement, ``rules.event_problem`` (and, for an update,
    ``updated_event_problem``) and the webhook: one answer; the node proxy, which reads the
    agent's request itself, may refuse more but never admits what the policy refuses."""
    setup = installed
    cases = event_writes(SEED, CASES, setup.node, setup.other, setup.pool)
    disagreements, looser = [], []
    allowed = 0
    for case in cases:
        cel = await _event_by_api_server(setup, case)
        predicates = rules.event_problem(case.event, setup.node) is None and (
            case.old is None or rules.updated_event_problem(case.old, setup.node) is None
        )
        answers = {
            "policy": cel,
            "rules": predicates,
            "webhook": _event_by_webhook(case, setup.node),
        }
        if len(set(answers.values())) != 1:
            disagreements.append((answers, case))
        if case.old is None and _event_by_node_proxy(case, setup.node) and not cel:
            looser.append(case)
        allowed += cel
    assert not disagreements, disagreements[:5]
    assert not looser, looser[:5]
    assert CASES // 10 <= allowed <= CASES - CASES // 10, allowed


async def _budget_by_api_server(setup: Installed, case: BudgetWrite) -> bool:
    """Whether the API server admits the agent's budget write (a dry run); a deleted budget
    is written by the administrator first."""
    agent: Any = client.PolicyV1Api(setup.agent)  # bodies are plain JSON
    name = case.budget["metadata"]["name"]
    call: Awaitable[Any]
    if case.operation == "CREATE":
        call = agent.create_namespaced_pod_disruption_budget(MCO_NS, case.budget, dry_run="All")
    else:
        admin: Any = client.PolicyV1Api(setup.admin)
        await admin.create_namespaced_pod_disruption_budget(MCO_NS, case.budget)
        call = agent.delete_namespaced_pod_disruption_budget(name, MCO_NS, dry_run="All")
    said = await answer(call)
    assert said == ALLOWED or said.startswith("denied: "), (said, case)
    return said == ALLOWED


def _budget_by_webhook(case: BudgetWrite, node: str) -> bool:
    """The webhook's answer, the budget's owner pod existing and selected when it names one."""
    metadata = case.budget["metadata"]
    owners = metadata.get("ownerReferences") or [{}]
    owner = owners[0]
    labels = (case.budget["spec"]["selector"].get("matchLabels")) or {}
    pod = {
        "metadata": {"uid": owner.get("uid"), "labels": labels},
        "spec": {"nodeName": metadata["labels"].get(NODE_KEY, node)},
    }
    key = "object" if case.operation == "CREATE" else "oldObject"
    request = {"operation": case.operation, "namespace": MCO_NS, key: case.budget}
    pods = {admission.PodKey(MCO_NS, str(owner.get("name"))): pod}
    return admission.review_budget(request, pods, node).allowed


@pytest.mark.parametrize("installed", ["openshift"], indirect=True)
async def test_the_budget_policy_and_the_python_checkers_agree_case_by_case(
    installed: Installed,  # noqa: F811 (the fixture imported above)
) -> None:
    """drain-guard-budget-confinement, ``rules.budget_problem`` and the webhook: one answer
    (the webhook also looks the owner pod up, which the policy cannot: here it exists)."""
    setup = installed
    cases = budget_writes(SEED, CASES, setup.node, setup.other)
    disagreements = []
    allowed = 0
    for case in cases:
        cel = await _budget_by_api_server(setup, case)
        answers = {
            "policy": cel,
            "rules": rules.budget_problem(case.operation, case.budget, setup.node) is None,
            "webhook": _budget_by_webhook(case, setup.node),
        }
        if len(set(answers.values())) != 1:
            disagreements.append((answers, case))
        allowed += cel
    assert not disagreements, disagreements[:5]
    assert CASES // 10 <= allowed <= CASES - CASES // 10, allowed


@pytest.mark.parametrize("installed", ["openshift"], indirect=True)
async def test_the_pod_policy_and_the_python_checkers_agree_case_by_case(
    installed: Installed,  # noqa: F811 (the fixture imported above)
) -> None:
    """drain-guard-pod-confinement, ``rules.agent_pod_problem`` and the webhook, over pods
    made from the installed DaemonSet's (created by the administrator as a dry run: the
    policy confines the pods that run as the agents' account, whoever creates them)."""
    setup = installed
    daemonset = await client.AppsV1Api(setup.admin).read_namespaced_daemon_set(AGENT, AGENT)
    spec = setup.admin.sanitize_for_serialization(daemonset.spec.template.spec)
    cases = pod_writes(SEED, CASES, AGENT, spec)
    core: Any = client.CoreV1Api(setup.admin)  # bodies are plain JSON
    disagreements = []
    allowed = 0
    for case in cases:
        said = await answer(core.create_namespaced_pod(AGENT, case.pod, dry_run="All"))
        assert said == ALLOWED or said.startswith("denied: "), (said, case)
        cel = said == ALLOWED
        request = {"namespace": AGENT, "object": case.pod}
        answers = {
            "policy": cel,
            "rules": rules.agent_pod_problem(case.pod) is None,
            "webhook": admission.review_pod(request, f"{AGENT}:{AGENT}").allowed,
        }
        if len(set(answers.values())) != 1:
            disagreements.append((answers, case))
        allowed += cel
    assert not disagreements, disagreements[:5]
    assert CASES // 10 <= allowed <= CASES - CASES // 10, allowed
