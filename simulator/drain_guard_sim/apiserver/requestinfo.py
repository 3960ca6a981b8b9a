"""What a request asks, read from its path, method, query and body, as kube-apiserver's
RequestInfo resolver and its handlers' option checks do; no state, nothing served here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web
from multidict import MultiMapping

from drain_guard_sim.apiserver import errors
from drain_guard_sim.apiserver.resources import ResourceIndex, ResourceType

__all__ = [
    "SUBRESOURCE_VERBS",
    "Target",
    "check_kind",
    "check_list_options",
    "dry_run",
    "json_response",
    "parse_bool",
    "read_body",
    "resolve",
    "resource_label",
    "resource_version",
    "verb_of",
]

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(name: str, value: str | None) -> bool:
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise errors.bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax for {name}')


#: The verbs each subresource serves (CSR approval is authorized, not served: see
#: docs/simulator-conformance.md).
SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": ("get", "update", "patch"),
    "eviction": ("create",),
    "token": ("create",),
    "approval": (),
}

_OPTIONS_KIND = {
    "create": "CreateOptions",
    "update": "UpdateOptions",
    "patch": "PatchOptions",
    "delete": "DeleteOptions",
    "deletecollection": "DeleteOptions",
}


def dry_run(query: MultiMapping[str], verb: str) -> bool:
    """``dryRun=All`` asked for; another value is the handlers' 422 (ValidateDryRun)."""
    values = query.getall("dryRun", [])
    if any(v != "All" for v in values):
        shown = json.dumps(values, separators=(",", ":"))
        raise errors.invalid_options(
            _OPTIONS_KIND.get(verb, "CreateOptions"),
            [("FieldValueNotSupported", "dryRun",
              f'Unsupported value: {shown}: supported values: "All"')],
        )  # fmt: skip
    return bool(values)


def resource_version(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise errors.bad_request(f'invalid resource version "{text}"') from None


def check_list_options(query: Mapping[str, str], *, watch: bool) -> None:
    """ValidateListOptions (apimachinery's internalversion validation): what a list or a
    watch may combine; a refusal is 422 Invalid for ``ListOptions``."""
    match = query.get("resourceVersionMatch", "")
    causes: list[tuple[str, str, str]] = []

    def forbid(why: str) -> None:
        causes.append(("FieldValueForbidden", "resourceVersionMatch", f"Forbidden: {why}"))

    def unsupported(allowed: tuple[str, ...]) -> None:
        shown = ", ".join(f'"{a}"' for a in allowed)
        causes.append(("FieldValueNotSupported", "resourceVersionMatch",
                       f'Unsupported value: "{match}": supported values: {shown}'))  # fmt: skip

    initial = query.get("sendInitialEvents") is not None
    if watch:
        if initial and match != "NotOlderThan":
            forbid("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        if match:
            if not initial:
                forbid("resourceVersionMatch is forbidden for watch unless sendInitialEvents "
                       "is provided")  # fmt: skip
            if match != "NotOlderThan":
                unsupported(("NotOlderThan",))
            if query.get("continue"):
                forbid("resourceVersionMatch is forbidden when continue is provided")
    else:
        if match:
            if not query.get("resourceVersion"):
                forbid("resourceVersionMatch is forbidden unless resourceVersion is provided")
            if query.get("continue"):
                forbid("resourceVersionMatch is forbidden when continue is provided")
            if match not in ("Exact", "NotOlderThan"):
                unsupported(("Exact", "NotOlderThan", ""))
            if match == "Exact" and query.get("resourceVersion") == "0":
                forbid('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        if initial:
            causes.append(("FieldValueForbidden", "sendInitialEvents",
                           "Forbidden: sendInitialEvents is forbidden for list"))  # fmt: skip
    if causes:
        raise errors.invalid_options("ListOptions", causes)


@dataclass
class Target:
    """What a request path names."""

    group: str
    version: str
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str
    legacy_watch: bool


def resolve(index: ResourceIndex, path: str) -> Target | None:
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    if parts[0] == "api":
        if len(parts) <= 2:
            return None
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis":
        if len(parts) <= 3:
            return None
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    legacy_watch = False
    if rest and rest[0] == "watch":
        legacy_watch = True
        rest = rest[1:]
    namespace: str | None = None
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise errors.page_not_found()
    rt = index.by_gvr(group, version, rest[0])
    if rt is None:
        raise errors.page_not_found()
    if namespace is not None and not rt.namespaced:
        raise errors.page_not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if sub and rt.subresource(sub) is None:
        raise errors.page_not_found()
    if name is not None and rt.namespaced and namespace is None:
        raise errors.page_not_found()
    return Target(group, version, rt, namespace, name, sub, legacy_watch)


def resource_label(target: Target | None) -> str:
    if target is None:
        return ""
    key = target.rt.key
    return f"{key}/{target.subresource}" if target.subresource else key


def verb_of(request: web.Request, target: Target | None) -> str:
    method = request.method
    if target is None:
        return "get"
    if method == "GET":
        if target.legacy_watch or parse_bool("watch", request.query.get("watch")):
            return "watch"
        return "get" if target.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    raise errors.method_not_allowed(method)


def json_response(
    obj: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


async def read_body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        return None
    content_type = request.content_type
    try:
        if content_type in ("application/yaml", "application/apply-patch+yaml"):
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as err:
        raise errors.bad_request(f"error decoding request body: {err}") from None


def check_kind(rt: ResourceType, body: Mapping[str, Any]) -> None:
    api_version = body.get("apiVersion")
    kind = body.get("kind")
    if kind and kind != rt.kind:
        raise errors.bad_request(
            f"the object provided is unrecognized (must be of type {rt.kind}): "
            f"object kind {kind} does not match {rt.kind}"
        )
    if api_version and api_version != rt.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({rt.api_version})"
        )
