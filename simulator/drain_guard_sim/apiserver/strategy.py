"""What a resource's registry strategy does to an object before it is stored: the status a
create resets, and an update's PrepareForUpdate (name, namespace, UID and resourceVersion
checks, the status subresource's fields, generation)."""

from __future__ import annotations

import copy
from typing import Any

from drain_guard_sim.apiserver import errors
from drain_guard_sim.apiserver.resources import ResourceType

JsonObj = dict[str, Any]


def reset_status(rt: ResourceType, obj: JsonObj) -> None:
    if not rt.reset_status_on_create:
        return
    if rt.kind == "Pod":
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif rt.custom:
        obj.pop("status", None)
    else:
        obj["status"] = {}


def prepare_update(
    rt: ResourceType, old: JsonObj, new: JsonObj, subresource: str, name: str
) -> JsonObj:
    """What a strategy's PrepareForUpdate + the generic registry do to an update."""
    new = copy.deepcopy(new)
    meta = new.get("metadata")
    if not isinstance(meta, dict):
        meta = new["metadata"] = {}
    old_meta = old["metadata"]
    if meta.get("name", name) != name:
        raise errors.bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the "
            f"URL ({name})"
        )
    if rt.namespaced and meta.get("namespace", old_meta["namespace"]) != old_meta["namespace"]:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    uid = meta.get("uid")
    if uid and uid != old_meta["uid"]:
        raise errors.conflict(
            rt,
            name,
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
            f"{old_meta['uid']}",
        )
    rv = meta.get("resourceVersion")
    if rv in (None, ""):
        if not rt.allow_unconditional_update:
            raise errors.invalid(
                rt,
                rt.kind,
                name,
                [("FieldValueInvalid", "metadata.resourceVersion",
                  "Invalid value: 0x0: must be specified for an update")],
            )  # fmt: skip
    elif str(rv) != old_meta["resourceVersion"]:
        raise errors.conflict(rt, name)
    if subresource == "status":
        result = copy.deepcopy(old)
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        if not rt.custom:
            for key in ("labels", "annotations"):
                if key in meta:
                    result["metadata"][key] = meta[key]
                else:
                    result["metadata"].pop(key, None)
        new = result
        meta = new["metadata"]
    elif rt.has_status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    new["apiVersion"] = rt.api_version
    new["kind"] = rt.kind
    for key in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp",
                "generation"):  # fmt: skip
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    if rt.generation and spec_changed(rt, old, new):
        meta["generation"] = int(old_meta.get("generation", 1)) + 1
    meta["resourceVersion"] = old_meta["resourceVersion"]
    return new


def spec_changed(rt: ResourceType, old: JsonObj, new: JsonObj) -> bool:
    skip = {"metadata", "status"} if rt.has_status else {"metadata"}
    keys = (set(old) | set(new)) - skip - {"apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)
