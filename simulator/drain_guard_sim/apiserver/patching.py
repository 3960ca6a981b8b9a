"""The three patch types a kube-apiserver accepts from kubernetes_asyncio, applied to dicts.

- ``application/json-patch+json``: RFC 6902, by the ``jsonpatch`` library. Like the real
  server, a body that is not a JSON array is a 400, and any failure to apply (a failed
  ``test``, a missing path, an unknown op) is a generic 422 ``Invalid``.
- ``application/merge-patch+json``: RFC 7386.
- ``application/strategic-merge-patch+json``: maps merge, ``null`` deletes, lists are
  replaced except the lists the Kubernetes types mark ``patchStrategy:"merge"`` (merged by
  their ``patchMergeKey``; ``metadata.finalizers`` as a set), with the ``$patch``
  (``replace``/``delete``), ``$deleteFromPrimitiveList/…``, ``$setElementOrder/…`` and
  ``$retainKeys`` directives. Custom resources do not accept it (415), as on a real server.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from drain_guard_sim.apiserver import errors

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)
SHORT_NAMES = {
    "json": JSON_PATCH,
    "merge": MERGE_PATCH,
    "strategic": STRATEGIC_MERGE_PATCH,
}

# Lists with patchStrategy "merge" in the Kubernetes types, by field path (list indices
# skipped), and their patchMergeKey; None means a list of primitives merged as a set.
MERGE_KEYS: dict[tuple[str, ...], str | None] = {
    ("metadata", "finalizers"): None,
    ("metadata", "ownerReferences"): "uid",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("status", "podIPs"): "ip",
    ("status", "hostIPs"): "ip",
}
_POD_SPEC_LISTS: dict[tuple[str, ...], str | None] = {
    ("containers",): "name",
    ("initContainers",): "name",
    ("ephemeralContainers",): "name",
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
    ("containers", "env"): "name",
    ("containers", "ports"): "containerPort",
    ("containers", "volumeMounts"): "mountPath",
    ("containers", "volumeDevices"): "devicePath",
    ("initContainers", "env"): "name",
    ("initContainers", "ports"): "containerPort",
    ("initContainers", "volumeMounts"): "mountPath",
}
for _prefix in (
    ("spec",),
    ("spec", "template", "spec"),
    ("spec", "jobTemplate", "spec", "template", "spec"),
):
    for _suffix, _key in _POD_SPEC_LISTS.items():
        MERGE_KEYS[_prefix + _suffix] = _key


def _deep(value: Any) -> Any:
    return copy.deepcopy(value)


def apply_json_patch(obj: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902; raises ApiError 400 (not an array) or 422 (does not apply)."""
    if not isinstance(ops, list):
        raise errors.bad_request(
            f"json: cannot unmarshal {type(ops).__name__} into Go value of type jsonpatch.Patch"
        )
    try:
        result = jsonpatch.JsonPatch(ops).apply(obj, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError,
            TypeError, ValueError, IndexError) as err:  # fmt: skip
        raise errors.unprocessable() from err
    if not isinstance(result, dict):
        raise errors.unprocessable()
    return result


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return _deep(patch)
    result: dict[str, Any] = _deep(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def apply_strategic_merge_patch(obj: dict[str, Any], patch: Any) -> dict[str, Any]:
    if not isinstance(patch, dict):
        raise errors.bad_request("invalid JSON document")  # mergepatch.ErrBadJSONDoc
    result = _smp_map(obj, patch, ())
    return result if isinstance(result, dict) else {}


def _smp_map(orig: Any, patch: dict[str, Any], path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return None
    if directive is not None:
        raise errors.bad_request(f"Unknown patch type: {directive}")
    result: dict[str, Any] = _deep(orig) if isinstance(orig, dict) else {}
    retain: list[str] | None = None
    for key, value in patch.items():
        if key == "$retainKeys":
            retain = list(value or [])
            continue
        if key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            fld = key.split("/", 1)[1]
            current = result.get(fld)
            if isinstance(current, list) and isinstance(value, list):
                result[fld] = [item for item in current if item not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = (*path, key)
        if isinstance(value, dict):
            merged = _smp_map(result.get(key), value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and sub in MERGE_KEYS:
            result[key] = _smp_list(result.get(key), value, MERGE_KEYS[sub], sub)
        else:
            result[key] = _strip(_deep(value))
    if retain is not None:
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(orig: Any, patch: list[Any], key: str | None, path: tuple[str, ...]) -> list[Any]:
    current: list[Any] = _deep(orig) if isinstance(orig, list) else []
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_strip(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    if key is None:  # a set of primitives
        for item in patch:
            if item not in current:
                current.append(_deep(item))
        return current
    for item in patch:
        if not isinstance(item, dict):
            current.append(_deep(item))
            continue
        match = next(
            (i for i, old in enumerate(current) if isinstance(old, dict)
             and key in item and old.get(key) == item.get(key)),
            None,
        )  # fmt: skip
        if item.get("$patch") == "delete":
            if match is not None:
                del current[match]
            continue
        if match is None:
            current.append(_smp_map({}, item, path))
        else:
            current[match] = _smp_map(current[match], item, path)
    return current


def _strip(value: Any) -> Any:
    """Drop ``$``-directives from a value that replaces rather than merges."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def apply_patch(obj: dict[str, Any], patch: Any, content_type: str) -> dict[str, Any]:
    """Apply a patch of ``content_type`` (full media type or json/merge/strategic)."""
    content_type = SHORT_NAMES.get(content_type, content_type)
    if content_type == JSON_PATCH:
        return apply_json_patch(obj, patch)
    if content_type == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise errors.bad_request("invalid JSON Patch")  # jsonpatch.ErrBadJSONPatch
        result = apply_merge_patch(obj, patch)
        assert isinstance(result, dict)
        return result
    if content_type == STRATEGIC_MERGE_PATCH:
        return apply_strategic_merge_patch(obj, patch)
    raise errors.unsupported_media_type(content_type, (*PATCH_TYPES, APPLY_PATCH))
