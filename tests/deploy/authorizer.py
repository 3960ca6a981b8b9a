"""Kubernetes' RBAC authorizer over rendered objects: may this service account do this?

As ``plugin/pkg/auth/authorizer/rbac`` decides a SubjectAccessReview: a ClusterRoleBinding
applies everywhere, a RoleBinding in its namespace only; a rule matches when its apiGroups,
resources (``resource/subresource`` for a subresource) and verbs name the request's, or
``*``, and its resourceNames are empty or name the object. And the review kube-rbac-proxy
makes for a scrape, from its config file as the pod mounts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

import yaml

from tests.deploy.tools import Obj, container, one, pod_spec


@dataclass(frozen=True)
class Request:
    verb: str
    api_group: str
    resource: str
    namespace: str  # "" for a cluster-wide request
    subresource: str = ""
    name: str = ""


def _rule_allows(rule: Obj, request: Request) -> bool:
    resource = request.resource + (f"/{request.subresource}" if request.subresource else "")
    return (
        any(g in ("*", request.api_group) for g in rule.get("apiGroups", []))
        and any(r in ("*", resource) for r in rule.get("resources", []))
        and any(v in ("*", request.verb) for v in rule["verbs"])
        and (not rule.get("resourceNames") or request.name in rule["resourceNames"])
    )


def allows(objects: list[Obj], service_account: tuple[str, str], request: Request) -> bool:
    """Whether the RBAC in ``objects`` allows ``request`` to ``(namespace, name)``."""
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }
    for binding in objects:
        if binding["kind"] == "RoleBinding":
            if binding["metadata"]["namespace"] != request.namespace:
                continue
        elif binding["kind"] != "ClusterRoleBinding":
            continue
        if not any(
            s.get("kind") == "ServiceAccount"
            and (s.get("namespace"), s.get("name")) == service_account
            for s in binding.get("subjects", [])
        ):
            continue
        ref = binding["roleRef"]
        namespace = "" if ref["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
        role = roles.get((ref["kind"], namespace, ref["name"]))
        if role and any(_rule_allows(rule, request) for rule in role.get("rules", [])):
            return True
    return False


def proxy_config(objects: list[Obj], workload: Obj | None = None) -> Obj:
    """The --config-file of ``workload``'s proxy (default: the agents'), read where the kubelet
    puts it: the mount that holds the path, its volume, the ConfigMap it names in the
    workload's namespace, the key of the file's name."""
    owner = workload or one(objects, "DaemonSet", "drain-guard")
    proxy = container(objects, "kube-rbac-proxy", owner)
    (flag,) = [a for a in proxy["args"] if a.startswith("--config-file=")]
    path = PurePosixPath(flag.removeprefix("--config-file="))
    (mount,) = [m for m in proxy["volumeMounts"] if PurePosixPath(m["mountPath"]) == path.parent]
    (volume,) = [v for v in pod_spec(objects, owner)["volumes"] if v["name"] == mount["name"]]
    namespace = owner["metadata"]["namespace"]
    (config_map,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap"
        and o["metadata"]["name"] == volume["configMap"]["name"]
        and o["metadata"]["namespace"] == namespace
    ]
    parsed: Obj = yaml.safe_load(config_map["data"][path.name])
    return parsed


def scrape(objects: list[Obj], workload: Obj | None = None) -> Request:
    """The SubjectAccessReview ``workload``'s kube-rbac-proxy makes for a scrape (GET is verb
    get)."""
    attributes = proxy_config(objects, workload)["authorization"]["resourceAttributes"]
    return Request(
        verb="get",
        api_group=attributes.get("apiGroup", ""),
        resource=attributes["resource"],
        subresource=attributes["subresource"],
        namespace=attributes["namespace"],
    )
