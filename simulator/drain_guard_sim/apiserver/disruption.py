"""The disruption controller's status of a PodDisruptionBudget (``DisruptionController.trySync``
in ``pkg/controller/disruption``): expected, healthy and desired pods, disruptions allowed."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from drain_guard_sim.apiserver import labels
from drain_guard_sim.apiserver.identities import DISRUPTION_CONTROLLER
from drain_guard_sim.apiserver.labels import labels_of
from drain_guard_sim.apiserver.objects import StoredObjects
from drain_guard_sim.apiserver.resources import ResourceType
from drain_guard_sim.timestamps import rfc3339

JsonObj = dict[str, Any]


def pod_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _controller_selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The disruption controller's match (policy/v1): an empty selector matches every pod."""
    try:
        selector = labels.from_label_selector((pdb.get("spec") or {}).get("selector"))
    except labels.SelectorError:
        return False
    return selector.matches(labels_of(pod))


def _scaled(value: Any, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        pct = int(text[:-1])
        raw = pct * total / 100
        return math.ceil(raw) if round_up else math.floor(raw)
    return int(text)


#: A pod's controller (its controller ownerReference) to that controller's scale, or None.
ScaleOf = Callable[[str, Mapping[str, Any]], int | None]


def _no_controller(_namespace: str, _ref: Mapping[str, Any]) -> int | None:
    return None


def compute_pdb_status(
    pdb: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    now: datetime,
    scale_of: ScaleOf = _no_controller,
) -> JsonObj:
    """``DisruptionController.trySync``: ``expectedPods`` is the number of selected pods for
    an integer ``minAvailable``; for ``maxUnavailable`` or a percentage, the sum of the scales
    of the pods' controllers (``getExpectedScale``: a pod without a controller counts 0; one
    whose controller has no scale fails the sync, ``failSafe``: no disruption allowed,
    condition ``SyncFailed``)."""
    spec = pdb.get("spec") or {}
    old = pdb.get("status") or {}
    selected = [
        p
        for p in pods
        if _controller_selects(pdb, p) and not p["metadata"].get("deletionTimestamp")
    ]
    scaled = spec.get("maxUnavailable") is not None or isinstance(spec.get("minAvailable"), str)
    expected = len(selected)
    if scaled:
        scales: dict[str, int] = {}
        for p in selected:
            ref = next(
                (r for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")),
                None,
            )
            if ref is None or ref.get("uid") in scales:
                continue
            scale = scale_of(p["metadata"].get("namespace", ""), ref)
            if scale is None:
                return _sync_failed(
                    old, f'found no controllers for pod "{p["metadata"]["name"]}"', now
                )
            scales[str(ref.get("uid"))] = scale
        expected = sum(scales.values())
    disrupted_old: Mapping[str, str] = old.get("disruptedPods") or {}
    present = {p["metadata"]["name"] for p in selected}
    disrupted = {k: v for k, v in disrupted_old.items() if k in present}
    healthy = sum(1 for p in selected if pod_ready(p) and p["metadata"]["name"] not in disrupted)
    if spec.get("maxUnavailable") is not None:
        max_unavailable = _scaled(spec["maxUnavailable"], expected, True)
        desired = max(0, expected - max_unavailable)
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, True)
    else:
        desired = 0
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    status: JsonObj = {
        "observedGeneration": int((pdb.get("metadata") or {}).get("generation", 1)),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }
    if disrupted:
        status["disruptedPods"] = dict(disrupted)
    status["conditions"] = copy.deepcopy(old.get("conditions") or [])
    if allowed > 0:
        set_condition(status, "SufficientPods", True, now)
    else:
        set_condition(status, "InsufficientPods", False, now)
    return status


def _sync_failed(old: Mapping[str, Any], message: str, now: datetime) -> JsonObj:
    """``failSafe``: the old status with no disruption allowed and condition SyncFailed."""
    status: JsonObj = copy.deepcopy(dict(old))
    status["disruptionsAllowed"] = 0
    set_condition(status, "SyncFailed", False, now, message)
    return status


def set_condition(
    status: JsonObj, reason: str, allowed: bool, now: datetime, message: str = ""
) -> None:
    conditions: list[JsonObj] = status.setdefault("conditions", [])
    value = "True" if allowed else "False"
    for cond in conditions:
        if cond.get("type") == "DisruptionAllowed":
            if cond.get("status") != value or cond.get("reason") != reason:
                cond.update(
                    status=value,
                    reason=reason,
                    message=message,
                    lastTransitionTime=rfc3339(now),
                    observedGeneration=status.get("observedGeneration", 1),
                )
            cond["observedGeneration"] = status.get("observedGeneration", 1)
            return
    conditions.append(
        {
            "type": "DisruptionAllowed",
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(now),
            "observedGeneration": status.get("observedGeneration", 1),
        }
    )


class DisruptionController(StoredObjects):
    """The disruption controller's part of :class:`~drain_guard_sim.apiserver.store.Store`: after
    a pod or budget write, the namespace's budgets' status, written by the controller's identity."""

    pdb_controller: bool

    if TYPE_CHECKING:

        def _commit(
            self,
            rt: ResourceType,
            verb: str,
            user: str,
            new: JsonObj | None,
            old: JsonObj | None,
            subresource: str = "",
        ) -> JsonObj | None: ...

    def _controller_scale(self, namespace: str, ref: Mapping[str, Any]) -> int | None:
        """The scale of a pod's controller, as the disruption controller's finders read it
        (a kind with a scale subresource: of those the simulator serves, a Deployment's
        ``spec.replicas``); None when none is found (a DaemonSet, a Job, a missing one)."""
        if (ref.get("apiVersion"), ref.get("kind")) != ("apps/v1", "Deployment"):
            return None
        found = self.try_get("deployments", str(ref.get("name")), namespace)
        if found is None or found["metadata"].get("uid") != ref.get("uid"):
            return None
        return int((found.get("spec") or {}).get("replicas", 1))

    def _sync_pdbs(self, namespace: str) -> None:
        pdb_rt = self.rt("poddisruptionbudgets")
        pdbs = sorted((k, v) for k, v in self._bucket(pdb_rt).items() if k[0] == namespace)
        if not pdbs:
            return
        pods = [p for (ns, _n), p in self._bucket(self.rt("pods")).items() if ns == namespace]
        for (_ns, _name), pdb in pdbs:
            status = compute_pdb_status(pdb, pods, self.clock(), self._controller_scale)
            if status == pdb.get("status"):
                continue
            new = copy.deepcopy(pdb)
            new["status"] = status
            self.write_budget_status(DISRUPTION_CONTROLLER, new, copy.deepcopy(pdb))

    def write_budget_status(self, user: str, new: JsonObj, old: JsonObj) -> None:
        """A budget's status written by ``user`` (the disruption controller, the eviction
        handler) without recomputing the budgets on it: the controller acts on pod writes."""
        saved = self.pdb_controller
        self.pdb_controller = False
        try:
            self._commit(self.rt("poddisruptionbudgets"), "update", user, new, old, "status")
        finally:
            self.pdb_controller = saved
