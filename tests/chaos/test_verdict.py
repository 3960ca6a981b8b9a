"""A stall of the last rollout is MCO's own only with the evidence for it: the pool's target
is the last config, its build failed or MCO refuses to start one (a degraded pool; 4.15's pool
still Building for an earlier config), and no node's drain request is pending or held."""

from __future__ import annotations

import pytest

from drain_guard_sim.actors.mco import MCO_NAMESPACE
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.chaos.verdict import mco_stall

MCO = "machineconfiguration.openshift.io/"
DD, LA = MCO + "desiredDrain", MCO + "lastAppliedDrain"
NODES = ("worker-0", "worker-1")
LAST, BEFORE = "rendered-worker-last", "rendered-worker-before"


def _cluster(
    target: str, build_failed: bool, refusing: str | None = None, built: bool = False
) -> SimApiServer:
    api = SimApiServer()
    for name in NODES:
        ann = {DD: f"uncordon-{BEFORE}", LA: f"uncordon-{BEFORE}"}
        api.create("nodes", {"metadata": {"name": name, "annotations": ann}, "spec": {}})
    conditions = [{"type": "BuildFailed", "status": "True" if build_failed else "False"}]
    if refusing is not None:
        conditions.append({"type": refusing, "status": "True"})
    if built:
        build = {"metadata": {"name": f"build-{target}", "namespace": MCO_NAMESPACE}}
        api.create("builds", build, MCO_NAMESPACE)
    pool = {
        "metadata": {"name": "worker"},
        "spec": {"configuration": {"name": target}},
        "status": {"conditions": conditions},
    }
    api.create("machineconfigpools", pool)
    return api


def test_a_failed_build_of_the_last_config_with_every_request_answered_is_mcos_stall() -> None:
    evidence = mco_stall(_cluster(LAST, build_failed=True), NODES, LAST)
    assert evidence is not None
    assert LAST in evidence
    assert "BuildFailed" in evidence


@pytest.mark.parametrize(
    ("target", "build_failed"),
    [(BEFORE, True), (LAST, False)],
    ids=["target-not-yet-the-last-config", "build-not-failed"],
)
def test_no_stall_is_mcos_without_its_failed_build(target: str, build_failed: bool) -> None:
    assert mco_stall(_cluster(target, build_failed), NODES, LAST) is None


@pytest.mark.parametrize(
    "desired", [f"hold-drain-{LAST}", f"drain-{LAST}"], ids=["held", "pending"]
)
def test_a_held_or_pending_drain_request_is_never_mcos_stall(desired: str) -> None:
    api = _cluster(LAST, build_failed=True)
    api.patch("nodes", "worker-1", {"metadata": {"annotations": {DD: desired}}}, patch_type="merge")
    assert mco_stall(api, NODES, LAST) is None


@pytest.mark.parametrize("refusing", ["Degraded", "NodeDegraded", "Building", "BuildPending"])
def test_no_build_of_the_last_config_and_a_pool_that_refuses_one_is_mcos_stall(
    refusing: str,
) -> None:
    """D4 (a degraded pool builds nothing) and D6 (4.15: a config created during a build)."""
    evidence = mco_stall(_cluster(LAST, build_failed=False, refusing=refusing), NODES, LAST)
    assert evidence is not None
    assert refusing in evidence
    assert "canPoolBuild" in evidence


def test_a_build_of_the_last_config_under_way_is_not_mcos_stall() -> None:
    api = _cluster(LAST, build_failed=False, refusing="Building", built=True)
    assert mco_stall(api, NODES, LAST) is None
