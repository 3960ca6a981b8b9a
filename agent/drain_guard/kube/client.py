"""The few API calls the agent, the central shield and the CLI make."""

from __future__ import annotations

import asyncio
import enum
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drain_guard.core.nodes import NodeObj
from drain_guard.core.operations import Operation, Watched
from drain_guard.kube import kubeclient as k8s
from drain_guard.kube.call import (
    REQUEST_TIMEOUT,
    JsonObj,
    KubeError,
    call_api,
    call_api_within,
)
from drain_guard.kube.counters import Counters, NullCounters
from drain_guard.kube.credentials import ApiClient, load_api_client, load_socket_client
from drain_guard.kube.listwatch import (
    WATCH_TIMEOUT,
    ListWatch,
    NamedCache,
    ObjectsCache,
    WatchCache,
)

#: The longest an admission webhook may take on a Node write of the agent: the
#: ``timeoutSeconds`` of the openshift-4.15 overlay's entries (a test holds them to it).
ADMISSION_TIMEOUT = 5.0
#: A Node write unanswered this long is given up and retried on a fresh connection (the
#: loop's backoff). It must outlast every admission hop: kube-apiserver cancels a request
#: its client abandoned, webhook call and all, so a client that gave up before the webhook's
#: own timeout would never see the ``failurePolicy`` apply (a release behind a hung webhook
#: never landed with 2 s, issue 35). 3 s more than the webhook's bound cover the server's own
#: work around it (etcd's write, the webhook's connection). The retry is safe: the write's
#: ``test`` operations refuse it if the first one landed meanwhile.
NODE_WRITE_TIMEOUT = ADMISSION_TIMEOUT + 3.0
JSON_PATCH = "application/json-patch+json"
#: MCO's MachineConfigPools: group, version, plural.
MCO_GROUP = "machineconfiguration.openshift.io"
POOLS = (MCO_GROUP, "v1", "machineconfigpools")
#: MCO's resources the noop-image guard reads (drain_guard.core.replacement).
MCO_WATCHED = (Watched.MACHINECONFIGPOOL, Watched.MACHINEOSBUILD, Watched.MACHINEOSCONFIG)


@dataclass(frozen=True)
class Applied:
    """A patch that was committed; ``node`` is the Node as the server returned it."""

    node: NodeObj


@dataclass(frozen=True)
class Conflict:
    """A compare-and-swap that lost (422 failed ``test``, or 409): re-read and decide again."""

    status: int
    message: str


PatchResult = Applied | Conflict


class WorkloadState(enum.Enum):
    ABSENT = "absent"
    DELETING = "deleting"
    PRESENT = "present"


class Kube:
    """The few API calls the agent and the CLI make, each with a timeout and raw JSON out."""

    def __init__(self, api: k8s.ApiClient, counters: Counters | None = None) -> None:
        self.api = api
        self.core = k8s.CoreV1Api(api)
        self.apps = k8s.AppsV1Api(api)
        self.policy = k8s.PolicyV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.counters: Counters = counters or NullCounters()
        #: Set when the client takes up other credentials (a 401 read them again).
        self.renewed = api.renewed if isinstance(api, ApiClient) else asyncio.Event()

    @classmethod
    async def connect(
        cls, kubeconfig: str | None, counters: Counters | None = None, socket: str | None = None
    ) -> Kube:
        """With ``socket``, every request goes through the node proxy there."""
        if socket is not None:
            return cls(await load_socket_client(socket, counters), counters)
        return cls(await load_api_client(kubeconfig, counters), counters)

    async def close(self) -> None:
        await self.api.close()

    async def call(
        self,
        operation: Operation,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        answers: tuple[int, ...] = (404,),
        request_timeout: float | None = None,
        **kwargs: Any,
    ) -> JsonObj:
        """:func:`call_api`, counted: the one way the agent and the central shield make a
        (non-watch) call. A success, or a status in ``answers`` (404 by default: absent), is
        API contact (``/readyz``, ``drain_guard_last_api_contact_timestamp_seconds``); any
        other failure counts in ``drain_guard_api_errors_total{operation}``."""
        timeout = REQUEST_TIMEOUT if request_timeout is None else request_timeout
        try:
            body = await call_api_within(timeout, fn, *args, **kwargs)
        except KubeError as exc:
            if exc.status in answers:
                self.counters.api_contact()
            else:
                self.counters.api_error(operation, exc.status)
            raise
        self.counters.api_contact()
        return body

    async def user_name(self) -> str:
        """The name the API server knows the caller by (``kubectl auth whoami``: a
        SelfSubjectReview), which ``drain-guard release`` records; never the kubeconfig's
        own name for its user. Not counted: the CLI's question, no program's operation."""
        # The CLI's alone: imported here, so that the agent never loads it (kubeclient).
        from kubernetes_asyncio.client.api.authentication_v1_api import AuthenticationV1Api

        body = await call_api(
            AuthenticationV1Api(self.api).create_self_subject_review,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        name = ((body.get("status") or {}).get("userInfo") or {}).get("username")
        if not isinstance(name, str) or not name:
            raise KubeError(0, "the SelfSubjectReview names no user")
        return name

    async def get_node(self, name: str) -> NodeObj | None:
        try:
            return NodeObj.from_dict(await self.call(Operation.NODE_GET, self.core.read_node, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list_nodes(self) -> list[NodeObj]:
        body = await self.call(Operation.NODE_LIST, self.core.list_node)
        return [NodeObj.from_dict(item) for item in body.get("items") or ()]

    async def patch_node_json(self, name: str, ops: Sequence[Mapping[str, Any]]) -> PatchResult:
        """Apply a JSON Patch; a failed ``test`` (422) or a 409 is a :class:`Conflict`."""
        try:
            body = await self.call(
                Operation.NODE_PATCH,
                self.core.patch_node,
                name,
                [dict(op) for op in ops],
                _content_type=JSON_PATCH,
                request_timeout=NODE_WRITE_TIMEOUT,
            )
        except KubeError as exc:
            if exc.status in (409, 422):
                return Conflict(exc.status, exc.reason)
            raise
        return Applied(NodeObj.from_dict(body))

    async def dry_run_patch_node(self, name: str, patch: Mapping[str, Any]) -> None:
        """A merge patch of Node ``name`` with ``dryRun=All``: authorization and admission
        run, nothing is stored. A denial (403) is not counted as an API error: the
        confinement self-check expects it."""
        await self.call(
            Operation.NODE_PATCH,
            self.core.patch_node,
            name,
            dict(patch),
            dry_run="All",
            _content_type="application/merge-patch+json",
            answers=(403, 404),
        )

    async def dry_run_token_request(self, namespace: str, account: str) -> None:
        """A TokenRequest for service account ``account`` with ``dryRun=All``. A denial (403)
        or an absent account (404) is an answer, not an API error: the confinement self-check
        asks it expecting a refusal."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 600},
        }
        await self.call(
            Operation.TOKEN_CREATE,
            self.core.create_namespaced_service_account_token,
            account,
            namespace,
            body,
            dry_run="All",
            answers=(403, 404),
        )

    async def other_node(self, name: str) -> str | None:
        """The name of some Node other than ``name`` (None on a single-node cluster)."""
        body = await self.call(
            Operation.NODE_LIST,
            self.core.list_node,
            field_selector=f"metadata.name!={name}",
            limit=1,
        )
        items = body.get("items") or ()
        return str(items[0]["metadata"]["name"]) if items else None

    async def pool_uid(self, name: str) -> str | None:
        """The uid of MachineConfigPool ``name``, None when there is none (404: a cluster
        without MCO, or the pool is gone)."""
        try:
            body = await self.call(
                Operation.MACHINECONFIGPOOL_GET, self.custom.get_cluster_custom_object, *POOLS, name
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return str((body.get("metadata") or {}).get("uid") or "") or None

    async def get_daemonset(self, namespace: str, name: str) -> JsonObj | None:
        try:
            return await self.call(
                Operation.DAEMONSET_GET, self.apps.read_namespaced_daemon_set, name, namespace
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def get_pod(self, namespace: str, name: str) -> JsonObj | None:
        try:
            return await self.call(
                Operation.POD_GET, self.core.read_namespaced_pod, name, namespace
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def get_deployment(self, namespace: str, name: str) -> JsonObj | None:
        try:
            return await self.call(
                Operation.DEPLOYMENT_GET, self.apps.read_namespaced_deployment, name, namespace
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def daemonset_state(self, namespace: str, name: str) -> WorkloadState:
        return _workload_state(await self.get_daemonset(namespace, name))

    async def deployment_state(self, namespace: str, name: str) -> WorkloadState:
        return _workload_state(await self.get_deployment(namespace, name))

    async def watch_node(
        self, name: str, cache: WatchCache, watch_timeout: int = WATCH_TIMEOUT
    ) -> None:
        """Keep ``cache.node`` current until cancelled."""
        await ListWatch(
            resource=Watched.NODE,
            list_fn=self.core.list_node,
            field_selector=f"metadata.name={name}",
            replace=cache.replace_node,
            apply=cache.apply_node,
            counters=self.counters,
            name=f"node {name}",
            watch_timeout=watch_timeout,
        ).run()

    async def watch_pods(
        self,
        node_name: str,
        cache: WatchCache,
        namespace: str | None,
        watch_timeout: int = WATCH_TIMEOUT,
        counters: Counters | None = None,
    ) -> None:
        """Keep ``cache.pods`` (the pods bound to ``node_name``, in ``namespace``, or in every
        namespace when None) current until cancelled: the agent's pod watch (and one per
        blocking-pod namespace it does not cover, reporting to ``counters``, a ``WatchGroup``
        member)."""
        where = f" in {namespace}" if namespace else ""
        await ListWatch(
            resource=Watched.POD,
            list_fn=self.core.list_pod_for_all_namespaces
            if namespace is None
            else functools.partial(self.core.list_namespaced_pod, namespace),
            field_selector=f"spec.nodeName={node_name}",
            replace=cache.replace_pods,
            apply=cache.apply_pod,
            counters=counters or self.counters,
            name=f"pods on node {node_name}{where}",
            watch_timeout=watch_timeout,
        ).run()

    async def watch_named(
        self,
        resource: Watched,
        namespace: str,
        name: str,
        cache: NamedCache,
        watch_timeout: int = WATCH_TIMEOUT,
        counters: Counters | None = None,
    ) -> None:
        """Keep ``cache`` (the one object ``namespace/name`` of ``resource``) current until
        cancelled: a list and watch by ``metadata.name``, which RBAC authorizes as a request
        for that name (a Role's ``resourceNames`` can limit it to that object)."""
        list_fns = {
            Watched.PODDISRUPTIONBUDGET: self.policy.list_namespaced_pod_disruption_budget,
        }
        await ListWatch(
            resource=resource,
            list_fn=functools.partial(list_fns[resource], namespace),
            field_selector=f"metadata.name={name}",
            replace=cache.replace,
            apply=cache.apply,
            counters=counters or self.counters,
            name=f"{resource} {namespace}/{name}",
            watch_timeout=watch_timeout,
        ).run()

    async def mco_versions(self) -> dict[Watched, str]:
        """The API version serving each of MCO's resources the noop-image guard reads (``v1``
        before ``v1alpha1``), from discovery: none on plain Kubernetes, pools alone on 4.15,
        MachineOSBuilds and MachineOSConfigs in ``v1alpha1`` on 4.16 to 4.18 before the
        backport and ``v1`` after. A group or version not served answers 404."""
        found: dict[Watched, str] = {}
        for version in ("v1", "v1alpha1"):
            try:
                body = await call_api(self.custom.get_api_resources, MCO_GROUP, version)
            except KubeError as exc:
                if exc.status == 404:
                    continue
                raise
            names = {r.get("name") for r in body.get("resources") or () if isinstance(r, dict)}
            for resource in MCO_WATCHED:
                if resource.plural in names:
                    found.setdefault(resource, version)
        return found

    async def watch_cluster(
        self,
        resource: Watched,
        version: str,
        cache: ObjectsCache,
        watch_timeout: int = WATCH_TIMEOUT,
        counters: Counters | None = None,
        name: str = "",
    ) -> None:
        """Keep ``cache`` (every object of MCO's cluster-scoped ``resource``, served in
        ``version``; with ``name``, that one object: a list and watch by ``metadata.name``)
        current until cancelled."""
        await ListWatch(
            resource=resource,
            list_fn=functools.partial(
                self.custom.list_cluster_custom_object, MCO_GROUP, version, resource.plural
            ),
            field_selector=f"metadata.name={name}" if name else "",
            replace=cache.replace,
            apply=cache.apply,
            counters=counters or self.counters,
            name=f"{resource.plural}.{version}",
            watch_timeout=watch_timeout,
        ).run()


def _workload_state(body: JsonObj | None) -> WorkloadState:
    if body is None:
        return WorkloadState.ABSENT
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return WorkloadState.DELETING
    return WorkloadState.PRESENT
