"""Discovery: ``/version``, ``/api``, ``/apis`` and each group version's resource list, from
the resources the store serves."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from drain_guard_sim.apiserver import errors
from drain_guard_sim.apiserver.requestinfo import json_response
from drain_guard_sim.apiserver.resources import ALL_VERBS, ResourceIndex, ResourceType

__all__ = ["KUBE_VERSION", "discovery"]

JsonObj = dict[str, Any]

KUBE_VERSION = {
    "major": "1",
    "minor": "28",
    "gitVersion": "v1.28.7+sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-03-01T00:00:00Z",
    "goVersion": "go1.20.14",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def discovery(index: ResourceIndex, address: str, path: str) -> web.Response:
    parts = [p for p in path.split("/") if p]
    groups = index.groups()
    if parts == ["version"]:
        return json_response(KUBE_VERSION)
    if parts == ["api"]:
        return json_response(
            {
                "kind": "APIVersions",
                "versions": groups.get("", ["v1"]),
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": address}
                ],
            }
        )
    if parts == ["apis"]:
        return json_response(
            {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_api_group(g, vs) for g, vs in groups.items() if g],
            }
        )
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
        body = _api_group(parts[1], groups[parts[1]])
        body.update(kind="APIGroup", apiVersion="v1")
        return json_response(body)
    if (len(parts) == 2 and parts[0] == "api") or (len(parts) == 3 and parts[0] == "apis"):
        group = "" if parts[0] == "api" else parts[1]
        version = parts[-1]
        rts = index.in_group_version(group, version)
        if rts:
            return json_response(_resource_list(group, version, rts))
    raise errors.page_not_found()


def _api_group(group: str, versions: list[str]) -> JsonObj:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def _resource_list(group: str, version: str, rts: list[ResourceType]) -> JsonObj:
    resources: list[JsonObj] = []
    for rt in rts:
        entry: JsonObj = {
            "name": rt.plural,
            "singularName": rt.singular_name(),
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(ALL_VERBS),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in rt.subresources:
            sub_entry: JsonObj = {
                "name": f"{rt.plural}/{sub.name}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": sub.kind,
                "verbs": list(sub.verbs),
            }
            if sub.group:
                sub_entry["group"] = sub.group
                sub_entry["version"] = sub.version
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
