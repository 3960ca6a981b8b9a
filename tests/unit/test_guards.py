"""The guards one by one: what blocks, what abstains, what is reported as invalid."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from drain_guard.core.pods import Pod, PodScope
from drain_guard.core.replacement import Foresight, McoObjects
from drain_guard.core.selectors import OwnerRef, default_build_pod_selectors
from drain_guard.guards import (
    Block,
    BootedImage,
    BuildPodGuard,
    BuildPodsSeen,
    Clear,
    ImageCompared,
    ManualGuard,
    NodeView,
    NoopImageGuard,
    Unknown,
    parse_hold_request,
)
from drain_guard.protocol import DESIRED_DRAIN, DESIRED_IMAGE, HOLD_REQUEST, Reason

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MCO_NS = "openshift-machine-config-operator"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
REGISTRY = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/ocb"


def view(
    annotations: Mapping[str, str] | None = None,
    pods: tuple[Pod, ...] | None = (),
    booted: BootedImage | None = None,
    unschedulable: bool = False,
) -> NodeView:
    return NodeView(
        name="worker-0",
        annotations=dict(annotations or {}),
        pods=pods,
        booted=booted or BootedImage(D1, f"ostree-unverified-registry:{REGISTRY}@{D1}", "ostree"),
        now=NOW,
        resource_version="7",
        unschedulable=unschedulable,
    )


def build_pod(name: str = "build-x-build", phase: str = "Running", deleting: bool = False) -> Pod:
    labels = {"openshift.io/build.name": "build-rendered-worker-1"}
    return Pod(MCO_NS, name, phase, labels, deleting=deleting)


# --- build-pod ----------------------------------------------------------------------------


@pytest.fixture
def build_guard() -> BuildPodGuard:
    return BuildPodGuard(default_build_pod_selectors())


def test_build_guard_unknown_until_pods_synced(build_guard: BuildPodGuard) -> None:
    assert build_guard.check(view(pods=None)) == Unknown(
        Reason.BUILD_POD, "pods on the node are not synced yet"
    )


def test_build_guard_blocks_on_running_and_pending_build_pods(build_guard: BuildPodGuard) -> None:
    verdict = build_guard.check(view(pods=(build_pod("b", "Running"), build_pod("a", "Pending"))))
    assert verdict == Block(Reason.BUILD_POD, f"build pods {MCO_NS}/a, {MCO_NS}/b")


def test_build_guard_blocks_on_4_18_job_pod(build_guard: BuildPodGuard) -> None:
    pod = Pod(
        MCO_NS,
        "build-worker-abc-x7k2p",
        "Running",
        {"batch.kubernetes.io/job-name": "build-worker-abc"},
        (OwnerRef("Job", "build-worker-abc"),),
    )
    assert isinstance(build_guard.check(view(pods=(pod,))), Block)


@pytest.mark.parametrize(
    "pod",
    [
        build_pod(phase="Succeeded"),
        build_pod(phase="Failed"),
        build_pod(deleting=True),
        Pod(MCO_NS, "machine-os-builder-1", "Running", {"k8s-app": "machine-os-builder"}),
        Pod("default", "web", "Running", {"app": "web"}),
    ],
)
def test_build_guard_ignores(build_guard: BuildPodGuard, pod: Pod) -> None:
    verdict = build_guard.check(view(pods=(pod,)))
    assert verdict == Clear(Reason.BUILD_POD, "no build pod on the node")


def test_a_build_labelled_pod_outside_mco_holds_nothing_by_default(
    build_guard: BuildPodGuard,
) -> None:
    # Any user may create a pod with a build label and bind it to a node (spec.nodeName).
    tenant = Pod("tenant-a", "not-a-build", "Pending", {"openshift.io/build.name": "x"})
    verdict = build_guard.check(view(pods=(tenant,)))
    assert verdict == Clear(Reason.BUILD_POD, "no build pod on the node")


@pytest.mark.parametrize("opt_in", [["tenant-a"], ["*"]])
def test_a_build_labelled_pod_holds_when_its_namespace_is_opted_in(opt_in: list[str]) -> None:
    guard = BuildPodGuard(default_build_pod_selectors(), PodScope.with_opt_ins(opt_in))
    tenant = Pod("tenant-a", "build-1", "Running", {"openshift.io/build.name": "x"})
    assert guard.check(view(pods=(tenant,))) == Block(
        Reason.BUILD_POD, "build pod tenant-a/build-1"
    )
    assert guard.check(view(pods=(build_pod(),))) == Block(
        Reason.BUILD_POD, f"build pod {MCO_NS}/build-x-build"
    )


def test_a_pod_in_phase_unknown_still_runs() -> None:
    # Its node stopped reporting: the pod may still run, and the eviction API still honours
    # budgets for it. The guard and the shield read this one rule.
    assert build_pod(phase="Unknown").running
    assert not build_pod(phase="Succeeded").running
    assert not build_pod(deleting=True).running


BUILDER = Pod(MCO_NS, "machine-os-builder-6f9c-x2", "Running", {"k8s-app": "machine-os-builder"})


def machine_os_build(name: str, state: str) -> dict[str, object]:
    """A MachineOSBuild with MCO's five conditions, ``state`` the True one."""
    types = ("Prepared", "Building", "Failed", "Interrupted", "Succeeded")
    conditions = [{"type": t, "status": "True" if t == state else "False"} for t in types]
    return {"metadata": {"name": name}, "status": {"conditions": conditions}}


@pytest.mark.parametrize("state", ["Prepared", "Building"])
def test_build_guard_holds_the_builders_node_while_a_machine_os_build_is_in_flight(
    build_guard: BuildPodGuard, state: str
) -> None:
    # D2: on MCO 4.18/4.19 a drain of machine-os-builder during a build re-creates the build
    # and degrades the pool (OCPBUGS-58238).
    builds = [machine_os_build("worker-old", "Succeeded"), machine_os_build("worker-new", state)]
    mco = McoObjects(pools={}, builds=builds, configs=[])
    verdict = build_guard.check(replace(view(pods=(BUILDER,)), mco=mco))
    assert verdict == Block(
        Reason.BUILD_POD,
        f"{MCO_NS}/machine-os-builder-6f9c-x2 while MachineOSBuild worker-new builds",
        BuildPodsSeen(()),
    )


@pytest.mark.parametrize(
    "mco",
    [
        None,  # MCO's objects are not read here (through the node proxy)
        McoObjects(pools={}),  # 4.15: no MachineOSBuilds
        McoObjects(pools={}, unreadable="machineosbuilds not listed yet"),
        McoObjects(pools={}, builds=[machine_os_build("w", "Succeeded")], configs=[]),
        McoObjects(pools={}, builds=[machine_os_build("w", "Failed")], configs=[]),
        McoObjects(pools={}, builds=[{"metadata": "hostile", "status": ["x"]}], configs=[]),
    ],
)
def test_build_guard_lets_the_builders_node_go_when_no_build_is_in_flight(
    build_guard: BuildPodGuard, mco: McoObjects | None
) -> None:
    verdict = build_guard.check(replace(view(pods=(BUILDER,)), mco=mco))
    assert verdict == Clear(Reason.BUILD_POD, "no build pod on the node")


def test_build_guard_needs_selectors() -> None:
    with pytest.raises(ValueError, match="at least one selector"):
        BuildPodGuard([])


def test_pod_owner_kinds() -> None:
    pod = Pod("ns", "p", "Running", owners=(OwnerRef("Job", "j"), OwnerRef("Build", "b")))
    assert pod.owner_kinds == ("Job", "Build")


# --- noop-image ---------------------------------------------------------------------------


#: A drain waits for MCO's target, the image the node booted.
SAME_IMAGE_DRAIN = {DESIRED_IMAGE: f"{REGISTRY}@{D1}", DESIRED_DRAIN: "drain-rendered-worker-1"}


def test_noop_blocks_when_desired_is_the_booted_image() -> None:
    verdict = NoopImageGuard().check(view(SAME_IMAGE_DRAIN))
    assert isinstance(verdict, Block)
    assert verdict.reason is Reason.NOOP_IMAGE
    assert "sha256:111111111111" in verdict.detail


def test_noop_does_not_block_on_a_cordoned_node() -> None:
    """MCO's node controller gives a cordoned node no new target: the hold could only end at
    max-hold, and the same drain would follow it."""
    verdict = NoopImageGuard().check(view(SAME_IMAGE_DRAIN, unschedulable=True))
    assert isinstance(verdict, Clear)
    assert not verdict.abstained
    assert "the node is cordoned" in verdict.detail
    assert isinstance(verdict.evidence, ImageCompared)
    assert verdict.evidence.equal
    # Said as the replacement foreseen: /status's replacementWhy, the metric's "none".
    assert verdict.evidence.replacement is not None
    assert verdict.evidence.replacement.foresight is Foresight.NONE


def test_noop_clear_when_images_differ() -> None:
    verdict = NoopImageGuard().check(view({DESIRED_IMAGE: f"{REGISTRY}@{D2}"}))
    assert isinstance(verdict, Clear)
    assert not verdict.abstained
    assert "differs" in verdict.detail


def test_noop_clear_when_not_layered() -> None:
    verdict = NoopImageGuard().check(view({}))
    assert verdict == Clear(Reason.NOOP_IMAGE, "node is not layered (no desiredImage)")


def test_noop_abstains_when_booted_digest_unknown() -> None:
    booted = BootedImage(None, None, "ostree", "origin file /ostree/deploy/x.0.origin is missing")
    verdict = NoopImageGuard().check(view({DESIRED_IMAGE: f"{REGISTRY}@{D1}"}, booted=booted))
    assert isinstance(verdict, Clear)
    assert verdict.abstained
    assert "origin file /ostree/deploy/x.0.origin is missing" in verdict.detail


def test_noop_abstains_when_desired_image_has_no_digest() -> None:
    verdict = NoopImageGuard().check(view({DESIRED_IMAGE: f"{REGISTRY}:latest"}))
    assert isinstance(verdict, Clear)
    assert verdict.abstained
    assert not verdict.invalid


def test_noop_reports_malformed_desired_image() -> None:
    verdict = NoopImageGuard().check(view({DESIRED_IMAGE: "oci:/nope"}))
    assert isinstance(verdict, Clear)
    assert verdict.abstained
    assert verdict.invalid
    assert "unknown transport" in verdict.detail


def test_noop_evidence_gives_image_match_and_the_desired_digest() -> None:
    guard = NoopImageGuard()

    def seen(annotations: dict[str, str], booted: BootedImage | None = None) -> object:
        return guard.check(view(annotations, booted=booted)).evidence

    assert seen({DESIRED_IMAGE: f"{REGISTRY}@{D1}"}) == ImageCompared(D1, True)
    assert seen({DESIRED_IMAGE: f"{REGISTRY}@{D2}"}) == ImageCompared(D2, False)
    assert seen({DESIRED_IMAGE: f"{REGISTRY}:v1"}) == ImageCompared(None, None)
    assert seen({DESIRED_IMAGE: "oci:/nope"}) == ImageCompared(None, None)
    assert seen({}) == ImageCompared(None, False)  # not layered: not the booted image
    unknown = BootedImage(None, None, "ostree", "no origin")
    assert seen({DESIRED_IMAGE: f"{REGISTRY}@{D1}"}, unknown) == ImageCompared(D1, None)


def test_build_pod_evidence_lists_the_pods_or_nothing_while_unsynced(
    build_guard: BuildPodGuard,
) -> None:
    pod = build_pod()
    assert build_guard.check(view(pods=(pod,))).evidence == BuildPodsSeen((pod,))
    assert build_guard.check(view(pods=())).evidence == BuildPodsSeen(())
    assert build_guard.check(view(pods=None)).evidence is None


# --- manual -------------------------------------------------------------------------------


def test_parse_hold_request() -> None:
    assert parse_hold_request("2026-03-01T13:00:00Z;  capacity test ") == (
        NOW + timedelta(hours=1),
        "capacity test",
    )
    assert parse_hold_request("2026-03-01T14:00:00+01:00") == (NOW + timedelta(hours=1), "")
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_hold_request("tomorrow;please")


def test_manual_blocks_until_expiry() -> None:
    verdict = ManualGuard().check(view({HOLD_REQUEST: "2026-03-01T13:00:00Z;db migration"}))
    assert verdict == Block(Reason.MANUAL, "hold-request until 2026-03-01T13:00:00Z: db migration")


def test_manual_without_reason_text() -> None:
    verdict = ManualGuard().check(view({HOLD_REQUEST: "2026-03-01T13:00:00Z"}))
    assert verdict == Block(Reason.MANUAL, "hold-request until 2026-03-01T13:00:00Z")


def test_manual_expired_does_not_block() -> None:
    verdict = ManualGuard().check(view({HOLD_REQUEST: "2026-03-01T12:00:00Z;x"}))
    assert verdict == Clear(Reason.MANUAL, "hold-request expired at 2026-03-01T12:00:00Z")


def test_manual_malformed_is_reported_not_held() -> None:
    verdict = ManualGuard().check(view({HOLD_REQUEST: "forever"}))
    assert isinstance(verdict, Clear)
    assert verdict.invalid
    assert "drain-guard.io/hold-request ignored" in verdict.detail


def test_manual_absent() -> None:
    assert ManualGuard().check(view({})) == Clear(Reason.MANUAL, "no hold-request")
