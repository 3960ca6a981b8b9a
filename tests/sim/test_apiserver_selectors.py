"""fieldSelector and labelSelector on LIST through kubernetes_asyncio, with the real 400s."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.apiserver.server import SimApiServer
from tests.sim.helpers import node, pod, status_body


@pytest.fixture
def pods(sim: SimApiServer) -> SimApiServer:
    for name, node_name, phase, labels, ns in (
        ("a", "w0", "Running", {"app": "web", "tier": "fe"}, "ns1"),
        ("b", "w1", "Succeeded", {"app": "db"}, "ns1"),
        ("c", "w0", "Pending", {"app": "web"}, "ns2"),
        ("d", "w1", "Running", {}, "ns2"),
    ):
        sim.create("pods", pod(name, node=node_name, phase=phase, labels=labels, namespace=ns))
    return sim


async def names(
    kube: client.ApiClient, *, field_selector: str = "", label_selector: str = ""
) -> list[str]:
    result = await client.CoreV1Api(kube).list_pod_for_all_namespaces(
        field_selector=field_selector, label_selector=label_selector
    )
    return [p.metadata.name for p in result.items]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=w0", ["a", "c"]),
        ("spec.nodeName==w0", ["a", "c"]),
        ("spec.nodeName!=w0", ["b", "d"]),
        ("status.phase=Running", ["a", "d"]),
        ("spec.nodeName=w0,status.phase!=Pending", ["a"]),
        ("metadata.name=b", ["b"]),
        ("metadata.namespace=ns2", ["c", "d"]),
        ("spec.host=w1", ["b", "d"]),  # the old alias the conversion function renames
        ("", ["a", "b", "c", "d"]),
    ],
)
async def test_field_selectors(
    pods: SimApiServer, kube: client.ApiClient, selector: str, expected: list[str]
) -> None:
    assert await names(kube, field_selector=selector) == expected


async def test_field_selector_in_a_namespace(pods: SimApiServer, kube: client.ApiClient) -> None:
    result = await client.CoreV1Api(kube).list_namespaced_pod(
        "ns1", field_selector="status.phase=Running"
    )
    assert [p.metadata.name for p in result.items] == ["a"]


async def test_unsupported_field_is_400_worded_as_the_real_server(
    pods: SimApiServer, kube: client.ApiClient
) -> None:
    with pytest.raises(ApiException) as info:
        await names(kube, field_selector="spec.priority=1")
    assert info.value.status == 400
    assert status_body(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "field label not supported: spec.priority",
        "reason": "BadRequest",
        "code": 400,
    }
    # kinds without a conversion function get apimachinery's default message
    with pytest.raises(ApiException) as info:
        await client.PolicyV1Api(kube).list_pod_disruption_budget_for_all_namespaces(
            field_selector="spec.minAvailable=1"
        )
    assert info.value.status == 400
    assert status_body(info.value)["message"] == (
        '"spec.minAvailable" is not a known field selector: only "metadata.name", '
        '"metadata.namespace"'
    )
    with pytest.raises(ApiException) as info:
        await names(kube, field_selector="nonsense")
    assert info.value.status == 400


async def test_node_field_selectors(sim: SimApiServer, kube: client.ApiClient) -> None:
    sim.create("nodes", node("n0"))
    sim.create("nodes", {**node("n1"), "spec": {"unschedulable": True}})
    v1 = client.CoreV1Api(kube)
    cordoned = await v1.list_node(field_selector="spec.unschedulable=true")
    assert [n.metadata.name for n in cordoned.items] == ["n1"]
    schedulable = await v1.list_node(field_selector="spec.unschedulable=false")
    assert [n.metadata.name for n in schedulable.items] == ["n0"]
    with pytest.raises(ApiException) as info:
        await v1.list_node(field_selector="spec.nodeName=x")
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "c"]),
        ("app==web", ["a", "c"]),
        ("app!=web", ["b", "d"]),  # != also matches pods without the label
        ("app in (web,db)", ["a", "b", "c"]),
        ("app notin (web)", ["b", "d"]),
        ("tier", ["a"]),
        ("!tier", ["b", "c", "d"]),
        ("app=web,!tier", ["c"]),
    ],
)
async def test_label_selectors(
    pods: SimApiServer, kube: client.ApiClient, selector: str, expected: list[str]
) -> None:
    assert await names(kube, label_selector=selector) == expected


async def test_bad_label_selector_is_400(pods: SimApiServer, kube: client.ApiClient) -> None:
    with pytest.raises(ApiException) as info:
        await names(kube, label_selector="app in web")
    assert info.value.status == 400
    assert status_body(info.value)["reason"] == "BadRequest"
