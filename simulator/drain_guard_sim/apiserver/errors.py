"""``metav1.Status`` errors shaped exactly as a real kube-apiserver shapes them.

The constructors follow apimachinery's ``k8s.io/apimachinery/pkg/api/errors`` (``NewNotFound``,
``NewAlreadyExists``, ``NewConflict``, ``NewBadRequest``, ``NewInvalid``,
``NewTooManyRequests``, ``NewInternalError``, ``NewResourceExpired``, ...): the same reasons,
messages and ``details``.
"""

from __future__ import annotations

from typing import Any

from drain_guard_sim.apiserver.resources import ResourceType

JsonObj = dict[str, Any]


def qualified(rt: ResourceType) -> str:
    """``pods``, ``poddisruptionbudgets.policy``: how messages name a resource."""
    return rt.key


def status_obj(
    code: int,
    reason: str,
    message: str,
    details: JsonObj | None = None,
) -> JsonObj:
    obj: JsonObj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        obj["details"] = details
    obj["code"] = code
    return obj


def _details(rt: ResourceType | None, name: str | None, **extra: Any) -> JsonObj:
    details: JsonObj = {}
    if name:
        details["name"] = name
    if rt is not None:
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
    details.update({k: v for k, v in extra.items() if v})
    return details


class ApiError(Exception):
    """An error reply: ``status`` is the ``metav1.Status`` body, ``code`` its HTTP status."""

    def __init__(self, status: JsonObj, headers: dict[str, str] | None = None) -> None:
        super().__init__(status.get("message", ""))
        self.status = status
        self.headers = headers or {}

    @property
    def code(self) -> int:
        return int(self.status["code"])

    @property
    def reason(self) -> str:
        return str(self.status.get("reason", ""))

    @property
    def message(self) -> str:
        return str(self.status.get("message", ""))

    def __repr__(self) -> str:
        return f"ApiError({self.code} {self.reason}: {self.message})"


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        status_obj(404, "NotFound", f'{qualified(rt)} "{name}" not found', _details(rt, name))
    )


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        status_obj(
            409, "AlreadyExists", f'{qualified(rt)} "{name}" already exists', _details(rt, name)
        )
    )


CONFLICT_MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def conflict(rt: ResourceType, name: str, why: str = CONFLICT_MODIFIED) -> ApiError:
    return ApiError(
        status_obj(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {qualified(rt)} "{name}": {why}',
            _details(rt, name),
        )
    )


def precondition_conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    """A delete's failed precondition, as ``rest.BeforeDelete`` reports it: a Conflict on the
    object's kind (``GroupResource{Group, Resource: Kind}``), not its resource."""
    qualified_kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    details: JsonObj = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    return ApiError(
        status_obj(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {qualified_kind} "{name}": {why}',
            details,
        )
    )


def bad_request(message: str) -> ApiError:
    return ApiError(status_obj(400, "BadRequest", message))


def invalid(rt: ResourceType, kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """``NewInvalid``: causes are (type, field, message), e.g. ("FieldValueRequired", ...)."""
    return _invalid(rt.group, kind, name, causes)


def invalid_options(kind: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """A request's options refused, as the handlers' ``NewInvalid(GroupKind{"meta.k8s.io",
    kind}, "", errs)`` for ``ListOptions``, ``CreateOptions`` and the like."""
    return _invalid("meta.k8s.io", kind, "", causes)


def _invalid(group: str, kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    parts = [f"{fld}: {msg}" for _t, fld, msg in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    group_kind = f"{kind}.{group}" if group else kind
    details = _details(None, name)
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": t, "message": msg, "field": fld} for t, fld, msg in causes]
    return ApiError(
        status_obj(422, "Invalid", f'{group_kind} "{name}" is invalid: {summary}', details)
    )


def unprocessable() -> ApiError:
    """``NewGenericServerResponse(422, "", GroupResource{}, "", err, 0, false)``.

    This is what a JSON Patch that fails to apply (a failed ``test``, a missing path) gets:
    the server drops the patch library's message and answers with the generic one.
    """
    return ApiError(
        status_obj(
            422, "Invalid", "the server rejected our request due to an error in our request", {}
        )
    )


def too_many_requests(
    message: str, retry_after: int = 0, causes: list[JsonObj] | None = None
) -> ApiError:
    details: JsonObj = {}
    if causes:
        details["causes"] = causes
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    headers = {"Retry-After": str(retry_after)} if retry_after else {}
    return ApiError(status_obj(429, "TooManyRequests", message, details), headers)


def internal_error(message: str) -> ApiError:
    return ApiError(
        status_obj(
            500,
            "InternalError",
            f"Internal error occurred: {message}",
            {"causes": [{"message": message}]},
        )
    )


def expired(message: str) -> ApiError:
    return ApiError(status_obj(410, "Expired", message))


def unauthorized() -> ApiError:
    return ApiError(status_obj(401, "Unauthorized", "Unauthorized"))


def forbidden(rt: ResourceType | None, name: str, why: str) -> ApiError:
    """``NewForbidden``: ``<resource> "<name>" is forbidden: <why>``."""
    resource = qualified(rt) if rt is not None else "resource"
    message = (
        f'{resource} "{name}" is forbidden: {why}' if name else f"{resource} is forbidden: {why}"
    )
    return ApiError(status_obj(403, "Forbidden", message, _details(rt, name)))


def rbac_forbidden(
    rt: ResourceType, name: str, user: str, verb: str, namespace: str | None, subresource: str = ""
) -> ApiError:
    """What the RBAC authorizer's denial looks like."""
    resource = rt.plural + (f"/{subresource}" if subresource else "")
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    why = f'User "{user}" cannot {verb} resource "{resource}" in API group "{rt.group}" {scope}'
    return forbidden(rt, name, why)


def method_not_allowed(verb: str) -> ApiError:
    return ApiError(
        status_obj(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({verb})",
        )
    )


def unsupported_media_type(content_type: str, accepted: tuple[str, ...]) -> ApiError:
    return ApiError(
        status_obj(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{', '.join(accepted)}",
        )
    )


def page_not_found() -> ApiError:
    return ApiError(
        status_obj(404, "NotFound", "the server could not find the requested resource", {})
    )
