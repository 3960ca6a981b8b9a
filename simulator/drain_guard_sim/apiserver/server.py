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
write log, watchers); this module serves HTTP over them: authentication, faults and the verbs.

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
import base64
import builtins
import contextlib
import hashlib
import logging
import random
import secrets
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from drain_guard_sim.apiserver import (
    errors,
    eviction,
    labels,
    nodeauth,
    requestinfo,
    watchstream,
)
from drain_guard_sim.apiserver.authn import (
    ANONYMOUS,
    SELF_SUBJECT_REVIEW_PATH,
    SELF_SUBJECT_REVIEWS,
    User,
    peer_certificate,
    self_subject_review,
)
from drain_guard_sim.apiserver.authz import Rbac, authorized
from drain_guard_sim.apiserver.discovery import discovery
from drain_guard_sim.apiserver.errors import ApiError
from drain_guard_sim.apiserver.faults import FaultKind, Faults
from drain_guard_sim.apiserver.fieldselectors import parse_field_selector, parse_labels
from drain_guard_sim.apiserver.identities import ADMIN
from drain_guard_sim.apiserver.patching import APPLY_PATCH, PATCH_TYPES
from drain_guard_sim.apiserver.requestinfo import Target, json_response
from drain_guard_sim.apiserver.resources import (
    ALL_VERBS,
    RESOURCES,
    ResourceType,
)
from drain_guard_sim.apiserver.store import Store
from drain_guard_sim.apiserver.subresources import (
    serve_eviction,
    serve_token_request,
    with_requester,
)
from drain_guard_sim.apiserver.tables import to_table
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.apiserver.watchcache import Watcher
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
T = TypeVar("T")
log = logging.getLogger(__name__)


class SimApiServer:
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

    # --- identity ---

    def add_user(
        self, name: str, token: str | None = None, extra: Mapping[str, Any] | None = None
    ) -> str:
        """Register a user (or replace its token); returns the bearer token."""
        return self._register(User(name, token or secrets.token_urlsafe(24), dict(extra or {})))

    def add_node_user(self, node: str) -> str:
        """Register node ``node``'s identity (``system:node:<node>``, group ``system:nodes``,
        as the kubelet's client certificate carries); returns its bearer token. Its requests
        go through the Node authorizer and NodeRestriction (``nodeauth``)."""
        groups = (nodeauth.NODES_GROUP, "system:authenticated")
        name = nodeauth.NODE_USER_PREFIX + node
        return self._register(User(name, secrets.token_urlsafe(24), {}, groups))

    def _register(self, user: User) -> str:
        """Know ``user`` by its name and its token (the name's former token no longer
        authenticates); returns the token."""
        old = self._users.get(user.name)
        if old is not None:
            self._users_by_token.pop(old.token, None)
        self._users[user.name] = user
        self._users_by_token[user.token] = user
        return user.token

    def client_certificate(self, user: str, groups: Iterable[str] = ()) -> bytes:
        """A client certificate for ``user`` in ``groups`` and its key (one PEM, as the
        kubelet's ``kubelet-client-*.pem``), signed by the CA the server trusts (needs
        ``tls``). A node's: ``client_certificate("system:node:N", ["system:nodes"])``."""
        if self.tls is None:
            raise ValueError("client certificates need a TLS server (SimApiServer(tls=...))")
        return self.tls.client_certificate(user, tuple(groups))

    def refuse_certificate(self, pem: bytes) -> None:
        """Answer every further request made with this certificate (the first in ``pem``) 401,
        as kube-apiserver does once it has expired: its handshake asks for a client
        certificate without verifying it, and its x509 authenticator verifies the chain at the
        current time on each request. (Python's TLS verifies at the handshake, so a really
        expired certificate would fail there instead: hence this.) Connections stay open."""
        der = x509.load_pem_x509_certificate(pem).public_bytes(_DER)
        self._refused_certificates.add(hashlib.sha256(der).digest())

    def restrict(self, user: str, rbac: Rbac) -> None:
        """Authorize ``user``'s requests by ``rbac`` (as RBAC would by the roles bound to it):
        a request it does not allow gets RBAC's 403, whatever else the user may do."""
        self._rbac[user] = rbac

    def _node_of(self, user: str) -> str | None:
        known = self._users.get(user)
        return None if known is None else nodeauth.node_name_of(known.name, known.groups)

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

    def add_token(self, name: str, extra: Mapping[str, Any]) -> str:
        """Another bearer token for ``name`` with its own extra claims, as node-bound
        ServiceAccount tokens are: one ServiceAccount, one token per node."""
        user = User(name, secrets.token_urlsafe(24), dict(extra))
        self._users_by_token[user.token] = user
        return user.token

    def token(self, user: str = ADMIN) -> str:
        if user not in self._users:
            self.add_user(user)
        return self._users[user].token

    def kubeconfig(
        self,
        user: str = ADMIN,
        path: str | Path | None = None,
        token: str | None = None,
        token_file: Path | None = None,
    ) -> Path:
        """Write a kubeconfig for ``user`` (registered on the fly if new), with its token or
        the given one (from ``add_token``); returns its path. With ``token_file`` the token is
        written there and the kubeconfig names the file (``tokenFile``), as a kubeconfig for a
        rotated token does."""
        token = token or self.token(user)
        if path is None:
            if self._tmpdir is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="simapi-")
            safe = user.replace(":", "_").replace("/", "_")
            path = Path(self._tmpdir.name) / f"kubeconfig-{safe}"
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        credentials: dict[str, str] = {"token": token}
        if token_file is not None:
            token_file.write_text(token)
            token_file.chmod(0o600)
            credentials = {"tokenFile": str(token_file)}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "sim", "cluster": self._cluster_entry()}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [
                {
                    "name": f"{user}@sim",
                    "context": {"cluster": "sim", "user": user, "namespace": "default"},
                }
            ],
            "current-context": f"{user}@sim",
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def _cluster_entry(self) -> JsonObj:
        if self.tls is None:
            return {"server": self.url}
        ca = base64.b64encode(self.tls.ca_file.read_bytes()).decode()
        return {"server": self.url, "certificate-authority-data": ca}

    def api_client(self, user: str = ADMIN) -> Any:
        """A kubernetes_asyncio ``ApiClient`` for ``user`` (close it, or ``async with`` it)."""
        from kubernetes_asyncio.client import ApiClient, Configuration

        config = Configuration(host=self.url)
        if self.tls is not None:
            config.ssl_ca_cert = str(self.tls.ca_file)
        config.api_key = {"BearerToken": self.token(user)}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        return ApiClient(configuration=config)

    # --- the in-process API (no HTTP, same semantics) ---

    def create(
        self,
        resource: str,
        obj: JsonObj,
        namespace: str | None = None,
        *,
        user: str = ADMIN,
        keep_status: bool = True,
    ) -> JsonObj:
        return self.store.create(resource, obj, namespace, user=user, keep_status=keep_status)

    def get(self, resource: str, name: str, namespace: str | None = None) -> JsonObj:
        return self.store.get(resource, name, namespace)

    def try_get(self, resource: str, name: str, namespace: str | None = None) -> JsonObj | None:
        return self.store.try_get(resource, name, namespace)

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[JsonObj]:
        return self.store.list(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        )

    def update(
        self,
        resource: str,
        obj: JsonObj,
        namespace: str | None = None,
        *,
        user: str = ADMIN,
        subresource: str = "",
    ) -> JsonObj:
        return self.store.update(resource, obj, namespace, user=user, subresource=subresource)

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "strategic",
        user: str = ADMIN,
        subresource: str = "",
    ) -> JsonObj:
        return self.store.patch(
            resource,
            name,
            patch,
            namespace,
            patch_type=patch_type,
            user=user,
            subresource=subresource,
        )

    def delete(
        self, resource: str, name: str, namespace: str | None = None, *, user: str = ADMIN
    ) -> JsonObj:
        return self.store.delete(resource, name, namespace, user=user)

    def evict(self, name: str, namespace: str | None = None, *, user: str = ADMIN) -> JsonObj:
        return eviction.evict(self.store, name, namespace, user=user)

    async def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> T:
        return await self.store.wait_for(predicate, timeout)

    async def wait_for_write(
        self,
        match: Callable[[WriteRecord], bool],
        *,
        since: int = 0,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> WriteRecord:
        return await self.store.wait_for_write(match, since=since, timeout=timeout)

    @property
    def write_log(self) -> builtins.list[WriteRecord]:
        return self.store.write_log

    def writes(self, resource: str | None = None, **filters: Any) -> builtins.list[WriteRecord]:
        return self.store.writes(resource, **filters)

    @property
    def resource_version(self) -> int:
        return self.store.resource_version

    # --- faults and controls ---

    def compact(self) -> int:
        """Forget the retained watch window: a watch from an older resourceVersion gets 410."""
        return self.store.compact()

    def cut_watches(
        self, *, abort: bool = False, resource: str | None = None, user: str | None = None
    ) -> int:
        """End every open watch stream now; ``abort`` breaks the connection instead."""
        return self.store.cut_watches(abort=abort, resource=resource, user=user)

    def freeze_watches(self, *, resource: str | None = None, user: str | None = None) -> int:
        """Silence open watch streams for good, their connections open (half-open)."""
        return self.store.freeze_watches(resource=resource, user=user)

    @property
    def open_watches(self) -> int:
        return len(self.store.watchers)

    def request_count(
        self, *, user: str | None = None, verb: str | None = None, resource: str | None = None
    ) -> int:
        return sum(
            n
            for (u, v, r), n in self.requests.items()
            if (user is None or u == user)
            and (verb is None or v == verb)
            and (resource is None or r == resource)
        )

    # --- HTTP ---

    def _authenticate(self, request: web.Request) -> User:
        # kube-apiserver's authenticators in order: the x509 one, then the bearer token's.
        by_certificate = self._certificate_user(request)
        if by_certificate is not None:
            return by_certificate
        header = request.headers.get("Authorization", "")
        if not header and peer_certificate(request) is not None:
            raise errors.unauthorized()  # a refused certificate, and nothing else
        if not header and self.anonymous_reads:
            return ANONYMOUS
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise errors.unauthorized()
        user = self._users_by_token.get(token.strip())
        if user is None:
            raise errors.unauthorized()
        return user

    def _certificate_user(self, request: web.Request) -> User | None:
        """The user a client certificate names, as the x509 authenticator's CommonName
        conversion does (CN: the user, each O: a group); None for none, or a refused one."""
        der = peer_certificate(request)
        if der is None or hashlib.sha256(der).digest() in self._refused_certificates:
            return None
        subject = x509.load_der_x509_certificate(der).subject
        names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        if not names:
            return None
        name = str(names[0].value)
        orgs = [str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        groups = (*orgs, "system:authenticated")
        known = self._users.get(name)
        if known is None or known.groups != groups:
            # Known by name from now on (a node's: the Node authorizer and NodeRestriction).
            known = User(name, known.token if known else "", {}, groups)
            self._users[name] = known
        return known

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

    def _list(self, request: web.Request, target: Target, user: str) -> web.Response:
        rt = target.rt
        store = self.store
        query = request.query
        selected = parse_labels(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector", ""), rt)
        at = None
        if query.get("resourceVersionMatch") == "Exact":
            at = requestinfo.resource_version(query.get("resourceVersion", ""))
        items = store.list(
            rt, target.namespace, label_selector=selected, field_selector=fields, at=at
        )
        rv = store.resource_version if at is None else at
        metadata: JsonObj = {"resourceVersion": str(rv)}
        cont = query.get("continue")
        if cont:
            cont_rv, ns, name = store.decode_continue(cont)
            rv = cont_rv
            metadata["resourceVersion"] = str(cont_rv)
            items = [
                i
                for i in items
                if (i["metadata"].get("namespace", ""), i["metadata"]["name"]) > (ns, name)
            ]
        limit_text = query.get("limit")
        if limit_text:
            try:
                limit = int(limit_text)
            except ValueError:
                raise errors.bad_request(f"invalid limit {limit_text!r}") from None
            if 0 < limit < len(items):
                last = items[limit - 1]["metadata"]
                metadata["continue"] = store.encode_continue(
                    rv, last.get("namespace", ""), last["name"]
                )
                metadata["remainingItemCount"] = len(items) - limit
                items = items[:limit]
        response = self._maybe_table(request, rt, items, single=False, metadata=metadata)
        self._count_served(
            user, requestinfo.resource_label(target), items, response.content_length or 0
        )
        return response

    def _count_served(self, user: str, resource: str, objs: Iterable[JsonObj], size: int) -> None:
        n = 0
        for obj in objs:
            n += 1
            for hook in self.serve_hooks:
                hook(user, resource, obj)
        self.served[(user, resource)] += n
        self.served_bytes[(user, resource)] += size

    def _maybe_table(
        self,
        request: web.Request,
        rt: ResourceType,
        items: builtins.list[JsonObj],
        *,
        single: bool,
        metadata: JsonObj | None = None,
    ) -> web.Response:
        accept = request.headers.get("Accept", "")
        if "as=Table" in accept:
            include = request.query.get("includeObject", "Metadata")
            table = to_table(rt, items, include, self.store.clock())
            table["metadata"] = dict(
                metadata or {"resourceVersion": str(self.store.resource_version)}
            )
            if single:
                table["metadata"] = {"resourceVersion": items[0]["metadata"]["resourceVersion"]}
            return json_response(table)
        if single:
            return json_response(items[0])
        return json_response(
            {
                "kind": f"{rt.kind}List",
                "apiVersion": rt.api_version,
                "metadata": metadata or {"resourceVersion": str(self.store.resource_version)},
                "items": items,
            }
        )

    # --- watch ---

    async def _watch(self, request: web.Request, target: Target, user: str) -> web.StreamResponse:
        rt = target.rt
        query = request.query
        rv = query.get("resourceVersion")
        bookmarks = requestinfo.parse_bool("allowWatchBookmarks", query.get("allowWatchBookmarks"))
        send_initial = requestinfo.parse_bool("sendInitialEvents", query.get("sendInitialEvents"))
        timeout_text = query.get("timeoutSeconds")
        if timeout_text:
            try:
                timeout = float(int(timeout_text))
            except ValueError:
                raise errors.bad_request(f"invalid timeoutSeconds {timeout_text!r}") from None
        elif self.watch_timeout is not None:
            timeout = self.watch_timeout
        else:
            timeout = 1800.0 * (1.0 + self._rng.random())
        selected: labels.Selector = parse_labels(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector", ""), rt)
        resource = requestinfo.resource_label(target)
        expired: ApiError | None = None
        watcher: Watcher | None = None
        if rv not in (None, "", "0") and self.faults.fire(
            FaultKind.WATCH_EXPIRED, user, "watch", resource
        ):
            expired = errors.expired(
                f"too old resource version: {rv} ({self.store.resource_version})"
            )
        else:
            try:
                watcher = self.store.watch(
                    rt,
                    target.namespace,
                    resource_version=None if send_initial else rv,
                    label_selector=selected,
                    field_selector=fields,
                    name=target.name,
                    user=user,
                )
            except ApiError as err:
                if err.code != 410:
                    raise
                expired = err

        def count(obj: JsonObj | None, size: int) -> None:
            if obj is None:  # the bookmarks' bytes
                self.served_bytes[(user, resource)] += size
            else:
                self._count_served(user, resource, (obj,), size)

        return await watchstream.stream(
            request,
            self.store,
            rt,
            watcher,
            expired,
            timeout=timeout,
            bookmark_interval=self.bookmark_interval,
            bookmarks=bookmarks,
            send_initial=send_initial,
            count=count,
        )


@contextlib.asynccontextmanager
async def sim_apiserver(**kwargs: Any) -> AsyncIterator[SimApiServer]:
    """``async with sim_apiserver() as api:`` — the same as ``async with SimApiServer()``."""
    api = SimApiServer(**kwargs)
    await api.start()
    try:
        yield api
    finally:
        await api.stop()
