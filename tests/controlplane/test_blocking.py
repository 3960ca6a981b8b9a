"""Blocking pods on the real control plane, with the agent's own token: the opted-in
namespace read through the component daemonset/components/blocking-pods (docs/install.md's
kustomization, rendered and applied as kubectl does), nothing else of it readable and a
tenant's namespace not at all, a drain held while the declared pod runs and released when it
completes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard.confine.rights import ALLOWED, RBAC
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from tests.controlplane.helpers import own_namespace, unique
from tests.controlplane.nodes import DRAIN_B, mcd_request, wait_annotation
from tests.controlplane.test_rights import (
    AGENT_NS,
    Installed,
    answer,
    installed,
    kubectl,
)
from tests.deploy.tools import documented_kustomization, render_dir
from tests.helpers import IMAGE_A, IMAGE_B, reap, spawn

__all__ = ["installed"]  # the fixture, with the overlay's RBAC and the agent pod's token

ETL = {"app": "etl"}


async def watch_status(core: client.CoreV1Api, namespace: str, selector: str) -> int:
    """The HTTP status of a watch of the pods ``selector`` selects in ``namespace`` (closed at
    once: a 200 is a watch the API server started)."""
    # Typed as a V1PodList, which it is not without its content preloaded.
    resp: Any = await core.list_namespaced_pod(
        namespace, field_selector=selector, watch=True, _preload_content=False
    )
    resp.release()
    return int(resp.status)


async def running_pod(admin: client.ApiClient, namespace: str, node: str) -> str:
    core = client.CoreV1Api(admin)
    name = unique("etl")
    pod: Any = {
        "metadata": {"name": name, "labels": ETL},
        "spec": {"nodeName": node, "containers": [{"name": "etl", "image": "etl"}]},
    }
    await core.create_namespaced_pod(namespace, pod)
    await set_phase(admin, namespace, name, "Running")
    return name


async def set_phase(admin: client.ApiClient, namespace: str, pod: str, phase: str) -> None:
    body = {"status": {"phase": phase}}
    await client.CoreV1Api(admin).patch_namespaced_pod_status(pod, namespace, body)


@pytest.mark.parametrize("installed", ["openshift"], indirect=True)
async def test_a_blocking_pod_holds_only_in_the_opted_in_namespace(
    installed: Installed, tmp_path: Path
) -> None:
    admin, node = installed.admin, installed.node
    batch, tenant = await own_namespace(admin, "batch"), await own_namespace(admin, "tenant")
    objects = render_dir(documented_kustomization("Blocking pods", tmp_path / "roles", batch))
    assert [(o["kind"], o["metadata"]["namespace"]) for o in objects] == [
        ("Role", batch),
        ("RoleBinding", batch),
    ]
    manifest = tmp_path / "roles.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    kubectl(installed.plane, "apply", "-f", str(manifest))
    ours = await running_pod(admin, batch, node)
    await running_pod(admin, tenant, node)  # the same labels, not opted in: holds nothing
    # The agent's own token: its node's pods in the opted-in namespace (listed and watched),
    # nothing else of it (not a pod by name, no Secret, no ConfigMap), nothing of the tenant's.
    core = client.CoreV1Api(installed.agent)
    selector = f"spec.nodeName={node}"
    assert await answer(core.list_namespaced_pod(batch, field_selector=selector)) == ALLOWED
    assert await watch_status(core, batch, selector) == 200
    assert await answer(core.read_namespaced_pod(ours, batch)) == RBAC
    assert await answer(core.list_namespaced_secret(batch)) == RBAC
    assert await answer(core.list_namespaced_config_map(batch)) == RBAC
    assert await answer(core.list_namespaced_pod(tenant, field_selector=selector)) == RBAC
    assert await watch_status(core, tenant, selector) == 403
    assert await answer(core.list_pod_for_all_namespaces(field_selector=selector)) == RBAC

    started: list[AgentProcess] = []
    try:
        await spawn(
            node,
            installed.kubeconfig,
            HostFS(tmp_path / "host", IMAGE_A),
            "--daemonset",
            f"{AGENT_NS}/drain-guard",
            "--pod-name",
            installed.pod,
            "--blocking-pod-selector",
            "app=etl",
            "--blocking-pod-namespace",
            batch,
            started=started,
        )
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        assert held[protocol.HOLD_REASONS] == "blocking-pod"
        assert held[protocol.HOLD_DETAIL] == f"blocking-pod: blocking pod {batch}/{ours}"
        await set_phase(admin, batch, ours, "Succeeded")
        await wait_annotation(admin, node, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    finally:
        await reap(started)
