"""docs/rights.md's request column, word for word, and how the preflight makes each row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drain_guard import protocol
from drain_guard.commands.preflight.account_rows import (
    WEBHOOK_ACCOUNT,
    all_secrets,
    create_csr,
    create_pod,
    delete_build,
    evict,
    list_pools,
    mco_read,
    mco_secret,
    own_secrets,
    read_pool,
    token,
    update_pool,
)
from drain_guard.commands.preflight.budget_rows import (
    budget_elsewhere,
    budget_labelled_for_other,
    change_budget,
    delete_budget,
    mco_builder_budget,
    other_nodes_budget,
    own_budget,
)
from drain_guard.commands.preflight.event_rows import (
    create_event,
    event,
    other_node_event,
    pool_event,
    pool_event_for_other,
)
from drain_guard.commands.preflight.node_rows import (
    annotate,
    cordon,
    create_node,
    delete_node,
    hold_other_node,
    hold_own_node,
    hold_unbound,
    label,
    list_own_pods,
    list_pods_elsewhere,
    node_status,
    read_own_node,
    release_own_node,
    remove_released_by,
    rewrite_drain,
    taint,
    taint_other,
    write_released_by,
)
from drain_guard.commands.preflight.probe import Request

if TYPE_CHECKING:
    pass


#: docs/rights.md's request column, word for word, and how the preflight makes each.
REQUESTS: dict[str, Request] = {
    "get its own Node": read_own_node,
    "list the pods on its own Node in openshift-machine-config-operator": list_own_pods,
    "list the pods in kube-system": list_pods_elsewhere,
    "hold its own Node's drain (the agent's JSON Patch)": hold_own_node,
    "release its own Node's hold (the agent's JSON Patch)": release_own_node,
    "hold another Node's drain": hold_other_node,
    "set desiredDrain to lastAppliedDrain on its own Node (a fake completion)": rewrite_drain,
    "add another annotation to its own Node": annotate("example.com/drain-guard-preflight", "x"),
    "write a hold request on its own Node (drain-guard.io/hold-request)": annotate(
        protocol.HOLD_REQUEST, "2099-01-01T00:00:00Z;drain-guard preflight"
    ),
    "remove drain-guard.io/released-by with the released marker (the agent's cleanup)": (
        remove_released_by
    ),
    "write drain-guard.io/released-by on its own Node (in its own name)": write_released_by,
    "cordon its own Node (spec.unschedulable)": cordon,
    "taint its own Node": taint,
    "label its own Node": label,
    "taint another Node": taint_other,
    "write its own Node's status": node_status,
    "delete its own Node": delete_node,
    "create a Node": create_node,
    "create a budget on its own Node's build pod": own_budget,
    "delete a budget on its own Node's build pod": delete_budget(of_own=True),
    "create a budget on another Node's build pod": other_nodes_budget,
    "delete a budget on another Node's build pod": delete_budget(of_own=False),
    "change a budget": change_budget,
    "create a budget in default": budget_elsewhere,
    "create a budget selecting MCO's machine-os-builder": mco_builder_budget,
    "create a budget labelled for another Node": budget_labelled_for_other,
    "create an Event about its own Node in default": create_event(lambda p: event(p.who.node)),
    "create an Event about its own Node in default with a message of 1 MiB": create_event(
        lambda p: event(p.who.node) | {"message": "x" * (1024 * 1024)}
    ),
    "create an Event about its own Node in default with a message of 4 KiB": create_event(
        lambda p: event(p.who.node) | {"message": "x" * (4 * 1024)}
    ),
    "create an Event about another Node in default": create_event(other_node_event),
    "create an Event about its own Node as the kubelet": create_event(
        lambda p: event(p.who.node, component="kubelet")
    ),
    "create an Event in its own namespace": create_event(
        lambda p: event(p.who.node, p.who.namespace)
    ),
    "create a PoolRolloutHeld Event about a MachineConfigPool related to its own Node": (
        create_event(lambda p: pool_event(p, p.who.node))
    ),
    "create a PoolRolloutHeld Event about a MachineConfigPool related to another Node": (
        create_event(pool_event_for_other)
    ),
    "create a PoolRolloutHeld Event about a MachineConfigPool related to nothing": (
        create_event(lambda p: pool_event(p, None))
    ),
    "create an Event of another reason about a MachineConfigPool": create_event(
        lambda p: pool_event(p, p.who.node, reason="Degraded")
    ),
    "create an Event about a MachineConfig": create_event(
        lambda p: pool_event(p, p.who.node, kind="MachineConfig")
    ),
    "get a MachineConfigPool": read_pool,
    "list the MachineConfigPools": list_pools,
    "watch the MachineConfigPools": mco_read("machineconfigpools", watch=True),
    "update a MachineConfigPool": update_pool,
    "list the MachineOSBuilds": mco_read("machineosbuilds"),
    "watch the MachineOSBuilds": mco_read("machineosbuilds", watch=True),
    "delete a MachineOSBuild": delete_build,
    "list the MachineOSConfigs": mco_read("machineosconfigs"),
    "watch the MachineOSConfigs": mco_read("machineosconfigs", watch=True),
    "create a token for its own ServiceAccount": token(None, None),
    "create a token for kube-system's default ServiceAccount": token("kube-system", "default"),
    "create a token for its namespace's default ServiceAccount": token(None, "default"),
    "list the Secrets of its own namespace": own_secrets,
    "list every Secret": all_secrets,
    "read a Secret in openshift-machine-config-operator": mco_secret,
    "create a token for the webhook's ServiceAccount": token(None, WEBHOOK_ACCOUNT),
    "hold its own Node's drain with a token bound to no pod": hold_unbound,
    "create a CertificateSigningRequest": create_csr,
    "create a pod in its own namespace": create_pod,
    "evict its own pod": evict,
}

#: The rows the preflight does not make, and why: it cannot stop the webhook.
UNMADE: dict[str, str] = {
    "update its own Node's hold while the webhook is down": "the webhook would have to be down",
    "release its own Node's hold while the webhook is down": "the webhook would have to be down",
}
