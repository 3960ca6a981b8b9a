"""The simulated API server's users: registering them (tokens, node identities, client
certificates, RBAC restrictions), the kubeconfigs and clients that act as them, and
authenticating a request (the x509 authenticator, then the bearer token's)."""

from __future__ import annotations

import base64
import hashlib
import secrets
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from drain_guard_sim.apiserver import errors, nodeauth
from drain_guard_sim.apiserver.authn import ANONYMOUS, User, peer_certificate
from drain_guard_sim.apiserver.authz import Rbac
from drain_guard_sim.apiserver.identities import ADMIN
from drain_guard_sim.apiserver.tls import ServingCert

JsonObj = dict[str, Any]
_DER = serialization.Encoding.DER


class Users:
    """The users' part of :class:`~drain_guard_sim.apiserver.server.SimApiServer` (which holds
    the state)."""

    tls: ServingCert | None
    anonymous_reads: bool
    _users_by_token: dict[str, User]
    _users: dict[str, User]
    _rbac: dict[str, Rbac]
    _refused_certificates: set[bytes]
    _tmpdir: tempfile.TemporaryDirectory[str] | None

    if TYPE_CHECKING:

        @property
        def url(self) -> str: ...

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
