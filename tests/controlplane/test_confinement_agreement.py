"""One confinement rule, three checkers, one answer: the CEL policy
drain-guard-node-confinement as the real kube-apiserver evaluates it, and the Python
predicates (drain_guard.confine.rules) as the 4.15 webhook (confine.admission) and the systemd
node proxy (confine.nodeaccess) ask them, over the same generated writes of an agent on its
own Node (tests/confinement.py), case by case.

The ``openshift`` overlay is installed as test_rights installs it (a real token bound to the
agent's pod on its Node); each case's before-state is written by the administrator, then the
agent sends the case's JSON Patch as a dry run: the policies run on a dry run, nothing is
stored.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard.confine import admission, nodeaccess, rules
from drain_guard.confine.rights import ALLOWED
from tests.confinement import KEYS, NodeWrite, node_writes
from tests.controlplane.test_rights import (  # noqa: F401 (installed: the fixture)
    Installed,
    answer,
    installed,
    user_name,
)

pytestmark = pytest.mark.controlplane

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
