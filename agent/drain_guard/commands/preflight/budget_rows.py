"""docs/rights.md's rows about PodDisruptionBudgets, made as the agent: a budget as the shield
makes one, on its own Node's build pod or another's, and the shapes it may not make; every
write a dry run.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from drain_guard.commands.preflight.probe import (
    MERGE_PATCH,
    Answer,
    Probe,
    Request,
    answer_of,
    api_call,
    made,
    unique_name,
)
from drain_guard.confine.permissions import EVENTS_NAMESPACE, MCO_NAMESPACES
from drain_guard.core.pods import DEFAULT_SCOPE, NODE_KEY, Pod, is_build_pod, node_label_value
from drain_guard.core.selectors import default_build_pod_selectors
from drain_guard.shield.plan import Role, Want

if TYPE_CHECKING:
    pass

#: A build pod's label the shield's budgets select by (one the budget policy recognises).
BUILD_POD_LABELS = {"machineconfiguration.openshift.io/buildPod": "true"}


async def _build_pod(probe: Probe, node: str) -> Pod:
    """A build pod on ``node`` (the admin's read): one that runs there, which a webhook that
    reads a budget's owner finds (openshift-4.15); else one of the preflight's own (a name,
    uid and label: the admission policies judge a budget by its shape)."""
    found = await api_call(
        probe.admin.core.list_namespaced_pod,
        MCO_NAMESPACES[0],
        field_selector=f"spec.nodeName={node}",
    )
    selectors = default_build_pod_selectors()
    for item in found.get("items") or ():
        pod = Pod.from_dict(item)
        if is_build_pod(pod, selectors, DEFAULT_SCOPE):
            return pod
    return Pod(
        MCO_NAMESPACES[0],
        unique_name("build"),
        "Running",
        BUILD_POD_LABELS,
        uid=str(uuid.uuid4()),
        node=node,
    )


async def _budget(probe: Probe, node: str, namespace: str = MCO_NAMESPACES[0]) -> dict[str, Any]:
    """A budget as the shield makes one, on a build pod of ``node``, in ``namespace``."""
    pod = await _build_pod(probe, node)
    pod = dataclasses.replace(pod, namespace=namespace)
    return Want(pod, Role.BUILD_POD, unique_name("budget")).manifest()


async def _create_budget(probe: Probe, body: dict[str, Any]) -> tuple[Answer, str]:
    create = probe.agent.policy.create_namespaced_pod_disruption_budget
    namespace = body["metadata"]["namespace"]
    return made(await answer_of(api_call(create, namespace, body, dry_run="All")))


async def own_budget(probe: Probe) -> tuple[Answer, str]:
    return await _create_budget(probe, await _budget(probe, probe.who.node))


async def other_nodes_budget(probe: Probe) -> tuple[Answer, str]:
    if probe.who.other is None:
        return None, "no other Node"
    return await _create_budget(probe, await _budget(probe, probe.who.other))


async def mco_builder_budget(probe: Probe) -> tuple[Answer, str]:
    """Its own Node's budget, but selecting MCO's machine-os-builder (a pool could stall)."""
    body = await _budget(probe, probe.who.node)
    body["spec"]["selector"] = {"matchLabels": {"k8s-app": "machine-os-builder"}}
    return await _create_budget(probe, body)


async def budget_labelled_for_other(probe: Probe) -> tuple[Answer, str]:
    if probe.who.other is None:
        return None, "no other Node"
    body = await _budget(probe, probe.who.node)
    body["metadata"]["labels"][NODE_KEY] = node_label_value(probe.who.other)
    return await _create_budget(probe, body)


async def budget_elsewhere(probe: Probe) -> tuple[Answer, str]:
    return await _create_budget(probe, await _budget(probe, probe.who.node, EVENTS_NAMESPACE))


async def _existing_budget(probe: Probe, of_own: bool = True) -> str | None:
    """A budget a shield keeps for the agent's own Node, or for another Node: the other Node
    the preflight writes to first, else any (it may have no build pod), if any (the admin's
    read)."""
    own = node_label_value(probe.who.node)
    if of_own:
        selectors = [f"{NODE_KEY}={own}"]
    else:
        other = (
            [] if probe.who.other is None else [f"{NODE_KEY}={node_label_value(probe.who.other)}"]
        )
        selectors = [*other, f"{NODE_KEY},{NODE_KEY}!={own}"]
    for selector in selectors:
        found = await api_call(
            probe.admin.policy.list_namespaced_pod_disruption_budget,
            MCO_NAMESPACES[0],
            label_selector=selector,
        )
        items = found.get("items") or ()
        if items:
            return str(items[0]["metadata"]["name"])
    return None


def delete_budget(of_own: bool) -> Request:
    async def make(probe: Probe) -> tuple[Answer, str]:
        name = await _existing_budget(probe, of_own)
        if name is None:
            return None, f"no budget kept for {probe.who.node if of_own else 'another Node'}"
        delete = probe.agent.policy.delete_namespaced_pod_disruption_budget
        return made(await answer_of(api_call(delete, name, MCO_NAMESPACES[0], dry_run="All")))

    return make


async def change_budget(probe: Probe) -> tuple[Answer, str]:
    """The authorizer answers before the object is looked up: any name will do."""
    name = await _existing_budget(probe) or unique_name("budget")
    patch = probe.agent.policy.patch_namespaced_pod_disruption_budget
    body = {"spec": {"minAvailable": 0}}
    return made(
        await answer_of(
            api_call(patch, name, MCO_NAMESPACES[0], body, dry_run="All", _content_type=MERGE_PATCH)
        )
    )
