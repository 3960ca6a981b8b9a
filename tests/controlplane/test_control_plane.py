"""The real control plane the ``controlplane`` tests stand on: the pinned Kubernetes, with
service-account tokens, the controllers running and etcd compaction giving the real 410."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import WAIT, api_client, own_namespace
from tests.controlplane.test_disruption_budget import allows, budget, ready_pod

GO_MOD = Path(__file__).resolve().parents[2] / "tools" / "control-plane" / "go.mod"


def pinned_kubernetes() -> str:
    found = re.search(r"^\s*k8s\.io/kubernetes (v[0-9.]+)\b", GO_MOD.read_text(), re.MULTILINE)
    assert found, "tools/control-plane/go.mod requires no k8s.io/kubernetes"
    return found.group(1)


async def test_it_is_the_kubernetes_that_go_mod_pins(control_plane: ControlPlane) -> None:
    async with api_client(control_plane.admin_kubeconfig) as admin:
        version = await client.VersionApi(admin).get_code()
    assert version.git_version == pinned_kubernetes()


async def test_a_service_account_token_authenticates_as_its_account(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    async with api_client(control_plane.admin_kubeconfig) as admin:
        namespace = await own_namespace(admin)
        core = client.CoreV1Api(admin)
        await core.create_namespaced_service_account(
            namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
        )
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
        )
        token = await core.create_namespaced_service_account_token("reader", namespace, request)
    kubeconfig = control_plane.token_kubeconfig(token.status.token, tmp_path / "reader")
    async with api_client(kubeconfig) as reader:
        review = await client.AuthenticationV1Api(reader).create_self_subject_review(
            client.V1SelfSubjectReview()
        )
        with pytest.raises(ApiException) as denied:
            await client.CoreV1Api(reader).list_node()
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:reader"
    assert denied.value.status == 403


async def test_the_garbage_collector_deletes_what_an_owner_leaves(
    control_plane: ControlPlane,
) -> None:
    async with api_client(control_plane.admin_kubeconfig) as admin:
        namespace = await own_namespace(admin)
        core = client.CoreV1Api(admin)
        owner = await core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
        )
        reference = client.V1OwnerReference(
            api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
        )
        await core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="dependent", owner_references=[reference])
            ),
        )
        await core.delete_namespaced_config_map("owner", namespace)
        async with asyncio.timeout(WAIT):
            while True:
                names = {
                    cm.metadata.name
                    for cm in (await core.list_namespaced_config_map(namespace)).items
                }
                if "dependent" not in names:
                    break
                await asyncio.sleep(0.2)
    assert "owner" not in names


async def test_compaction_makes_an_old_resource_version_gone(control_plane: ControlPlane) -> None:
    """Compacted in etcd and out of the restarted API server's watch cache: 410 Gone."""
    async with api_client(control_plane.admin_kubeconfig) as admin:
        namespace = await own_namespace(admin)
        core = client.CoreV1Api(admin)
        created = await core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"), data={"n": "0"})
        )
        old = created.metadata.resource_version
        await core.patch_namespaced_config_map("c", namespace, {"data": {"n": "1"}})
        listed = await core.list_namespaced_config_map(
            namespace, resource_version=old, resource_version_match="Exact"
        )
        assert [cm.data["n"] for cm in listed.items if cm.metadata.name == "c"] == ["0"]
        control_plane.compact()
        control_plane.restart_apiserver()
        with pytest.raises(ApiException) as gone:
            await core.list_namespaced_config_map(
                namespace, resource_version=old, resource_version_match="Exact"
            )
        # The controllers see what is made after the restart: the disruption controller counts
        # a new Ready pod for a new budget (a controller manager left to reconnect on its own
        # after a long restart counted none for half a minute, and such a budget allowed no
        # disruption whatever its minAvailable: the next test's hold was never released).
        await ready_pod(admin, namespace, "worker-x")
        await budget(admin, namespace, "quorum", 0)
        await allows(admin, namespace, "quorum", 1)
    assert gone.value.status == 410


async def list_pods_as_node(plane: ControlPlane, node: str, field_selector: str = "") -> int:
    """The status of a node identity's cluster-wide pod list (200, or the refusal's code)."""
    kubeconfig = plane.user_kubeconfig(f"system:node:{node}", ["system:nodes"])
    async with api_client(kubeconfig) as as_node:
        try:
            await client.CoreV1Api(as_node).list_pod_for_all_namespaces(
                field_selector=field_selector
            )
        except ApiException as error:
            return int(error.status)
    return 200


async def test_a_node_lists_only_its_own_pods_from_1_34(control_plane: ControlPlane) -> None:
    """AuthorizeNodeWithSelectors (GA, locked on, in 1.34): a node lists pods only with the
    field selector of its own name."""
    assert await list_pods_as_node(control_plane, "worker-x") == 403
    own = "spec.nodeName=worker-x"
    assert await list_pods_as_node(control_plane, "worker-x", field_selector=own) == 200


async def test_emulated_1_31_has_the_older_node_authorizer(
    control_plane_1_31: ControlPlane,
) -> None:
    """Emulating 1.31 (OpenShift 4.18) turns AuthorizeNodeWithSelectors off, as it was then: a
    node lists every pod of the cluster."""
    assert await list_pods_as_node(control_plane_1_31, "worker-x") == 200
