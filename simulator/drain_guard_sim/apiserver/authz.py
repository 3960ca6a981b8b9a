"""Authorization, as kube-apiserver's ``--authorization-mode=Node,RBAC`` chain: the Node
authorizer for node identities (``nodeauth``), a test's own check of a user, then RBAC over the
stored Roles (``rbac``); the admins (``system:admin``, ``system:masters``) pass."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from drain_guard_sim.apiserver import nodeauth, rbac
from drain_guard_sim.apiserver.authn import User
from drain_guard_sim.apiserver.identities import ADMIN
from drain_guard_sim.apiserver.requestinfo import Target

__all__ = ["Rbac", "authorized"]

#: An RBAC check: (API group, resource or resource/subresource, verb, namespace or None for a
#: cluster-wide request, object name or None) -> allowed.
Rbac = Callable[[str, str, str, str | None, str | None], bool]


def authorized(
    user: User,
    target: Target,
    verb: str,
    checks: Mapping[str, Rbac],
    roles: rbac.RoleSource | None,
) -> bool:
    """The authorizers in order: the Node authorizer for node identities, the user's check
    in ``checks`` (``SimApiServer.restrict``), then the stored Roles (``roles``; None: every
    request allowed) for everyone else but the admins."""
    node = nodeauth.node_name_of(user.name, user.groups)
    if node is not None:
        return nodeauth.authorized(target.group, target.rt.plural, target.subresource, verb)
    check = checks.get(user.name)
    if check is not None:
        resource = target.rt.plural
        if target.subresource:
            resource = f"{resource}/{target.subresource}"
        return check(target.group, resource, verb, target.namespace, target.name)
    if roles is None or user.name == ADMIN or "system:masters" in user.groups:
        return True
    return rbac.allows(
        roles,
        user.name,
        user.groups,
        api_group=target.group,
        resource=target.rt.plural,
        subresource=target.subresource,
        verb=verb,
        namespace=target.namespace,
        name=target.name,
    )
