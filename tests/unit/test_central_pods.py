"""The central shield's pod watches: which label selectors it sends, and the union of what
they show (one pod, two watches: the newer version; gone when no watch shows it)."""

from __future__ import annotations

from typing import Any

from drain_guard.core.selectors import (
    MCO_NAMESPACE,
    default_build_pod_selectors,
    parse_build_pod_selector,
)
from drain_guard.programs.central import SelectedPods, pod_watch_selectors


def pod(name: str, version: int, phase: str = "Running", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": MCO_NAMESPACE,
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
            "labels": labels,
        },
        "spec": {"nodeName": "worker-0"},
        "status": {"phase": phase},
    }


def test_each_selector_is_watched_by_its_positive_terms_once_and_only_for_mcos_namespace() -> None:
    selectors = [
        *default_build_pod_selectors(),
        parse_build_pod_selector("app=build,!canary,tier notin (web)"),
        parse_build_pod_selector("app=build,stage in (a,b)@Job"),
        parse_build_pod_selector("other-namespace:app=build"),
        parse_build_pod_selector("app=build,!canary"),  # the same positive terms: once
        parse_build_pod_selector("!canary"),  # no positive term: the whole namespace
    ]
    assert pod_watch_selectors(selectors) == (
        "openshift.io/build.name",
        "machineconfiguration.openshift.io/buildPod",
        "machineconfiguration.openshift.io/on-cluster-layering",
        "batch.kubernetes.io/job-name",
        "app=build",
        "app=build,stage in (a,b)",
        "",
    )


def test_a_pod_two_watches_show_is_kept_in_its_newer_version_until_neither_shows_it() -> None:
    pods = SelectedPods(watches=2)
    first, second = pods.replace_for(0), pods.replace_for(1)
    first([pod("b", 10, **{"a": "1", "b": "1"})])
    assert not pods.pods_synced  # one watch of two has listed
    second([])
    assert pods.pods_synced
    pods.apply_for(1)("ADDED", pod("b", 11, "Succeeded", a="1", b="1"))
    pods.apply_for(0)("MODIFIED", pod("b", 10, a="1", b="1"))  # a watch lagging behind
    assert pods.pods[(MCO_NAMESPACE, "b")].phase == "Succeeded"
    pods.apply_for(1)("DELETED", pod("b", 12, "Succeeded", a="1"))  # left watch 1's selector
    assert (MCO_NAMESPACE, "b") in pods.pods
    first([])  # watch 0 lists again without it
    assert pods.pods == {}


def test_every_change_wakes_the_listeners() -> None:
    pods = SelectedPods(watches=1)
    woken: list[int] = []
    pods.pod_listeners.append(lambda _key: woken.append(len(pods.pods)))
    pods.replace_for(0)([pod("a", 1, a="1")])
    pods.apply_for(0)("DELETED", pod("a", 2, a="1"))
    assert woken == [1, 0]
