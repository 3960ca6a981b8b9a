"""docs/rights.md's rows about Nodes, made as the agent: its own Node's hold and release, the
writes around them it may not make, another Node's; every write a dry run.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from drain_guard import protocol
from drain_guard.commands.preflight.probe import (
    JSON_PATCH,
    MERGE_PATCH,
    Answer,
    Probe,
    Request,
    answer_of,
    api_call,
    made,
    node_annotations,
    patch_as_agent,
    unique_name,
)
from drain_guard.confine.permissions import MCO_NAMESPACES
from drain_guard.decision.decide import stale_keys
from drain_guard.settings.hold import default_max_hold

if TYPE_CHECKING:
    pass


def _pending(annotations: Mapping[str, str]) -> bool:
    """A drain request the MCC has not applied: the one state a hold is made in."""
    desired = annotations.get(protocol.DESIRED_DRAIN, "")
    return desired.startswith("drain-") and desired != annotations.get(protocol.LAST_APPLIED_DRAIN)


def _hold_ops(annotations: Mapping[str, str]) -> list[Any]:
    return list(
        protocol.hold_patch(
            annotations[protocol.DESIRED_DRAIN],
            annotations.get(protocol.LAST_APPLIED_DRAIN),
            "",
            [protocol.Reason.BUILD_POD],
            datetime.now(UTC),
            "drain-guard preflight (dry run)",
            expires=datetime.now(UTC) + default_max_hold(),
        )
    )


async def hold_own_node(probe: Probe) -> tuple[Answer, str]:
    ann = await node_annotations(probe, probe.who.node)
    if not _pending(ann):
        return None, f"no drain request pending on {probe.who.node}"
    return made(await patch_as_agent(probe, probe.who.node, _hold_ops(ann), JSON_PATCH))


async def release_own_node(probe: Probe) -> tuple[Answer, str]:
    ann = await node_annotations(probe, probe.who.node)
    desired = ann.get(protocol.DESIRED_DRAIN, "")
    if not desired.startswith("hold-drain-"):
        return None, f"no hold on {probe.who.node}"
    present = [k for k in protocol.OWNED_KEYS if k in ann]
    ops = protocol.release_patch(
        desired.removeprefix("hold-"), ann.get(protocol.LAST_APPLIED_DRAIN), "", present
    )
    return made(await patch_as_agent(probe, probe.who.node, list(ops), JSON_PATCH))


async def hold_other_node(probe: Probe) -> tuple[Answer, str]:
    """The hold record alone, which its own Node would take, so only the node-name claim
    refuses it. Not the agent's JSON Patch of that Node's request: its test operations fail
    (422, before admission) whenever that Node's agent or MCO writes it between the read and
    the patch, and admission judges the patched object, whatever the patch's form."""
    other = probe.who.other
    if other is None:
        return None, "no other Node"
    record = {protocol.HELD_DRAIN: "drain-preflight"}
    return made(await patch_as_agent(probe, other, {"metadata": {"annotations": record}}))


async def rewrite_drain(probe: Probe) -> tuple[Answer, str]:
    ann = await node_annotations(probe, probe.who.node)
    last = ann.get(protocol.LAST_APPLIED_DRAIN)
    if last is None or ann.get(protocol.DESIRED_DRAIN) == last:
        return None, f"desiredDrain is lastAppliedDrain already on {probe.who.node}"
    body = {"metadata": {"annotations": {protocol.DESIRED_DRAIN: last}}}
    return made(await patch_as_agent(probe, probe.who.node, body))


def annotate(key: str, value: str) -> Request:
    async def make(probe: Probe) -> tuple[Answer, str]:
        ann = await node_annotations(probe, probe.who.node)
        if ann.get(key) == value:
            return None, f"{key} is {value!r} already"
        body = {"metadata": {"annotations": {key: value}}}
        return made(await patch_as_agent(probe, probe.who.node, body))

    return make


async def remove_released_by(probe: Probe) -> tuple[Answer, str]:
    ann = await node_annotations(probe, probe.who.node)
    stale = [k for k in stale_keys(ann) if k in protocol.RELEASED_KEYS]
    if protocol.RELEASED_BY not in stale:
        return None, f"no stale released-by marker on {probe.who.node}"
    ops = protocol.cleanup_patch(ann.get(protocol.DESIRED_DRAIN), ann, stale)
    return made(await patch_as_agent(probe, probe.who.node, list(ops), JSON_PATCH))


async def write_released_by(probe: Probe) -> tuple[Answer, str]:
    return await annotate(protocol.RELEASED_BY, probe.who.user)(probe)


async def cordon(probe: Probe) -> tuple[Answer, str]:
    found = await probe.admin.get_node(probe.who.node)
    cordoned = bool(found and found.unschedulable)
    return made(
        await patch_as_agent(probe, probe.who.node, {"spec": {"unschedulable": not cordoned}})
    )


async def taint(probe: Probe) -> tuple[Answer, str]:
    found = await api_call(probe.admin.core.read_node, probe.who.node)
    mine = {"key": "drain-guard.io/preflight", "effect": "NoSchedule"}
    taints = [*((found.get("spec") or {}).get("taints") or ()), mine]
    return made(await patch_as_agent(probe, probe.who.node, {"spec": {"taints": taints}}))


async def taint_other(probe: Probe) -> tuple[Answer, str]:
    if probe.who.other is None:
        return None, "no other Node"
    mine = {"key": "drain-guard.io/preflight", "effect": "NoSchedule"}
    return made(await patch_as_agent(probe, probe.who.other, {"spec": {"taints": [mine]}}))


async def hold_unbound(probe: Probe) -> tuple[Answer, str]:
    """Its own Node's hold, as the account with no pod's claims."""
    ann = await node_annotations(probe, probe.who.node)
    if not _pending(ann):
        return None, f"no drain request pending on {probe.who.node}"
    patch = probe.unbound.core.patch_node
    ops = _hold_ops(ann)
    return made(
        await answer_of(
            api_call(patch, probe.who.node, ops, dry_run="All", _content_type=JSON_PATCH)
        )
    )


async def label(probe: Probe) -> tuple[Answer, str]:
    body = {"metadata": {"labels": {"drain-guard.io/preflight": "x"}}}
    return made(await patch_as_agent(probe, probe.who.node, body))


async def node_status(probe: Probe) -> tuple[Answer, str]:
    body = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    core = probe.agent.core
    return made(
        await answer_of(
            api_call(
                core.patch_node_status,
                probe.who.node,
                body,
                dry_run="All",
                _content_type=MERGE_PATCH,
            )
        )
    )


async def delete_node(probe: Probe) -> tuple[Answer, str]:
    return made(
        await answer_of(api_call(probe.agent.core.delete_node, probe.who.node, dry_run="All"))
    )


async def create_node(probe: Probe) -> tuple[Answer, str]:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": unique_name("node")}}
    return made(await answer_of(api_call(probe.agent.core.create_node, body, dry_run="All")))


async def read_own_node(probe: Probe) -> tuple[Answer, str]:
    return made(await answer_of(api_call(probe.agent.core.read_node, probe.who.node)))


async def list_own_pods(probe: Probe) -> tuple[Answer, str]:
    selector = f"spec.nodeName={probe.who.node}"
    list_pods = probe.agent.core.list_namespaced_pod
    return made(await answer_of(api_call(list_pods, MCO_NAMESPACES[0], field_selector=selector)))


async def list_pods_elsewhere(probe: Probe) -> tuple[Answer, str]:
    return made(await answer_of(api_call(probe.agent.core.list_namespaced_pod, "kube-system")))
