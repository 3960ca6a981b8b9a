"""Helpers for the tests on the real control plane (the session's ``control_plane`` fixture):
a client for a kubeconfig, a namespace of the test's own, and docs/rights.md held to what the
API server answered.

Every test on it shares one etcd, so each uses its own namespace (``own_namespace``) and Node
names (``unique``): nothing a test leaves behind can meet another test's objects.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard.confine.rights import expected
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.deploy.tools import REPO

RIGHTS = REPO / "docs" / "rights.md"
WAIT = 30.0  # seconds: an upper bound for a controller's reaction on a loaded machine

_counter = itertools.count()


def assert_rights_table(results: Mapping[str, str], install: str) -> None:
    """docs/rights.md's rows of ``install`` are what the API server answered: a row answered
    otherwise fails, and so does a row no request made."""
    table = expected(RIGHTS.read_text(), install)
    wrong = {
        name: f"table says {table.get(name, 'nothing')!r}, the API server {results[name]!r}"
        for name in results
        if table.get(name) != results[name]
    }
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())
    assert set(table) == set(results), f"rows no test makes: {set(table) - set(results)}"


def unique(prefix: str) -> str:
    """A name no other test of this run uses (the pid keeps parallel workers apart)."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}"


@asynccontextmanager
async def api_client(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio client loaded from ``kubeconfig``, as the agent loads its own."""
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api:
        yield api


async def own_namespace(admin: client.ApiClient, prefix: str = "test") -> str:
    """Create a namespace and wait for its ``default`` service account, which the service
    account controller makes and without which the ServiceAccount admission plugin refuses
    pods."""
    core = client.CoreV1Api(admin)
    name = unique(prefix)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    async with asyncio.timeout(WAIT):
        while True:
            try:
                await core.read_namespaced_service_account("default", name)
                return name
            except ApiException as error:
                if error.status != 404:
                    raise
            await asyncio.sleep(0.1)


async def bound_kubeconfig(
    admin: client.ApiClient,
    plane: ControlPlane,
    path: Path,
    namespace: str,
    account: str,
    pod: tuple[str, str] | None,
    *,
    expiration_seconds: int = 3600,
) -> Path:
    """A token of ``account`` bound to ``pod`` (as the kubelet projects it), or bound to
    nothing (a TokenRequest's plain token: no pod extras)."""
    bound = (
        None
        if pod is None
        else client.V1BoundObjectReference(api_version="v1", kind="Pod", name=pod[0], uid=pod[1])
    )
    spec = client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=expiration_seconds, bound_object_ref=bound
    )
    token = await client.CoreV1Api(admin).create_namespaced_service_account_token(
        account, namespace, client.AuthenticationV1TokenRequest(spec=spec)
    )
    return plane.token_kubeconfig(token.status.token, path)
