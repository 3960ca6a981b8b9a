"""The MCO's kinds as custom resources (drain_guard_sim.apiserver.crds on the real server, built
in on the simulator), as the simulated MCO actors use them: cluster-scoped MachineConfigs and pools,
namespaced Builds, status subresources, and what a server refuses of a custom resource
(strategic merge patch, an update without resourceVersion)."""

from __future__ import annotations

import pytest

from tests.conformance.client import MERGE_PATCH, STRATEGIC_PATCH, Client
from tests.conformance.servers import Server

MCO = "/apis/machineconfiguration.openshift.io/v1"
BUILDS = "/apis/build.openshift.io/v1"


@pytest.fixture
async def mco(server: Server, admin: Client) -> Client:
    """The admin, once the MCO's kinds are served."""
    await server.custom_resources(admin)
    return admin


def _pool(name: str, config: str) -> dict[str, object]:
    return {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": name, "labels": {"pool": name}},
        "spec": {"configuration": {"name": config}},
        "status": {"configuration": {"name": "ignored"}},
    }


async def test_a_pool_is_cluster_scoped_with_a_status_subresource(mco: Client, ns: str) -> None:
    path = f"{MCO}/machineconfigpools/{ns}-worker"
    created = await mco.ok("POST", f"{MCO}/machineconfigpools", _pool(f"{ns}-worker", "a"))
    assert not (created.get("status") or {}).get("configuration")
    await mco.ok(
        "PATCH",
        path + "/status",
        {"status": {"configuration": {"name": "a"}}},
        content_type=MERGE_PATCH,
    )
    patched = await mco.ok(
        "PATCH",
        path,
        {"spec": {"configuration": {"name": "b"}}, "status": {"configuration": {"name": "x"}}},
        content_type=MERGE_PATCH,
    )
    assert patched["spec"]["configuration"] == {"name": "b"}
    assert patched["status"]["configuration"] == {"name": "a"}
    assert patched["metadata"]["generation"] == created["metadata"]["generation"] + 1
    listed = await mco.ok(
        "GET", f"{MCO}/machineconfigpools", params={"labelSelector": f"pool={ns}-worker"}
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == [f"{ns}-worker"]
    await mco.ok("DELETE", path)


async def test_a_custom_resource_refuses_a_strategic_merge_patch(mco: Client, ns: str) -> None:
    name = f"{ns}-mc"
    body = {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name},
        "spec": {"config": {"ignition": {"version": "3.4.0"}}},
    }
    await mco.ok("POST", f"{MCO}/machineconfigs", body)
    answer = await mco.patch(
        f"{MCO}/machineconfigs/{name}", {"metadata": {"labels": {"a": "b"}}}, STRATEGIC_PATCH
    )
    assert answer.status == 415
    assert answer.reason == "UnsupportedMediaType"
    unconditional = await mco.put(f"{MCO}/machineconfigs/{name}", body)
    assert unconditional.status == 422
    assert unconditional.reason == "Invalid"
    await mco.ok("DELETE", f"{MCO}/machineconfigs/{name}")


async def test_a_build_is_namespaced_with_a_status_subresource(mco: Client, ns: str) -> None:
    build = {
        "apiVersion": "build.openshift.io/v1",
        "kind": "Build",
        "metadata": {"name": "b", "labels": {"openshift.io/build.name": ns}},
        "spec": {"strategy": {"type": "Docker"}},
    }
    path = f"{BUILDS}/namespaces/{ns}/builds"
    await mco.ok("POST", path, build)
    done = await mco.ok(
        "PATCH", f"{path}/b/status", {"status": {"phase": "Complete"}}, content_type=MERGE_PATCH
    )
    assert done["status"]["phase"] == "Complete"
    listed = await mco.ok(
        "GET", f"{BUILDS}/builds", params={"labelSelector": f"openshift.io/build.name={ns}"}
    )
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]] == [
        (ns, "b")
    ]
