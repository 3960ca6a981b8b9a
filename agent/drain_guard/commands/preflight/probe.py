"""The identity probed and how a request is made as it: the agent's account with its pod-bound
token's claims, impersonated with the admin's credentials, and who answered a request how.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from drain_guard.confine.rights import ALLOWED, RBAC

if TYPE_CHECKING:
    from drain_guard.kube.call import KubeError
    from drain_guard.kube.client import Kube
    from drain_guard.kube.credentials import ApiClient

#: The node-name and pod claims of a pod-bound service account token (Kubernetes 1.30+).
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
POLICY_DENIAL = re.compile(r"ValidatingAdmissionPolicy '([^']+)'")
WEBHOOK_DENIAL = re.compile(r'admission webhook "([^"]+)" denied')


@dataclass(frozen=True)
class Agent:
    """The identity probed: the agent's account, as its pod on ``node`` holds it."""

    namespace: str
    account: str
    pod: str
    pod_uid: str
    node: str
    other: str | None

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account}"

    def headers(self, *, bound: bool = True) -> list[tuple[str, str]]:
        """The impersonation headers: the account, its groups, its pod-bound token's claims
        (none but the account and groups when not ``bound``: a TokenRequest's plain token)."""
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{self.namespace}")
        claims = {NODE_NAME_CLAIM: self.node, POD_NAME_CLAIM: self.pod, POD_UID_CLAIM: self.pod_uid}
        extras = claims if bound else {}
        return [
            ("Impersonate-User", self.user),
            *(("Impersonate-Group", g) for g in (*groups, "system:authenticated")),
            *((f"Impersonate-Extra-{quote(k, safe='')}", v) for k, v in extras.items()),
        ]


@dataclass
class Probe:
    """What a request is made with: the admin's client (to read the state a row needs) and
    the impersonating one (to make it)."""

    admin: Kube
    agent: Kube
    unbound: Kube  #: the same account with a token bound to no pod
    who: Agent
    pool: str


Answer = str | None  # None: not tried (the reason is printed by the row itself)
Request = Callable[[Probe], Awaitable[tuple[Answer, str]]]


async def find_agent(kube: Kube, namespace: str, account: str, node: str | None) -> Agent | str:
    """The agent's pod (on ``node``, else the first found) and another Node, or what is
    missing."""
    from drain_guard.kube.call import call_api

    pods = await call_api(
        kube.core.list_namespaced_pod,
        namespace,
        **({"field_selector": f"spec.nodeName={node}"} if node else {}),
    )
    for pod in pods.get("items") or ():
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if spec.get("serviceAccountName") == account and spec.get("nodeName"):
            own = str(spec["nodeName"])
            other = await kube.other_node(own)
            return Agent(namespace, account, meta["name"], meta["uid"], own, other)
    where = f" on node {node}" if node else ""
    return f"no pod of service account {namespace}/{account}{where}: is the overlay applied?"


def impersonate(api: ApiClient, headers: list[tuple[str, str]]) -> ApiClient:
    """Send ``headers`` with every request of ``api``: through its REST client, since the
    generated API functions keep one value a header and the groups are several."""
    from multidict import CIMultiDict

    rest: Any = api.rest_client  # the library's, untyped
    request = rest.request

    async def impersonating(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        merged: CIMultiDict[str] = CIMultiDict(kwargs.pop("headers", None) or {})
        for name, value in headers:
            merged.add(name, value)
        return await request(method, url, *args, headers=merged, **kwargs)

    rest.request = impersonating
    return api


async def answer_of(call: Awaitable[Any]) -> str:
    """Who answered a request how: allowed, or who denied it (RBAC, a policy, a webhook)."""
    from drain_guard.kube.call import KubeError

    try:
        await call
    except KubeError as exc:
        return _denial(exc)
    return ALLOWED


def _denial(exc: KubeError) -> str:
    policy = POLICY_DENIAL.search(exc.reason)
    if policy:
        return f"denied: {policy.group(1)}"
    webhook = WEBHOOK_DENIAL.search(exc.reason)
    if webhook:
        return f"denied: webhook {webhook.group(1)}"
    if exc.status == 403:
        return RBAC
    if exc.status == 404:  # the authorizer let it through; the object is not there
        return ALLOWED
    return f"error {exc.status}: {exc.reason}"


def api_call(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    from drain_guard.kube.call import call_api

    return call_api(fn, *args, **kwargs)


def watch_call(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Awaitable[None]:
    from drain_guard.kube.call import watch_answer

    return watch_answer(fn, *args, **kwargs)


def made(answer: str) -> tuple[Answer, str]:
    return answer, ""


async def node_annotations(probe: Probe, node: str) -> dict[str, str]:
    found = await probe.admin.get_node(node)
    return dict(found.annotations) if found else {}


async def patch_as_agent(
    probe: Probe, node: str, body: Any, content_type: str = MERGE_PATCH
) -> str:
    return await answer_of(
        api_call(probe.agent.core.patch_node, node, body, dry_run="All", _content_type=content_type)
    )


def unique_name(prefix: str) -> str:
    return f"drain-guard-preflight-{prefix}-{uuid.uuid4().hex[:8]}"
