"""The node controller's choice of nodes, MCO 4.15 to 4.19: which node events queue a sync
(``updateNode``), and which nodes a rollout targets next (``getAllCandidateMachines``,
capped by ``maxUnavailable``)."""

from __future__ import annotations

from drain_guard_sim.actors.mco import (
    CURRENT_CONFIG,
    CURRENT_IMAGE,
    DESIRED_CONFIG,
    DESIRED_IMAGE,
    REASON,
    STATE,
    STATE_DEGRADED,
    STATE_DONE,
    JsonObj,
    annotations_of,
    labels_of,
)


def _failing(node: JsonObj) -> bool:
    """isNodeMCDFailing: Degraded or Unreconcilable on its way to another config."""
    ann = annotations_of(node)
    return ann.get(CURRENT_CONFIG) != ann.get(DESIRED_CONFIG) and ann.get(STATE) in (
        STATE_DEGRADED,
        "Unreconcilable",
    )


def rollout_targets(
    nodes: list[JsonObj],
    target: str,
    image: str,
    max_unavailable: int,
    *,
    skips_unready: bool = True,
) -> list[JsonObj]:
    """getAllCandidateMachines, capped by the capacity: the nodes to give the pool's target.

    ``skips_unready``: a node that is not ready or is cordoned is no candidate, as from
    release-4.15's PR 4495 (2024-07-31) and release-4.16's PR 4483 (2024-07-27) on
    (OCPBUGS-33397/37629); z-streams built before them give a cordoned node a new target."""

    def desired_equal(n: JsonObj) -> bool:
        ann = annotations_of(n)
        return ann.get(DESIRED_CONFIG) == target and ann.get(DESIRED_IMAGE, "") == image

    def done(n: JsonObj) -> bool:
        ann = annotations_of(n)
        return ann.get(CURRENT_CONFIG) == ann.get(DESIRED_CONFIG) and ann.get(STATE) == STATE_DONE

    def unavailable(n: JsonObj) -> bool:
        busy = not _node_ready(n) or (not done(n) and not _failing(n))
        return busy and annotations_of(n).get(DESIRED_IMAGE, "") == image

    capacity = max_unavailable - sum(1 for n in nodes if unavailable(n))
    # Nodes failing to reach this target count against availability too.
    capacity -= sum(1 for n in nodes if desired_equal(n) and _failing(n))
    if capacity <= 0:
        return []
    return [n for n in nodes if not desired_equal(n) and (_node_ready(n) or not skips_unready)][
        :capacity
    ]


_WATCHED_ANNOTATIONS = (CURRENT_CONFIG, DESIRED_CONFIG, STATE, REASON, CURRENT_IMAGE, DESIRED_IMAGE)


def node_changed(old: JsonObj, new: JsonObj) -> bool:
    """What updateNode calls a change: readiness (``checkNodeReady``'s answer, so a cordon
    and an uncordon are changes), its MCO annotations, labels, taints."""
    old_ann, new_ann = annotations_of(old), annotations_of(new)
    return (
        _unready(old) != _unready(new)
        or any(old_ann.get(k) != new_ann.get(k) for k in _WATCHED_ANNOTATIONS)
        or labels_of(old) != labels_of(new)
        or (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints")
    )


def _unready(node: JsonObj) -> str | None:
    """checkNodeReady (every version since 2019): why the node is not ready, or None. A
    node whose Ready condition is not True, or that is cordoned (``spec.unschedulable``)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return f"NotReady={cond.get('status')}"
    if (node.get("spec") or {}).get("unschedulable"):
        return "Unschedulable"
    return None


def _node_ready(node: JsonObj) -> bool:
    return _unready(node) is None
