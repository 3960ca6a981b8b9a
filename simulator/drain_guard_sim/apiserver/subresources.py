"""The subresources served by a handler of their own: a pod's eviction (PodDisruptionBudgets,
``eviction.py``), a ServiceAccount's TokenRequest, and a CSR's requester (its create)."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from aiohttp import web

from drain_guard_sim.apiserver import errors, eviction
from drain_guard_sim.apiserver.authn import User
from drain_guard_sim.apiserver.requestinfo import Target, json_response
from drain_guard_sim.apiserver.resources import EVICTION_API_VERSIONS
from drain_guard_sim.apiserver.store import Store
from drain_guard_sim.timestamps import rfc3339

__all__ = ["serve_eviction", "serve_token_request", "with_requester"]

JsonObj = dict[str, Any]


def serve_eviction(
    store: Store, target: Target, body: Any, user: str, dry_run: bool
) -> web.Response:
    assert target.name is not None
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be an Eviction")
    api_version = body.get("apiVersion")
    if body.get("kind", "Eviction") != "Eviction" or (
        api_version and api_version not in EVICTION_API_VERSIONS
    ):
        raise errors.bad_request(f"not a Eviction object: {body.get('kind')}")
    name = (body.get("metadata") or {}).get("name")
    if name != target.name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    if options.get("dryRun") == ["All"]:
        dry_run = True
    result = eviction.evict(
        store,
        target.name,
        target.namespace,
        user=user,
        delete_options=options,
        dry_run=dry_run,
    )
    return json_response(result, 201)


def with_requester(csr: JsonObj, user: str, known: User | None) -> JsonObj:
    """A CSR's requester, as the CSR strategy's PrepareForCreate fills it in (whatever the
    client sent): ``spec.username`` and ``spec.groups`` of the authenticated user."""
    groups = list(known.groups) if known is not None and known.groups else []
    spec = {**(csr.get("spec") or {}), "username": user}
    spec.pop("groups", None)
    if groups:
        spec["groups"] = groups
    return {**csr, "spec": spec}


def serve_token_request(store: Store, target: Target, body: Any) -> tuple[User, web.Response]:
    """POST serviceaccounts/<name>/token (TokenRequest): a new bearer token of the account,
    in its groups; bound to a pod (``spec.boundObjectRef``), it carries the pod's and its
    node's names as extra claims, as the real token's do (``authentication.kubernetes.io/
    pod-name``, ``node-name``...). The token does not expire here. Returns the new user, for
    the server to know by its token."""
    assert target.name is not None
    assert target.namespace is not None
    if not isinstance(body, dict) or body.get("kind", "TokenRequest") != "TokenRequest":
        raise errors.bad_request("the body of the request must be a TokenRequest")
    store.get("serviceaccounts", target.name, target.namespace)  # 404 without one
    spec = dict(body.get("spec") or {})
    extra: dict[str, list[str]] = {}
    bound = spec.get("boundObjectRef") or {}
    if bound.get("kind") == "Pod":
        pod = store.get("pods", str(bound.get("name")), target.namespace)
        extra["authentication.kubernetes.io/pod-name"] = [pod["metadata"]["name"]]
        extra["authentication.kubernetes.io/pod-uid"] = [pod["metadata"]["uid"]]
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = None if not node_name else store.try_get("nodes", node_name)
        if node is not None:
            extra["authentication.kubernetes.io/node-name"] = [node["metadata"]["name"]]
            extra["authentication.kubernetes.io/node-uid"] = [node["metadata"]["uid"]]
    namespace = target.namespace
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
              "system:authenticated")  # fmt: skip
    user = User(f"system:serviceaccount:{namespace}:{target.name}",
                secrets.token_urlsafe(24), extra, groups)  # fmt: skip
    spec.setdefault("audiences", ["https://kubernetes.default.svc"])
    spec.setdefault("expirationSeconds", 3600)
    expires = store.clock() + timedelta(seconds=int(spec["expirationSeconds"]))
    answer = {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": target.name,
            "namespace": namespace,
            "creationTimestamp": rfc3339(store.clock()),
        },
        "spec": spec,
        "status": {"token": user.token, "expirationTimestamp": rfc3339(expires)},
    }
    return user, json_response(answer, 201)
