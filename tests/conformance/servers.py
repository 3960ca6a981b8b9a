"""The two API servers the conformance suite asks the same questions: the simulator's and the
real control plane's, behind one small interface that only hands out kubeconfigs.

Everything a test learns, it learns as a client (``tests.conformance.client``) with one of
these kubeconfigs: the suite never reads the simulator's store, so what passes on one server
passes on the other for the same reasons.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from drain_guard_sim.actors.gc import GC_USER, GarbageCollector
from drain_guard_sim.actors.mco import Timings
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.apiserver.crds import custom_resource_definitions
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from drain_guard_sim.apiserver.tls import ServingCert
from tests.conformance.client import Client


class Server(Protocol):
    """An API server as the suite sees it."""

    name: str  # "sim" or "real": test ids, and the few documented differences

    @property
    def admin_kubeconfig(self) -> Path: ...

    def user_kubeconfig(self, user: str, groups: Sequence[str], path: Path) -> Path:
        """A kubeconfig for a client-certificate user (CN ``user``, O ``groups``)."""
        ...

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig for a bearer token (a TokenRequest's)."""
        ...

    async def namespace_ready(self, admin: Client, name: str) -> None:
        """Wait until pods may be created in a new namespace (its ``default`` account)."""
        ...

    async def custom_resources(self, admin: Client) -> None:
        """Make the MCO's kinds served (drain_guard_sim.apiserver.crds), if they are not yet."""
        ...


class SimServer:
    """The simulator over TLS (client certificates work) with its garbage collector, the one
    controller of kube-controller-manager the simulator runs apart from the store."""

    name = "sim"

    def __init__(self, api: SimApiServer, directory: Path) -> None:
        self.api = api
        self._directory = directory

    @property
    def admin_kubeconfig(self) -> Path:
        return self.api.kubeconfig(ADMIN, self._directory / "admin.kubeconfig")

    def user_kubeconfig(self, user: str, groups: Sequence[str], path: Path) -> Path:
        pair = path.with_suffix(".pem")
        pair.write_bytes(self.api.client_certificate(user, groups))
        pair.chmod(0o600)
        config = yaml.safe_load(self.api.kubeconfig("unused", path).read_text())
        config["users"][0]["user"] = {"client-certificate": str(pair), "client-key": str(pair)}
        path.write_text(yaml.safe_dump(config))
        return path

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        return self.api.kubeconfig("token-user", path, token=token)

    async def namespace_ready(self, admin: Client, name: str) -> None:
        """At once: the simulator has no ServiceAccount admission to wait for."""

    async def custom_resources(self, admin: Client) -> None:
        """At once: the simulator serves them built in."""


#: The garbage collector's grant, as the real server's bootstrap policy has one
#: (``system:controller:generic-garbage-collector``) and the simulator has none of its own.
GC_ROLE: dict[str, Any] = {
    "metadata": {"name": "system:controller:generic-garbage-collector"},
    "rules": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "delete"]}
    ],
}


@contextlib.asynccontextmanager
async def sim_server(directory: Path) -> AsyncIterator[SimServer]:
    """The simulator with RBAC from its stored Roles, as the real server authorizes."""
    tls = ServingCert.generate(directory / "tls")
    async with SimApiServer(tls=tls, rbac=True) as api:
        api.create("clusterroles", GC_ROLE)
        api.create(
            "clusterrolebindings",
            {
                "metadata": {"name": GC_ROLE["metadata"]["name"]},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": GC_ROLE["metadata"]["name"]},
                "subjects": [{"kind": "User", "name": GC_USER}],
            },
        )  # fmt: skip
        gc = GarbageCollector(
            api.kubeconfig(GC_USER, directory / "gc.kubeconfig"), Timeline(), Timings()
        )
        await gc.start()
        try:
            yield SimServer(api, directory)
        finally:
            await gc.stop()


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


class RealServer:
    """kube-apiserver, kube-controller-manager and etcd of the session (``control_plane``)."""

    name = "real"

    def __init__(self, control_plane: Any) -> None:
        self._plane = control_plane

    @property
    def admin_kubeconfig(self) -> Path:
        path: Path = self._plane.admin_kubeconfig
        return path

    def user_kubeconfig(self, user: str, groups: Sequence[str], path: Path) -> Path:
        written: Path = self._plane.user_kubeconfig(user, list(groups), path)
        return written

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        written: Path = self._plane.token_kubeconfig(token, path)
        return written

    async def namespace_ready(self, admin: Client, name: str) -> None:
        """ServiceAccount admission refuses pods until the controller made ``default``."""
        await admin.wait_for(f"/api/v1/namespaces/{name}/serviceaccounts/default", bool)

    async def custom_resources(self, admin: Client) -> None:
        """Create the project's CRDs (once per session: a 409 means done) and wait until
        each is Established."""
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for crd in custom_resource_definitions():
            answer = await admin.post(path, crd)
            assert answer.status in (201, 409), answer.body
            await admin.wait_for(f"{path}/{crd['metadata']['name']}", _established)
