"""The RBAC an overlay renders, as the API server's RBAC authorizer reads it: the grants of
the roles bound to the agent's service account, and a check of a request against them (for
the simulator's ``restrict``)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.deploy.tools import Obj

SERVICE_ACCOUNT = ("drain-guard", "drain-guard")  # (namespace, name)


@dataclass(frozen=True, order=True)
class Grant:
    """One verb on one resource, where it applies, and for which object names."""

    api_group: str
    resource: str
    verb: str
    namespace: str  # "" for cluster-wide
    resource_names: tuple[str, ...]  # () for every object


def _bound_to(binding: Obj, account: tuple[str, str]) -> bool:
    return any(
        s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == account
        for s in binding.get("subjects", [])
    )


def granted(objects: list[Obj], account: tuple[str, str] = SERVICE_ACCOUNT) -> set[Grant]:
    """Every grant the rendered objects give ``account`` (the agent's service account)."""
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }
    grants: set[Grant] = set()
    for binding in objects:
        if binding["kind"] not in {"ClusterRoleBinding", "RoleBinding"} or not _bound_to(
            binding, account
        ):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "")
        role_ns = "" if ref["kind"] == "ClusterRole" else namespace
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} binds a missing {ref}"
        for rule in role.get("rules", []):
            assert "nonResourceURLs" not in rule
            names = tuple(sorted(rule.get("resourceNames", [])))
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.add(Grant(group, resource, verb, namespace, names))
    return grants


def allows(
    grants: set[Grant],
    group: str,
    resource: str,
    verb: str,
    namespace: str | None,
    name: str | None,
) -> bool:
    """Whether RBAC allows the request: a grant of its verb on its resource, cluster-wide (a
    ClusterRoleBinding) or in its namespace (a RoleBinding), for every object or this one."""
    return any(
        (g.api_group, g.resource, g.verb) == (group, resource, verb)
        and (g.namespace == "" or g.namespace == namespace)
        and (not g.resource_names or name in g.resource_names)
        for g in grants
    )
