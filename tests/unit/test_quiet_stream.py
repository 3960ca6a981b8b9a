"""The decision on a watch stream quiet for 1.5 bookmark periods (``drain_guard.kube.
listwatch.stream_is_current``): merely idle when a list read now has what the list and the
stream delivered, each object at the version delivered; frozen (it missed an event) else."""

from __future__ import annotations

from drain_guard.kube.call import JsonObj
from drain_guard.kube.listwatch import delivered_versions, stream_is_current


def _pod(name: str, version: str, namespace: str = "ns") -> JsonObj:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": version}}


DELIVERED = delivered_versions([_pod("a", "10"), _pod("b", "12")])


def test_the_same_objects_at_the_same_versions_are_an_idle_stream() -> None:
    assert stream_is_current(DELIVERED, [_pod("b", "12"), _pod("a", "10")])


def test_nothing_delivered_and_nothing_listed_is_an_idle_stream() -> None:
    assert stream_is_current({}, [])


def test_a_modified_object_the_stream_did_not_deliver_is_a_frozen_stream() -> None:
    assert not stream_is_current(DELIVERED, [_pod("a", "10"), _pod("b", "13")])


def test_an_added_or_a_deleted_object_is_a_frozen_stream() -> None:
    assert not stream_is_current(DELIVERED, [_pod("a", "10"), _pod("b", "12"), _pod("c", "14")])
    assert not stream_is_current(DELIVERED, [_pod("a", "10")])


def test_a_namesake_in_another_namespace_is_another_object() -> None:
    assert not stream_is_current(DELIVERED, [_pod("a", "10"), _pod("b", "12", "other")])


def test_a_node_has_no_namespace() -> None:
    node = {"metadata": {"name": "worker-0", "resourceVersion": "7"}}
    assert delivered_versions([node]) == {"/worker-0": "7"}
