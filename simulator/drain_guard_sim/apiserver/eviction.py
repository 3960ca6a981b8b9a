"""POST pods/<name>/eviction, as kube-apiserver's eviction subresource handles it
(``pkg/registry/core/pod/storage/eviction.go``): the pod's one budget checked and decremented,
then the pod deleted."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from drain_guard_sim.apiserver import errors, labels
from drain_guard_sim.apiserver.disruption import pod_ready, set_condition
from drain_guard_sim.apiserver.identities import ADMIN, APISERVER
from drain_guard_sim.apiserver.labels import labels_of
from drain_guard_sim.apiserver.store import JsonObj, Store
from drain_guard_sim.timestamps import rfc3339


def evict(
    store: Store,
    name: str,
    namespace: str | None = None,
    *,
    user: str = ADMIN,
    delete_options: Mapping[str, Any] | None = None,
    dry_run: bool = False,
) -> JsonObj:
    """POST pods/<name>/eviction, as ``pkg/registry/core/pod/storage/eviction.go``.

    Returns the ``Status`` the server answers with (201 Success); raises ApiError for
    429 (budget), 500 (several budgets) and the rest.
    """
    pods = store.rt("pods")
    pod = store.try_get(pods, name, namespace)
    if pod is None:
        raise errors.not_found(pods, name)
    ns = pod["metadata"]["namespace"]
    preconditions = (delete_options or {}).get("preconditions") or None
    status = pod.get("status") or {}
    phase = status.get("phase")
    deleting = bool(pod["metadata"].get("deletionTimestamp"))
    success: JsonObj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    if phase in ("Succeeded", "Failed", "Pending") or deleting:
        store.delete(pods, name, ns, user=user, preconditions=preconditions, dry_run=dry_run,
                    subresource="eviction", verb="create")  # fmt: skip
        return success
    pdbs = [p for p in store.list("poddisruptionbudgets", ns) if _pdb_selects(p, pod)]
    if len(pdbs) > 1:
        raise errors.ApiError(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "This pod has more than one PodDisruptionBudget, which the "
                "eviction subresource does not support.",
                "code": 500,
            }
        )
    if pdbs:
        pdb = pdbs[0]
        pdb_status = pdb.get("status") or {}
        current = int(pdb_status.get("currentHealthy", 0))
        desired = int(pdb_status.get("desiredHealthy", 0))
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
        unready_ok = not pod_ready(pod) and (
            policy == "AlwaysAllow" or (current >= desired and desired > 0)
        )
        if not unready_ok:
            _check_and_decrement(store, pdb, name, dry_run)
    store.delete(pods, name, ns, user=user, preconditions=preconditions, dry_run=dry_run,
                subresource="eviction", verb="create")  # fmt: skip
    return success


def _check_and_decrement(store: Store, pdb: JsonObj, pod_name: str, dry_run: bool) -> None:
    pdb_name = pdb["metadata"]["name"]
    status = pdb.get("status") or {}
    if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 0)):
        raise errors.too_many_requests(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            10,
            [{"reason": "DisruptionBudget",
              "message": f"The disruption budget {pdb_name} is still being processed by "
              "the server."}],
        )  # fmt: skip
    allowed = int(status.get("disruptionsAllowed", 0))
    pdb_rt = store.rt("poddisruptionbudgets")
    if allowed < 0:
        raise errors.forbidden(pdb_rt, pdb_name, "pdb disruptions allowed is negative")
    if allowed == 0:
        raise errors.too_many_requests(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            0,
            [{"reason": "DisruptionBudget",
              "message": f"The disruption budget {pdb_name} needs "
              f"{status.get('desiredHealthy', 0)} healthy pods and has "
              f"{status.get('currentHealthy', 0)} currently"}],
        )  # fmt: skip
    if dry_run:
        return
    new = copy.deepcopy(pdb)
    new_status = new.setdefault("status", {})
    new_status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        set_condition(new_status, "InsufficientPods", False, store.clock())
    new_status.setdefault("disruptedPods", {})[pod_name] = rfc3339(store.clock())
    # The disruption controller reacts to the pod's deletion, next.
    store.write_budget_status(APISERVER, new, copy.deepcopy(pdb))


def _pdb_selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The eviction handler's match: a nil or empty selector matches nothing."""
    try:
        selector = labels.from_label_selector((pdb.get("spec") or {}).get("selector"))
    except labels.SelectorError:
        return False
    if selector.everything or selector.nothing:
        return False
    return selector.matches(labels_of(pod))
