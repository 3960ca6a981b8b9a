"""The worker Nodes, build pods and MCD requests of the agent's tests on the real control plane,
and waits on what the API server holds.

Every test on the shared control plane uses Node names of its own (``unique``); build pods live
in ``openshift-machine-config-operator`` (the agent's default build-pod scope), which all of
them share, and are told apart by their Node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard import protocol
from drain_guard_sim.harness.seedobjects import worker_node
from tests.controlplane.helpers import WAIT, unique
from tests.helpers import CONFIG_A, CONFIG_B, IMAGE_A, MCO_NS

DRAIN_B = f"drain-{CONFIG_B}"
BUILD_LABEL = "openshift.io/build.name"


async def shared_namespace(admin: client.ApiClient, name: str) -> str:
    """``name`` (created unless another test did), once its ``default`` service account exists
    (the ServiceAccount admission plugin refuses pods before)."""
    core = client.CoreV1Api(admin)
    try:
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as error:
        if error.status != 409:
            raise
    await until(lambda: _has_default_account(core, name))
    return name


async def _has_default_account(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        await core.read_namespaced_service_account("default", namespace)
    except ApiException as error:
        if error.status != 404:
            raise
        return False
    return True


async def until(check: Callable[[], Any], timeout: float = WAIT) -> Any:  # noqa: ASYNC109
    """Await ``check()`` every 0.1 s until it returns something truthy, and return that: what a
    controller of the real control plane does shows only in what the API server holds."""
    async with asyncio.timeout(timeout):
        while True:
            found = await check()
            if found:
                return found
            await asyncio.sleep(0.1)


async def create_worker(admin: client.ApiClient, *, last_applied: bool = True) -> str:
    """A layered, idle worker Node booted into IMAGE_A, under a name of its own; without
    ``last_applied`` it was never drained (no lastAppliedDrain: the agent's compare-and-swap
    then tests the resourceVersion)."""
    name = unique("worker")
    node: Any = worker_node(name, CONFIG_A, IMAGE_A)
    if not last_applied:
        del node["metadata"]["annotations"][protocol.LAST_APPLIED_DRAIN]
    await client.CoreV1Api(admin).create_node(node)
    return name


async def read_annotations(admin: client.ApiClient, node: str) -> dict[str, str]:
    read = await client.CoreV1Api(admin).read_node(node)
    return dict(read.metadata.annotations or {})


async def wait_annotation(
    admin: client.ApiClient, node: str, key: str, predicate: Callable[[str | None], bool]
) -> dict[str, str]:
    """The Node's annotations once ``key``'s value satisfies ``predicate``."""

    async def check() -> dict[str, str]:
        found = await read_annotations(admin, node)
        return found if predicate(found.get(key)) else {}

    result: dict[str, str] = await until(check)
    return result


async def mcd_request(admin: client.ApiClient, node: str, value: str, **extra: str) -> None:
    """Write desiredDrain as the MCD does: a strategic merge patch, last writer wins."""
    body = {"metadata": {"annotations": {protocol.DESIRED_DRAIN: value, **extra}}}
    await client.CoreV1Api(admin).patch_node(node, body)


async def add_build_pod(admin: client.ApiClient, node: str, *, ready: bool = True) -> str:
    """A running build pod bound to ``node`` (4.15's OpenShift Build label); there is no
    kubelet, so its status is set here, Ready as a running builder's is."""
    core = client.CoreV1Api(admin)
    name = unique("build")
    pod: Any = {
        "metadata": {"name": name, "labels": {BUILD_LABEL: name}},
        "spec": {"nodeName": node, "containers": [{"name": "build", "image": "builder"}]},
    }
    await core.create_namespaced_pod(MCO_NS, pod)
    await set_phase(admin, name, "Running", ready=ready)
    return name


async def set_phase(admin: client.ApiClient, pod: str, phase: str, *, ready: bool = False) -> None:
    """Set a pod's phase (and Ready condition) through the status subresource, as a kubelet."""
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    body = {"status": {"phase": phase, "conditions": conditions}}
    await client.CoreV1Api(admin).patch_namespaced_pod_status(pod, MCO_NS, body)
