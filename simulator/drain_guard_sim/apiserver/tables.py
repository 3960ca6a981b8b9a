"""Server-side printing: the ``meta.k8s.io/v1`` ``Table`` that ``kubectl get`` asks for.

Columns follow the real server's printers (``pkg/printers/internalversion``) for nodes,
pods and PodDisruptionBudgets; every other resource gets Name and Age, as custom resources
without printer columns do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from drain_guard_sim.apiserver.resources import ResourceType
from drain_guard_sim.timestamps import parse_rfc3339

JsonObj = dict[str, Any]
Column = tuple[str, str, str, int]  # name, type, format, priority


def human_duration(seconds: int) -> str:
    """apimachinery's ``duration.HumanDuration``, as the Age column shows it."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m{s}s" if s else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        m = minutes % 60
        return f"{hours}h{m}m" if m else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        h = hours % 24
        return f"{days}d{h}h" if h else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        d = days % 365
        return f"{years}y{d}d" if d else f"{years}y"
    return f"{years}y"


def age(obj: Mapping[str, Any], now: datetime) -> str:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    return human_duration(int((now - parse_rfc3339(created)).total_seconds()))


def _node_row(obj: Mapping[str, Any], now: datetime) -> list[Any]:
    status = obj.get("status") or {}
    ready = "Unknown"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = "Ready" if cond.get("status") == "True" else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        ready += ",SchedulingDisabled"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1]
        for k in labels
        if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1]
    )
    version = (status.get("nodeInfo") or {}).get("kubeletVersion", "")
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        obj["metadata"]["name"],
        ready,
        ",".join(roles) or "<none>",
        age(obj, now),
        version,
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _pod_row(obj: Mapping[str, Any], now: datetime) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(spec.get("containers") or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for s in statuses:
        waiting = (s.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return [
        obj["metadata"]["name"],
        f"{ready}/{total}",
        reason,
        restarts,
        age(obj, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _pdb_row(obj: Mapping[str, Any], now: datetime) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        str(spec["minAvailable"]) if spec.get("minAvailable") is not None else "N/A",
        str(spec["maxUnavailable"]) if spec.get("maxUnavailable") is not None else "N/A",
        int(status.get("disruptionsAllowed", 0)),
        age(obj, now),
    ]


def _generic_row(obj: Mapping[str, Any], now: datetime) -> list[Any]:
    return [obj["metadata"]["name"], age(obj, now)]


_PRINTERS: dict[str, tuple[list[Column], Callable[[Mapping[str, Any], datetime], list[Any]]]] = {
    "Node": (
        [
            ("Name", "string", "name", 0),
            ("Status", "string", "", 0),
            ("Roles", "string", "", 0),
            ("Age", "string", "", 0),
            ("Version", "string", "", 0),
            ("Internal-IP", "string", "", 1),
            ("External-IP", "string", "", 1),
            ("OS-Image", "string", "", 1),
            ("Kernel-Version", "string", "", 1),
            ("Container-Runtime", "string", "", 1),
        ],
        _node_row,
    ),
    "Pod": (
        [
            ("Name", "string", "name", 0),
            ("Ready", "string", "", 0),
            ("Status", "string", "", 0),
            ("Restarts", "string", "", 0),
            ("Age", "string", "", 0),
            ("IP", "string", "", 1),
            ("Node", "string", "", 1),
            ("Nominated Node", "string", "", 1),
            ("Readiness Gates", "string", "", 1),
        ],
        _pod_row,
    ),
    "PodDisruptionBudget": (
        [
            ("Name", "string", "name", 0),
            ("Min Available", "string", "", 0),
            ("Max Unavailable", "string", "", 0),
            ("Allowed Disruptions", "integer", "", 0),
            ("Age", "string", "", 0),
        ],
        _pdb_row,
    ),
}
_GENERIC: tuple[list[Column], Callable[[Mapping[str, Any], datetime], list[Any]]] = (
    [("Name", "string", "name", 0), ("Age", "string", "", 0)],
    _generic_row,
)


def to_table(rt: ResourceType, items: list[JsonObj], include_object: str, now: datetime) -> JsonObj:
    columns, row = _PRINTERS.get(rt.kind, _GENERIC)
    rows: list[JsonObj] = []
    for obj in items:
        entry: JsonObj = {"cells": row(obj, now)}
        if include_object == "Object":
            entry["object"] = obj
        elif include_object != "None":
            entry["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(entry)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": [
            {"name": n, "type": t, "format": f, "description": "", "priority": p}
            for n, t, f, p in columns
        ],
        "rows": rows,
    }
