"""The component daemonset/components/thanos-querier-alerts on the real control plane, with
the agent's own token (the openshift overlay installed, ``installed``): docs/install.md's
kustomization, rendered and applied as kubectl does, lets the agent ``get`` a namespace (what
the Thanos querier's kube-rbac-proxy asks of its token) and nothing it could not do before.
(The blocking-pods component: test_blocking.py.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from drain_guard.confine.rights import ALLOWED, RBAC
from tests.controlplane.nodes import until
from tests.controlplane.test_rights import (
    AGENT_NS,
    Installed,
    answer,
    installed,
    kubectl,
)
from tests.deploy.tools import documented_kustomization, render, render_dir
from tests.helpers import MCO_NS

__all__ = ["installed"]  # the fixture, with the overlay's RBAC and the agent pod's token

Probe = Callable[[client.CoreV1Api], Awaitable[Any]]

#: What the agent's token asks, besides the one read the component grants.
BEYOND: dict[str, Probe] = {
    "list namespaces": lambda core: core.list_namespace(),
    "patch a namespace": lambda core: core.patch_namespace(
        "default", {"metadata": {"labels": {"example.com/x": "y"}}}, dry_run="All"
    ),
    "list secrets in the agent's namespace": lambda core: core.list_namespaced_secret(AGENT_NS),
    "list pods in every namespace": lambda core: core.list_pod_for_all_namespaces(),
    "list the MCO's config maps": lambda core: core.list_namespaced_config_map(MCO_NS),
}


def get_namespace(core: client.CoreV1Api) -> Awaitable[Any]:
    return core.read_namespace("kube-system")


@pytest.mark.parametrize("installed", ["openshift"], indirect=True)
async def test_thanos_querier_alerts_grants_get_namespaces_and_nothing_more(
    installed: Installed, tmp_path: Path
) -> None:
    core = client.CoreV1Api(installed.agent)
    plain = render("openshift")
    added = [
        o
        for o in render_dir(documented_kustomization("Alert gating", tmp_path / "user"))
        if o not in plain
    ]
    before = {name: await answer(probe(core)) for name, probe in BEYOND.items()}
    assert await answer(get_namespace(core)) == RBAC
    manifest = tmp_path / "alerts.yaml"
    manifest.write_text(yaml.safe_dump_all(added))
    kubectl(installed.plane, "apply", "--server-side", "-f", str(manifest))
    try:
        # The RBAC authorizer reads bindings from its cache: until it has the new one.
        async def granted() -> bool:
            return await answer(get_namespace(core)) == ALLOWED

        await until(granted)
        after = {name: await answer(probe(core)) for name, probe in BEYOND.items()}
        assert after == before
        assert set(after.values()) == {RBAC}
    finally:
        kubectl(installed.plane, "delete", "--ignore-not-found", "-f", str(manifest))
