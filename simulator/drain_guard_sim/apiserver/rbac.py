"""kube-apiserver's RBAC authorizer over the Roles, ClusterRoles and their bindings stored in
the simulator, for a server started with ``SimApiServer(rbac=True)``.

As ``plugin/pkg/auth/authorizer/rbac`` (read, not copied): a request is allowed when a rule of
a role bound to the user (by name, by one of its groups, or as its service account) names the
request's API group, resource (``*``, the resource, ``resource/subresource``, ``*/subresource``),
verb (or ``*``) and, when the rule lists names, the object's name. RoleBindings apply in their
own namespace (to a Role there or a ClusterRole), ClusterRoleBindings everywhere. Not
modelled: aggregated ClusterRoles, non-resource URLs, escalation checks on writes of roles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


class RoleSource(Protocol):
    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]: ...

    def try_get(
        self, resource: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None: ...


def _bound(binding: Mapping[str, Any], user: str, groups: Sequence[str]) -> bool:
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "User" and name == user:
            return True
        if kind == "Group" and name in groups:
            return True
        if kind == "ServiceAccount" and user == (
            f"{SERVICE_ACCOUNT_PREFIX}{subject.get('namespace')}:{name}"
        ):
            return True
    return False


def _rule_allows(
    rule: Mapping[str, Any],
    api_group: str,
    resource: str,
    subresource: str,
    verb: str,
    name: str | None,
) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and verb not in verbs:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and api_group not in groups:
        return False
    combined = f"{resource}/{subresource}" if subresource else resource
    resources = rule.get("resources") or []
    if not any(
        r in ("*", combined) or (subresource and r == f"*/{subresource}") for r in resources
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or (name is not None and name in names)


def _rules(
    store: RoleSource, ref: Mapping[str, Any], namespace: str | None
) -> Iterable[Mapping[str, Any]]:
    kind, name = ref.get("kind"), str(ref.get("name"))
    role = (
        store.try_get("clusterroles", name)
        if kind == "ClusterRole"
        else store.try_get("roles", name, namespace)
    )
    return (role or {}).get("rules") or []


def allows(
    store: RoleSource,
    user: str,
    groups: Sequence[str],
    *,
    api_group: str,
    resource: str,
    subresource: str,
    verb: str,
    namespace: str | None,
    name: str | None,
) -> bool:
    """Whether a role bound to ``user`` allows the request."""
    bindings: list[tuple[dict[str, Any], str | None]] = [
        (b, None) for b in store.list("clusterrolebindings")
    ]
    if namespace is not None:
        bindings += [(b, namespace) for b in store.list("rolebindings", namespace)]
    for binding, where in bindings:
        if not _bound(binding, user, groups):
            continue
        for rule in _rules(store, binding.get("roleRef") or {}, where):
            if _rule_allows(rule, api_group, resource, subresource, verb, name):
                return True
    return False
