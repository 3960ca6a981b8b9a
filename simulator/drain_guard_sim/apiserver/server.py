"""A Kubernetes API server simulator that the real kubernetes_asyncio client and kubectl use.

``SimApiServer`` serves the resources of ``drain_guard_sim.apiserver.resources`` over plain HTTP on
127.0.0.1 (an ephemeral port) with the semantics of a real kube-apiserver: one
resourceVersion counter, GET/LIST/WATCH (from a resourceVersion, bookmarks,
``timeoutSeconds``, 410 for a compacted window), field and label selectors, JSON Patch /
merge patch / strategic merge patch, 409 on stale resourceVersions, ``Status`` error bodies,
the eviction subresource honouring PodDisruptionBudgets (whose status the simulator computes
itself), bearer-token users and, over TLS, client-certificate users (``client_certificate``,
``refuse_certificate``), a write log, request counters and fault injection.

Known differences from a real server (deliberate, for tests; measured against one by
tests/conformance, listed in docs/simulator-conformance.md): deletion is immediate (no
finalizers, no graceful pod deletion); namespaces need not exist; no authorization but for
anonymous users, node identities (``add_node_user``: the Node authorizer's static rules and
NodeRestriction, ``nodeauth``), users given an RBAC check (``restrict``) and,
with ``rbac=True``, everyone but the admins by the stored Roles, so without it any other
service account may do anything; no other admission (no ValidatingAdmissionPolicy),
defaulting or schema validation beyond what is listed; a LIST at an exact resourceVersion
(``resourceVersionMatch=Exact``) is served from the retained history (410 before it, as after
etcd's compaction), and ``compact()`` makes watches from before it 410 too (a real watch
cache keeps its own window); a watch from a resourceVersion newer than the current one just
waits (a real server answers 504 after 3 s); ``kubectl get -w`` (Table watch) is not served;
PDB ``expectedPods`` counts the selected pods instead of asking their controllers' scale; no
server-side apply. client-go (kubectl) sends no credentials to an ``http://`` server, so
requests without credentials are ``system:anonymous`` and may only read.

Its parts, one concern each: ``requestinfo`` (what a request's path, method, query and body
ask), ``authn`` (users, client certificates, who-am-I), ``authz`` (the Node, a test's and RBAC
authorizers), ``discovery``, ``subresources`` (eviction, TokenRequest, a CSR's requester),
``watchstream`` (a watch's events and bookmarks), ``store`` (objects, resourceVersions, the
write log, watchers), ``users`` (registering and authenticating users, kubeconfigs),
``inprocess`` (the tests' API without HTTP), ``listwatch`` (LIST and WATCH over HTTP); this
module serves HTTP over them: faults and the verbs.

Use::

    async with SimApiServer() as api:
        token = api.add_user("agent")
        path = api.kubeconfig("agent", tmp_path / "kubeconfig")
        api.create("nodes", {"metadata": {"name": "worker-0"}})   # in-process, no HTTP
        async with api.api_client("agent") as client:             # kubernetes_asyncio
            ...
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import random
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives import serialization

from drain_guard_sim.apiserver import errors, nodeauth, requestinfo
from drain_guard_sim.apiserver.authn import (
    ANONYMOUS,
    SELF_SUBJECT_REVIEW_PATH,
    SELF_SUBJECT_REVIEWS,
    User,
    self_subject_review,
)
from drain_guard_sim.apiserver.authz import Rbac, authorized
from drain_guard_sim.apiserver.discovery import discovery
from drain_guard_sim.apiserver.errors import ApiError
from drain_guard_sim.apiserver.faults import FaultKind, Faults
from drain_guard_sim.apiserver.identities import ADMIN
from drain_guard_sim.apiserver.inprocess import InProcessApi
from drain_guard_sim.apiserver.listwatch import ListWatch
from drain_guard_sim.apiserver.patching import APPLY_PATCH, PATCH_TYPES
from drain_guard_sim.apiserver.requestinfo import Target, json_response
from drain_guard_sim.apiserver.resources import ALL_VERBS, RESOURCES, ResourceType
from drain_guard_sim.apiserver.store import Store
from drain_guard_sim.apiserver.subresources import (
    serve_eviction,
    serve_token_request,
    with_requester,
)
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.apiserver.users import Users
from drain_guard_sim.apiserver.writelog import WriteRecord

__all__ = [
    "ADMIN",
    "ApiError",
    "SimApiServer",
    "User",
    "WriteRecord",
]

JsonObj = dict[str, Any]
_DER = serialization.Encoding.DER
log = logging.getLogger(__name__)


class SimApiServer(Users, InProcessApi, ListWatch):
    """The simulated API server: an aiohttp app over a ``Store``.

    Parameters:
        bookmark_interval: seconds between BOOKMARK events on watches that allow them
            (a real server: about 60 s).
        watch_timeout: server-side timeout for watches that give no ``timeoutSeconds``
            (None: 1800-3600 s, as ``--min-request-timeout`` does).
        history: watch events retained (older resourceVersions get 410 Expired).
        seed: seeds the fault-injection RNG.
        anonymous_reads: a request without credentials is ``system:anonymous`` and may
            only read (get, list, watch, discovery); writes get RBAC's 403. A real server
            with ``--anonymous-auth`` and such a ClusterRole does the same. kubectl needs
            it: client-go sends no credentials to an ``http://`` server. An unknown token
            is always a 401.
        tls: serve HTTPS with this certificate (kubeconfigs then carry its CA), so that
            kubectl sends its token and may write (``drain-guard-sim serve``).
        rbac: authorize every user but ``system:admin``, ``system:masters`` and node
            identities by the Roles and bindings stored in the simulator
            (``rbac``), as a real server with ``--authorization-mode=Node,RBAC``
            does; without it, only users given ``restrict`` are checked.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 60.0,
        watch_timeout: float | None = None,
        history: int = 10_000,
        seed: int = 0,
        resources: tuple[ResourceType, ...] = RESOURCES,
        clock: Callable[[], datetime] | None = None,
        anonymous_reads: bool = True,
        tls: ServingCert | None = None,
        rbac: bool = False,
    ) -> None:
        self.host = host
        self.rbac = rbac
        self.tls = tls
        self.anonymous_reads = anonymous_reads
        self._port = port
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.store = Store(resources, history=history, clock=clock)
        self.faults = Faults(seed)
        self._rng = random.Random(seed)  # watch timeouts; separate from the faults' draws
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.request_log: builtins.list[tuple[float, str, str, str, str, int]] = []
        # What each user was sent, by (user, resource): objects in list responses and watch
        # events (bookmarks not counted), and bytes of those bodies and streams (bookmarks in).
        self.served: Counter[tuple[str, str]] = Counter()
        self.served_bytes: Counter[tuple[str, str]] = Counter()
        #: Called with (user, resource, object) for every object served in a list or a watch.
        self.serve_hooks: builtins.list[Callable[[str, str, JsonObj], None]] = []
        self._users_by_token: dict[str, User] = {}
        self._users: dict[str, User] = {}
        self._rbac: dict[str, Rbac] = {}
        self._refused_certificates: set[bytes] = set()  # SHA-256 of their DER
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self.add_user(ADMIN)
        self.store.admission = self._admit

    # --- lifecycle ---

    async def start(self) -> SimApiServer:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0
        )
        await self._runner.setup()
        self._site = web.TCPSite(
            self._runner,
            self.host,
            self._port,
            ssl_context=None if self.tls is None else self.tls.server_context(),
        )
        await self._site.start()
        server = self._site._server
        assert server is not None
        sockets = getattr(server, "sockets", None)
        assert sockets
        self._port = sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self.store.cut_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    async def __aenter__(self) -> SimApiServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{self.host}:{self._port}"

    def _admit(
        self,
        operation: str,
        rt: ResourceType,
        subresource: str,
        user: str,
        name: str,
        old: JsonObj | None,
        new: JsonObj | None,
    ) -> None:
        """NodeRestriction, for requests of node identities (others pass)."""
        node = self._node_of(user)
        if node is None:
            return
        why = nodeauth.admit(node, operation, rt.key, subresource, name, old, new)
        if why is not None:
            raise errors.forbidden(rt, name, why)

    # --- HTTP ---

    def _error(self, err: ApiError) -> web.Response:
        return json_response(err.status, err.code, err.headers)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        path = request.path
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        user_name = "system:anonymous"
        verb = request.method.lower()
        resource = ""
        status = 500
        try:
            user = self._authenticate(request)
            user_name = user.name
            review = request.method == "POST" and path == SELF_SUBJECT_REVIEW_PATH
            target = None if review else requestinfo.resolve(self.store.index, path)
            verb = "create" if review else requestinfo.verb_of(request, target)
            resource = SELF_SUBJECT_REVIEWS if review else requestinfo.resource_label(target)
            if review and user is ANONYMOUS:
                why = f'User "{user.name}" cannot create resource "{resource}" in API group'
                raise errors.forbidden(None, "", f'{why} "authentication.k8s.io"')
            if user is ANONYMOUS and target is not None and verb not in ("get", "list", "watch"):
                raise errors.rbac_forbidden(
                    target.rt,
                    target.name or "",
                    user.name,
                    verb,
                    target.namespace,
                    target.subresource,
                )
            roles = self.store if self.rbac else None
            if target is not None and not authorized(user, target, verb, self._rbac, roles):
                raise errors.rbac_forbidden(
                    target.rt,
                    target.name or "",
                    user.name,
                    verb,
                    target.namespace,
                    target.subresource,
                )
            self.requests[(user_name, verb, resource)] += 1
            delay = sum(
                f.latency for f in self.faults.fire(FaultKind.LATENCY, user_name, verb, resource)
            )
            if delay > 0:
                await asyncio.sleep(delay)
            fired = self.faults.fire(FaultKind.ERROR, user_name, verb, resource)
            if fired:
                raise fired[0].error()
            response: web.StreamResponse
            if review:
                response = self_subject_review(user)
            elif target is None:
                response = discovery(self.store.index, f"{self.host}:{self.port}", path)
            else:
                response = await self._serve(request, target, verb, user_name)
            status = response.status
            return response
        except ApiError as err:
            status = err.code
            return self._error(err)
        except (asyncio.CancelledError, ConnectionResetError):
            status = 499
            raise
        except Exception as err:  # a simulator bug: answer as a real server's panic handler
            log.exception("simulated API server: %s %s failed", request.method, path)
            status = 500
            return self._error(errors.internal_error(f"{type(err).__name__}: {err}"))
        finally:
            self.request_log.append((started, user_name, verb, resource, path, status))
            self.store.notify()

    # --- resources ---

    async def _serve(
        self, request: web.Request, target: Target, verb: str, user: str
    ) -> web.StreamResponse:
        rt = target.rt
        store = self.store
        query = request.query
        dry_run = requestinfo.dry_run(query, verb)
        if verb not in requestinfo.SUBRESOURCE_VERBS.get(target.subresource, ALL_VERBS):
            raise errors.method_not_allowed(request.method)
        if verb in ("watch", "list"):
            requestinfo.check_list_options(query, watch=verb == "watch")
        if verb == "watch":
            return await self._watch(request, target, user)
        if verb == "list":
            return self._list(request, target, user)
        if verb == "get":
            assert target.name is not None
            obj = store.get(rt, target.name, target.namespace)
            if target.subresource not in ("", "status"):
                raise errors.method_not_allowed("GET")
            return self._maybe_table(request, rt, [obj], single=True)
        body = await requestinfo.read_body(request)
        if verb == "create":
            if target.subresource == "eviction":
                return serve_eviction(self.store, target, body, user, dry_run)
            if target.subresource == "token":
                token_user, response = serve_token_request(self.store, target, body)
                self._users_by_token[token_user.token] = token_user
                return response
            if target.name is not None or (rt.namespaced and target.namespace is None):
                raise errors.method_not_allowed("POST")
            if not isinstance(body, dict):
                raise errors.bad_request("the body of the request must be an object")
            requestinfo.check_kind(rt, body)
            if rt.kind == "CertificateSigningRequest":
                body = with_requester(body, user, self._users.get(user))
            created = store.create(
                rt, body, target.namespace, user=user, keep_status=False, dry_run=dry_run
            )
            return json_response(created, 201)
        if verb == "update":
            assert target.name is not None
            if not isinstance(body, dict):
                raise errors.bad_request("the body of the request must be an object")
            requestinfo.check_kind(rt, body)
            updated = store.update(
                rt,
                body,
                target.namespace,
                name=target.name,
                user=user,
                subresource=target.subresource,
                dry_run=dry_run,
            )
            return json_response(updated)
        if verb == "patch":
            assert target.name is not None
            content_type = request.content_type
            if content_type not in PATCH_TYPES:
                accepted: tuple[str, ...] = (*PATCH_TYPES, APPLY_PATCH)
                if rt.custom:
                    accepted = tuple(a for a in accepted if "strategic" not in a)
                raise errors.unsupported_media_type(content_type, accepted)
            patched = store.patch(
                rt,
                target.name,
                body,
                target.namespace,
                patch_type=content_type,
                user=user,
                subresource=target.subresource,
                dry_run=dry_run,
            )
            return json_response(patched)
        if verb == "delete":
            assert target.name is not None
            options = body if isinstance(body, dict) else {}
            if "dryRun" in options and options["dryRun"] == ["All"]:
                dry_run = True
            preconditions = options.get("preconditions")
            deleted = store.delete(
                rt,
                target.name,
                target.namespace,
                user=user,
                preconditions=preconditions,
                dry_run=dry_run,
            )
            if rt.kind == "Pod" or rt.custom:
                return json_response(deleted)
            details: JsonObj = {"name": target.name}
            if rt.group:
                details["group"] = rt.group
            details["kind"] = rt.plural
            details["uid"] = deleted["metadata"]["uid"]
            return json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }
            )
        if verb == "deletecollection":
            deleted_items = store.delete_collection(
                rt,
                target.namespace,
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                user=user,
            )
            return json_response(
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(store.resource_version)},
                    "items": deleted_items,
                }
            )
        raise errors.method_not_allowed(request.method)


@contextlib.asynccontextmanager
async def sim_apiserver(**kwargs: Any) -> AsyncIterator[SimApiServer]:
    """``async with sim_apiserver() as api:`` — the same as ``async with SimApiServer()``."""
    api = SimApiServer(**kwargs)
    await api.start()
    try:
        yield api
    finally:
        await api.stop()
