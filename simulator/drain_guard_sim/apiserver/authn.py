"""Who a request comes from: the users the simulator knows, the anonymous user, the client
certificate of a request's connection, and the answer to "who am I" (SelfSubjectReview)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from drain_guard_sim.apiserver.requestinfo import json_response

__all__ = [
    "ANONYMOUS",
    "SELF_SUBJECT_REVIEWS",
    "SELF_SUBJECT_REVIEW_PATH",
    "User",
    "peer_certificate",
    "self_subject_review",
]

JsonObj = dict[str, Any]


@dataclass
class User:
    name: str
    token: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    groups: tuple[str, ...] = ()


ANONYMOUS = User("system:anonymous", "")
#: Who am I (``SelfSubjectReview``): served for any authenticated user, never stored.
SELF_SUBJECT_REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SELF_SUBJECT_REVIEWS = "selfsubjectreviews"


def peer_certificate(request: web.Request) -> bytes | None:
    """The DER of the client certificate of the request's connection (the server's TLS
    context verified it against the CA), if one was sent."""
    ssl_object = request.get_extra_info("ssl_object")
    return None if ssl_object is None else ssl_object.getpeercert(binary_form=True)


def self_subject_review(user: User) -> web.Response:
    """POST selfsubjectreviews: who the API server takes the caller for (``kubectl auth
    whoami``), as kube-apiserver answers every authenticated user (the
    ``system:basic-user`` ClusterRole); nothing is stored."""
    groups = list(user.groups)
    if "system:authenticated" not in groups:
        groups.append("system:authenticated")  # the real authenticators add it to every user
    info: JsonObj = {"username": user.name, "groups": groups}
    if user.extra:
        info["extra"] = dict(user.extra)
    answer = {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": info},
    }
    return json_response(answer, 201)
