"""The fixture the agent's tests on the real control plane share: the admin, with the
namespaces every install expects (MCO's, where build pods run, and ``default``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client
from tests.controlplane.nodes import shared_namespace
from tests.helpers import MCO_NS


@pytest.fixture
async def admin(control_plane: ControlPlane) -> AsyncIterator[client.ApiClient]:
    async with api_client(control_plane.admin_kubeconfig) as api:
        await shared_namespace(api, MCO_NS)
        await shared_namespace(api, "default")
        yield api
