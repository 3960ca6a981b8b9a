"""The noop-image rule: a same-image drain is held only while MCO's objects say a new image
will replace its target (drain_guard.core.replacement), on each version's objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from drain_guard.core.replacement import (
    EXPECTED_WITHIN,
    POOL_IMAGE,
    Foresight,
    McoObjects,
    Refusal,
    foresee,
    refusal,
)
from drain_guard.decision.decide import decide
from drain_guard.guards import Block, BootedImage, Clear, ImageCompared, NodeView, NoopImageGuard
from drain_guard.protocol import (
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_DETAIL,
    HOLD_REASONS,
    LAST_APPLIED_DRAIN,
    HoldRecord,
    Reason,
    format_rfc3339,
)
from drain_guard.status.agent import AgentStatus
from drain_guard.status.snapshot import decided

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
OLD = "sha256:" + "1" * 64
NEW = "sha256:" + "2" * 64
REPO = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/ocb"
A = "rendered-worker-aaaaaaaa"
B = "rendered-worker-bbbbbbbb"
NODE = {DESIRED_CONFIG: A, DESIRED_IMAGE: f"{REPO}@{OLD}"}


def conditions(**kinds: bool | tuple[bool, datetime]) -> list[dict[str, str]]:
    out = []
    for kind, value in kinds.items():
        status, when = value if isinstance(value, tuple) else (value, NOW - timedelta(hours=1))
        out.append(
            {"type": kind, "status": str(status), "lastTransitionTime": format_rfc3339(when)}
        )
    return out


def pool(
    spec: str = A,
    status: str | None = None,
    image: str | None = OLD,
    more: Mapping[str, bool] | None = None,
    **kinds: bool,
) -> dict[str, Any]:
    kinds = {**kinds, **(more or {})}
    annotations = {} if image is None else {POOL_IMAGE: f"{REPO}@{image}"}
    return {
        "metadata": {"name": "worker", "annotations": annotations},
        "spec": {"configuration": {"name": spec}},
        "status": {
            "configuration": {"name": status or spec},
            "conditions": conditions(**kinds),
        },
    }


def mosc(image: str | None = OLD, *, v1: bool = True) -> dict[str, Any]:
    field = "currentImagePullSpec" if v1 else "currentImagePullspec"
    status = {} if image is None else {field: f"{REPO}@{image}"}
    return {
        "metadata": {"name": "worker-layered"},
        "spec": {"machineConfigPool": {"name": "worker"}},
        "status": status,
    }


def mosb(
    config: str = A,
    image: str | None = None,
    *,
    v1: bool = True,
    more: Mapping[str, bool] | None = None,
    **kinds: Any,
) -> dict[str, Any]:
    kinds = {**kinds, **(more or {})}
    spec: dict[str, Any] = {"machineOSConfig": {"name": "worker-layered"}}
    spec["machineConfig" if v1 else "desiredConfig"] = {"name": config}
    status: dict[str, Any] = {"conditions": conditions(**kinds)}
    if image is not None:
        status["digestedImagePushSpec" if v1 else "finalImagePullspec"] = f"{REPO}@{image}"
    return {"metadata": {"name": f"worker-layered-{config}"}, "spec": spec, "status": status}


def look(
    mco: McoObjects | None, node: Mapping[str, str] = NODE, since: datetime = NOW
) -> tuple[Foresight, str, datetime | None]:
    found = foresee(node, mco, NOW, since)
    return found.foresight, found.why, found.until


# --- 4.15: the pool's build conditions ------------------------------------------------------


def test_4_15_the_seed_race_holds_until_the_build_starts() -> None:
    """The node controller targets the node before the build controller marks the pool
    BuildPending: the pool still says BuildSuccess of the old image, with a new config."""
    mco = McoObjects({"worker": pool(spec=A, status=B, BuildSuccess=True)})
    foresight, why, until = look(mco)
    assert foresight is Foresight.EXPECTED
    assert until == NOW + EXPECTED_WITHIN
    assert "about to start" in why
    later = look(mco, since=NOW - EXPECTED_WITHIN)
    assert later[0] is Foresight.NONE


@pytest.mark.parametrize("kind", ["BuildPending", "Building"])
def test_4_15_a_build_of_the_nodes_config_will_replace_it(kind: str) -> None:
    mco = McoObjects({"worker": pool(spec=A, status=B, more={kind: True, "BuildSuccess": False})})
    assert look(mco)[0] is Foresight.COMING


def test_4_15_the_built_image_will_replace_it() -> None:
    mco = McoObjects({"worker": pool(spec=A, status=B, image=NEW, BuildSuccess=True)})
    assert look(mco)[0] is Foresight.COMING


def test_4_15_a_build_stuck_by_a_newer_config_lets_go() -> None:
    """D6: a MachineConfig created during the build; the pool stays Building for good."""
    mco = McoObjects({"worker": pool(spec=B, status=A, Building=True)})
    foresight, why, _ = look(mco)
    assert foresight is Foresight.NONE
    assert "finishes no such build" in why


def test_4_15_a_failed_build_lets_go() -> None:
    mco = McoObjects({"worker": pool(spec=A, status=B, BuildFailed=True)})
    assert look(mco)[0] is Foresight.NONE


def test_4_15_a_build_refused_while_degraded_lets_go_once_the_pool_is_repaired() -> None:
    """D4 after the repair: the pool moved to the node's config while degraded, so 4.15's
    build controller refused that config's build and starts none later; the pool, repaired,
    looks as in the seed's race (BuildSuccess of the old build, a new config), and only the
    refusal the agent saw tells them apart."""
    repaired = pool(spec=A, status=B, BuildSuccess=True)
    refused = McoObjects({"worker": repaired}, refusals={"worker": Refusal(A, "NodeDegraded")})
    foresight, why, _ = look(refused)
    assert foresight is Foresight.NONE
    assert "was NodeDegraded at rendered-worker-aaaaaaaa before any build of it" in why
    other = McoObjects({"worker": repaired}, refusals={"worker": Refusal(B, "NodeDegraded")})
    assert look(other)[0] is Foresight.EXPECTED
    # A build that did start for the config wins.
    building = pool(spec=A, status=B, Building=True)
    assert look(McoObjects({"worker": building}, refusals=refused.refusals))[0] is (
        Foresight.COMING
    )


@pytest.mark.parametrize("kind", ["Degraded", "NodeDegraded", "RenderDegraded"])
def test_a_refusal_is_seen_in_a_degraded_pool_whose_config_no_build_started(kind: str) -> None:
    refused = pool(spec=A, status=B, more={kind: True}, BuildSuccess=True)
    assert refusal(None, refused) == Refusal(A, kind)
    repaired = pool(spec=A, status=B, BuildSuccess=True)
    assert refusal(None, repaired) is None
    assert refusal(Refusal(A, kind), repaired) == Refusal(A, kind)  # kept once repaired
    assert refusal(Refusal(A, kind), pool(spec=B, status=B, BuildSuccess=True)) is None  # moved
    not_refused = (
        pool(spec=A, status=B, more={kind: True, "BuildPending": True}, BuildSuccess=True),
        pool(spec=A, status=B, more={kind: True, "Building": True}, BuildSuccess=False),
        pool(spec=A, status=A, more={kind: True}, BuildSuccess=True),  # built, degraded later
        # A pool without an image gets a build on any update once repaired (HasOSImage).
        pool(spec=A, status=B, image=None, more={kind: True}, BuildSuccess=True),
        {"spec": ["not", "a", "mapping"]},
    )
    for each in not_refused:
        assert refusal(None, each) is None, each


@pytest.mark.parametrize("kind", ["Degraded", "NodeDegraded", "RenderDegraded"])
def test_a_degraded_pool_lets_go_on_every_version(kind: str) -> None:
    """D4: no version builds for a degraded pool."""
    for mco in (
        McoObjects({"worker": pool(spec=A, status=B, more={kind: True}, Building=True)}),
        McoObjects(
            {"worker": pool(spec=A, more={kind: True})}, [mosb(A, Building=True)], [mosc(OLD)]
        ),
    ):
        foresight, why = look(mco)[:2]
        assert foresight is Foresight.NONE
        assert kind in why


def test_a_pool_that_does_not_exist_is_unknown() -> None:
    assert look(McoObjects({}))[0] is Foresight.UNKNOWN


# --- 4.16 and later: MachineOSBuild and MachineOSConfig --------------------------------------


@pytest.mark.parametrize("v1", [False, True])
def test_a_build_in_flight_will_replace_it(v1: bool) -> None:
    mco = McoObjects(
        {"worker": pool(spec=A, status=B)}, [mosb(A, v1=v1, Building=True)], [mosc(OLD, v1=v1)]
    )
    assert look(mco)[0] is Foresight.COMING


@pytest.mark.parametrize("v1", [False, True])
def test_the_revert_to_a_built_config_lets_go(v1: bool) -> None:
    """D1 (4.16/4.17): the old build is found succeeded, its image is not named again, and
    every node is targeted with the config and the image it runs."""
    old_build = mosb(A, NEW, v1=v1, Succeeded=True)
    mco = McoObjects({"worker": pool(spec=A, status=B)}, [old_build], [mosc(OLD, v1=v1)])
    foresight, why, _ = look(mco)
    assert foresight is Foresight.NONE
    assert "succeeded before" in why


def test_a_build_just_succeeded_whose_image_is_not_yet_named_is_waited_for() -> None:
    """4.18 before the backport: Succeeded first, the MachineOSConfig's image after."""
    just = mosb(A, NEW, v1=False, Succeeded=(True, NOW - timedelta(seconds=3)))
    mco = McoObjects({"worker": pool(spec=A, status=B)}, [just], [mosc(OLD, v1=False)])
    foresight, _, until = look(mco)
    assert foresight is Foresight.EXPECTED
    assert until == NOW - timedelta(seconds=3) + EXPECTED_WITHIN


def test_an_image_the_machine_os_config_names_will_replace_it() -> None:
    mco = McoObjects(
        {"worker": pool(spec=A, status=B)}, [mosb(A, NEW, Succeeded=True)], [mosc(NEW)]
    )
    assert look(mco)[0] is Foresight.COMING


@pytest.mark.parametrize("kind", ["Failed", "Interrupted"])
def test_a_failed_build_lets_go(kind: str) -> None:
    mco = McoObjects({"worker": pool(spec=A, status=B)}, [mosb(A, more={kind: True})], [mosc(OLD)])
    assert look(mco)[0] is Foresight.NONE


def test_a_build_of_another_config_or_pool_is_not_the_pools() -> None:
    other_pool = mosb(A, Building=True)
    other_pool["spec"]["machineOSConfig"]["name"] = "infra-layered"
    mco = McoObjects({"worker": pool(spec=A)}, [mosb(B, Building=True), other_pool], [mosc(OLD)])
    foresight, why, _ = look(mco)
    assert foresight is Foresight.NONE
    assert "no MachineOSBuild" in why


def test_a_new_config_whose_build_is_not_created_yet_is_waited_for() -> None:
    mco = McoObjects({"worker": pool(spec=B, status=A)}, [mosb(A, OLD, Succeeded=True)], [mosc()])
    assert look(mco)[0] is Foresight.EXPECTED


@pytest.mark.parametrize("builds", [False, True])
def test_a_pool_read_before_its_move_to_the_nodes_config_is_waited_for(builds: bool) -> None:
    """The Node's watch delivered its new target (config B) before the pool's watch delivered
    the pool's move to B: the pool as read names A, built with the booted image. Letting go on
    that view would drain for nothing; waited for, bounded by --noop-expect-within."""
    node = {**NODE, DESIRED_CONFIG: B}
    if builds:
        mco = McoObjects({"worker": pool(spec=A)}, [mosb(A, OLD, Succeeded=True)], [mosc(OLD)])
    else:
        mco = McoObjects({"worker": pool(spec=A, BuildSuccess=True)})
    foresight, why, until = look(mco, node)
    assert foresight is Foresight.EXPECTED
    assert until == NOW + EXPECTED_WITHIN
    assert "as last read" in why
    assert look(mco, node, since=NOW - EXPECTED_WITHIN)[0] is Foresight.NONE


def test_a_pool_no_machine_os_config_names_lets_go_where_builds_are_served() -> None:
    mco = McoObjects({"worker": pool(spec=A, image=None)}, [], [])
    assert look(mco)[0] is Foresight.NONE


# --- what the agent cannot read ---------------------------------------------------------------


def test_objects_not_listed_yet_hold_bounded_by_max_hold() -> None:
    """A watch not listed yet (seconds at start, or after the node moved pools): the list
    comes and decides; till then held, as every hold, up to --max-hold (no ``until``)."""
    unlisted = McoObjects({}, unreadable="machineosbuilds not listed yet")
    assert look(unlisted) == (Foresight.UNKNOWN, "machineosbuilds not listed yet", None)


FORBIDDEN = "machineosbuilds not listed, failing since 2026-03-01T11:00:00Z: (403) Forbidden"


def test_a_watch_failing_before_it_listed_is_waited_for_briefly_then_let_go() -> None:
    """A 403 (the ClusterRole without its row) ends only with an admin's fix: held as where
    the agent reads nothing, for --noop-expect-within from the hold's start, then let go
    saying which read fails; never to --max-hold, 45 minutes a node, one after another."""
    failing = McoObjects({}, unreadable=FORBIDDEN, failing_since=NOW - timedelta(hours=1))
    foresight, why, until = look(failing)
    assert (foresight, until) == (Foresight.UNKNOWN, NOW + EXPECTED_WITHIN)
    assert why == f"{FORBIDDEN}: waiting for a new image"
    later = look(failing, since=NOW - EXPECTED_WITHIN)
    assert later == (Foresight.NONE, f"{FORBIDDEN}, and no new image came within its wait", None)


def test_a_watch_that_began_failing_during_a_hold_has_the_whole_wait_to_come_back() -> None:
    """Counted from the failure when it began after the hold (an agent restarted during a
    long hold, the API server restarting): a read failing for a moment lets nothing go."""
    since = NOW - timedelta(seconds=10)
    failing = McoObjects({}, unreadable=FORBIDDEN, failing_since=since)
    foresight, _, until = look(failing, since=NOW - timedelta(hours=1))
    assert (foresight, until) == (Foresight.UNKNOWN, since + EXPECTED_WITHIN)


def test_objects_the_agent_never_reads_are_waited_for_briefly_then_let_go() -> None:
    """The systemd install reads no pool (the node's identity may not): nothing would ever
    tell it that nothing comes, so the hold is the short wait of --noop-expect-within from
    the hold's start, then the drain goes (a revert to a built config on 4.16/4.17 would
    otherwise wait --max-hold a node)."""
    foresight, why, until = look(None)
    assert (foresight, until) == (Foresight.UNKNOWN, NOW + EXPECTED_WITHIN)
    assert "reads none of MCO's pools and builds here" in why
    later = look(None, since=NOW - EXPECTED_WITHIN)
    assert later[0] is Foresight.NONE
    assert "no new image came" in later[1]


@pytest.mark.parametrize(
    "hostile",
    [
        {"worker": {"spec": "x", "status": {"conditions": "x"}, "metadata": []}},
        {"worker": {"status": {"conditions": [1, None, {"type": "Building", "status": 1}]}}},
    ],
)
def test_any_shape_is_read_without_an_exception(hostile: dict[str, Any]) -> None:
    builds: list[dict[str, Any]] = [
        {"spec": []},
        {"status": {"conditions": [{"type": "Succeeded"}]}},
    ]
    configs = [{"spec": {"machineConfigPool": {"name": "worker"}}, "status": {"x": 1}}]
    for mco in (McoObjects(hostile), McoObjects(hostile, builds, configs)):
        assert look(mco)[0] in Foresight


# --- the guard and the decision -----------------------------------------------------------------


def node_view(mco: McoObjects | None, annotations: Mapping[str, str] = NODE) -> NodeView:
    return NodeView(
        name="worker-0",
        annotations={**annotations, DESIRED_DRAIN: f"drain-{A}"},
        pods=(),
        booted=BootedImage(OLD, f"ostree-unverified-registry:{REPO}@{OLD}", "ostree"),
        now=NOW,
        resource_version="7",
        mco=mco,
    )


def test_the_guard_lets_go_and_says_why_when_nothing_will_replace_it() -> None:
    mco = McoObjects({"worker": pool(spec=A, status=B, BuildFailed=True)})
    verdict = NoopImageGuard().check(node_view(mco))
    assert isinstance(verdict, Clear)
    assert not verdict.abstained
    assert "not held: pool worker's build failed" in verdict.detail
    assert isinstance(verdict.evidence, ImageCompared)
    assert verdict.evidence.replacement is not None
    assert verdict.evidence.replacement.foresight is Foresight.NONE


def test_the_guard_holds_while_a_build_runs_and_says_which() -> None:
    mco = McoObjects({"worker": pool(spec=A, status=B, Building=True)})
    verdict = NoopImageGuard().check(node_view(mco))
    assert isinstance(verdict, Block)
    assert "pool worker is building rendered-worker-aaaaaaaa" in verdict.detail
    assert verdict.until is None


def test_an_expected_build_is_asked_again_when_its_wait_ends() -> None:
    mco = McoObjects({"worker": pool(spec=A, status=B, BuildSuccess=True)})
    decision = decide(node_view(mco), [NoopImageGuard()], timedelta(minutes=45))
    assert decision.name == "hold"
    assert decision.recheck_at == NOW + EXPECTED_WITHIN


def test_without_the_objects_the_guard_holds_for_its_short_wait() -> None:
    verdict = NoopImageGuard().check(node_view(None))
    assert isinstance(verdict, Block)
    assert "reads none of MCO's pools and builds" in verdict.detail
    assert verdict.until == NOW + EXPECTED_WITHIN


def test_a_held_same_image_drain_nothing_will_replace_is_released_saying_why() -> None:
    """The release's Event says why (holds.Ended.why, from the decision's HoldEnd)."""
    held = {
        **NODE,
        DESIRED_DRAIN: f"hold-drain-{A}",
        HELD_DRAIN: f"drain-{A}",
        HOLD_REASONS: "noop-image",
        HELD_SINCE: format_rfc3339(NOW - timedelta(minutes=1)),
        HOLD_DETAIL: "x",
    }
    mco = McoObjects({"worker": pool(spec=A, status=B, BuildFailed=True)})
    view = replace(node_view(mco), annotations=held)
    decision = decide(view, [NoopImageGuard()], timedelta(minutes=45))
    assert decision.name == "release"
    assert decision.hold_ended is not None
    assert "not held: pool worker's build failed" in decision.hold_ended.why
    building = McoObjects({"worker": pool(spec=A, status=B, Building=True)})
    kept = decide(replace(view, mco=building), [NoopImageGuard()], timedelta(minutes=45))
    assert kept.hold_ended is None


def test_a_released_expected_wait_does_not_start_again_while_its_request_pends() -> None:
    """The expected window ran out and the hold was released; MCO had not acted on the
    release when the agent looked again (the degraded-pool benchmark): the same request is the
    same wait, let go, not held for a new window (a hold every 5 minutes, for an hour)."""
    mco = McoObjects({"worker": pool(spec=A, status=B, BuildSuccess=True)})
    ended = HoldRecord(f"drain-{A}", (Reason.NOOP_IMAGE,), NOW - EXPECTED_WITHIN, "x")
    verdict = NoopImageGuard().check(replace(node_view(mco), ended_hold=ended))
    assert isinstance(verdict, Clear)
    assert "no build of it started in time" in verdict.detail
    other = replace(ended, held_drain=f"drain-{B}")
    assert isinstance(NoopImageGuard().check(replace(node_view(mco), ended_hold=other)), Block)


@pytest.mark.parametrize(
    "drain",
    [
        {},
        {DESIRED_DRAIN: f"drain-{A}", LAST_APPLIED_DRAIN: f"drain-{A}"},
        {DESIRED_DRAIN: f"uncordon-{A}", LAST_APPLIED_DRAIN: f"uncordon-{A}"},
    ],
)
def test_with_no_drain_waiting_nothing_is_foreseen(drain: Mapping[str, str]) -> None:
    """The node booted the image it is targeted with and its drain was applied, while its pool
    still rolls out to others (spec ahead of status): no wait counts, so no ``expected`` that
    restarts with every pass (/status said "its build is about to start" for good)."""
    mco = McoObjects({"worker": pool(spec=A, status=B, BuildSuccess=True)})
    view = replace(node_view(mco), annotations={**NODE, **drain})
    verdict = NoopImageGuard().check(view)
    assert isinstance(verdict, Clear)
    assert verdict.detail.endswith("no drain waits")
    assert verdict.evidence == ImageCompared(OLD, True, None)
    cordoned = NoopImageGuard().check(replace(view, unschedulable=True))
    assert cordoned.evidence == ImageCompared(OLD, True, None)
    status = decided(
        AgentStatus("worker-0", "idle", "", "0", NOW, NOW),
        decide(view, [NoopImageGuard()], timedelta(minutes=45)),
        annotations=view.annotations,
        hold=None,
        booted=view.booted,
        max_hold=timedelta(minutes=45),
        now=NOW,
    )
    assert status.to_json()["image"]["replacement"] is None
    assert status.to_json()["image"]["replacementWhy"] is None
    waiting = replace(view, annotations={**view.annotations, DESIRED_DRAIN: f"drain-{B}"})
    assert isinstance(NoopImageGuard().check(waiting), Block)
