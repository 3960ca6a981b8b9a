"""The checker finds each kind of violation in a write log, and only those.

The logs are real: written through the simulator's store by stand-ins for the MCD, the MCC,
an operator and a (misbehaving) agent. Each write then gets time ``t = its index`` so the
time-based rules (grace, max-hold) are exact, with no sleeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.writelog import WriteRecord
from drain_guard_sim.harness.checker import check
from drain_guard_sim.harness.checkresult import Checked, CheckerConfig
from drain_guard_sim.harness.intervals import Interval, intersect, longest
from drain_guard_sim.timestamps import rfc3339

MCO = "machineconfiguration.openshift.io/"
DD, LA = MCO + "desiredDrain", MCO + "lastAppliedDrain"
HELD, SINCE, REASONS = (
    "drain-guard.io/held-drain",
    "drain-guard.io/held-since",
    ("drain-guard.io/hold-reasons"),
)
RELEASED = "drain-guard.io/released"
MCD, MCC = "mcd", "mcc"
AGENT, OTHER_AGENT = "agent-0", "agent-1"
NS = "openshift-machine-config-operator"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
X, Y = "drain-rendered-x", "drain-rendered-y"
ALWAYS: Sequence[Interval] = ((-1.0, 1e9),)


@pytest.fixture
def api() -> SimApiServer:
    server = SimApiServer()
    for name in ("worker-0", "worker-1"):
        ann = {DD: "uncordon-rendered-a", LA: "uncordon-rendered-a"}
        server.create("nodes", {"metadata": {"name": name, "annotations": ann}, "spec": {}})
    server.create("namespaces", {"metadata": {"name": NS}})
    return server


def ann(
    api: SimApiServer, user: str, values: dict[str, str | None], node: str = "worker-0"
) -> None:
    api.patch("nodes", node, {"metadata": {"annotations": values}}, patch_type="merge", user=user)


def since(seconds: float) -> str:
    return rfc3339(BASE + timedelta(seconds=seconds))


def hold(api: SimApiServer, value: str, at: float = 0.0, user: str = AGENT) -> None:
    ann(api, user, {DD: "hold-" + value, HELD: value, REASONS: "build-pod", SINCE: since(at)})


def release(api: SimApiServer, value: str, user: str = AGENT, **extra: str) -> None:
    ann(api, user, {DD: value, HELD: None, REASONS: None, SINCE: None, **extra})


def cordon(api: SimApiServer) -> None:
    api.patch("nodes", "worker-0", {"spec": {"unschedulable": True}}, user=MCC)


def build_pod(api: SimApiServer) -> None:
    api.create(
        "pods",
        {
            "metadata": {"name": "b-build", "namespace": NS, "labels": {"build": "b"}},
            "spec": {"nodeName": "worker-0", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        },
        NS,
    )


def run(
    api: SimApiServer,
    *,
    clean: Sequence[Interval] = ALWAYS,
    max_hold: float = 100.0,
    grace: float = 1.5,
    settled: bool = False,
    **extra: Any,
) -> Checked:
    timed: list[WriteRecord] = [
        replace(w, time=float(i), wall=BASE + timedelta(seconds=i))
        for i, w in enumerate(api.write_log)
    ]
    config = CheckerConfig(
        agent_users={AGENT: "worker-0", OTHER_AGENT: "worker-1"},
        mcd_user=MCD,
        mcc_user=MCC,
        max_hold=max_hold,
        reconcile_interval=1.0,
        grace=grace,
        clean={"worker-0": list(clean), "worker-1": list(ALWAYS)},
        is_build_pod=lambda pod: (pod["metadata"].get("labels") or {}).get("build") == "b",
        end=extra.get("end", float(len(timed))),
        settled=settled,
    )
    return check(timed, config)


def rules(result: Checked) -> list[str]:
    return [v.rule for v in result.violations]


def test_a_hold_and_its_release_are_clean(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    hold(api, X)
    release(api, X)
    ann(api, MCC, {LA: X})
    result = run(api, settled=True)
    assert result.ok, result.violations
    assert (result.holds, result.releases, result.requests) == (1, 1, 1)


def test_an_agent_write_equal_to_last_applied(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    ann(api, MCC, {LA: "drain-rendered-z"})
    ann(api, AGENT, {DD: "drain-rendered-z"})
    assert sorted(rules(run(api))) == ["applied", "lost", "rewrite"]


def test_race_lost_release_is_allowed_only_after_a_real_drain(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    cordon(api)
    hold(api, X)
    ann(api, MCC, {LA: X})  # the MCC finished the drain it had begun, node cordoned
    release(api, X)
    result = run(api)
    assert result.ok, result.violations
    assert result.race_lost_releases == 1


def test_race_lost_release_without_a_drain_is_a_violation(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    hold(api, X)
    ann(api, MCC, {LA: X})  # not cordoned: the MCC did not drain for X
    release(api, X)
    assert rules(run(api)) == ["applied"]


def test_holding_an_uncordon_or_changing_the_request(api: SimApiServer) -> None:
    ann(api, MCD, {DD: "uncordon-rendered-b"})
    hold(api, "uncordon-rendered-b")
    assert rules(run(api)) == ["rewrite"]


def test_restoring_another_request_loses_the_mcd_one(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    hold(api, X)
    ann(api, AGENT, {DD: Y})
    assert set(rules(run(api))) == {"rewrite", "lost"}


def test_a_newer_mcd_request_over_a_hold_is_not_lost(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    hold(api, X)
    ann(api, MCD, {DD: Y})
    ann(api, AGENT, {HELD: None, REASONS: None, SINCE: None})
    result = run(api)
    assert result.ok, result.violations
    assert result.supersedes == 1


def test_anyone_dropping_the_request_is_caught(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    ann(api, "system:admin", {DD: None})
    assert rules(run(api)) == ["lost"]


def test_agent_scope(api: SimApiServer) -> None:
    ann(api, AGENT, {"drain-guard.io/released": "drain-rendered-q"}, node="worker-1")
    ann(api, AGENT, {"drain-guard.io/hold-request": "2030-01-01T00:00:00Z"})
    api.patch("nodes", "worker-0", {"metadata": {"labels": {"x": "y"}}}, user=AGENT)
    api.create("configmaps", {"metadata": {"name": "c", "namespace": NS}}, NS, user=AGENT)
    assert rules(run(api)) == ["scope"] * 4


def test_agent_events_about_its_node_or_related_to_it_on_a_pool(api: SimApiServer) -> None:
    def event(involved: dict[str, str], related: str | None = None) -> None:
        body: dict[str, object] = {"metadata": {"generateName": "e."}, "involvedObject": involved}
        if related is not None:
            body["related"] = {"apiVersion": "v1", "kind": "Node", "name": related}
        api.create("events", body, "default", user=AGENT)

    pool = {"kind": "MachineConfigPool", "name": "worker"}
    event({"kind": "Node", "name": "worker-0"})
    event(pool, related="worker-0")
    assert rules(run(api)) == []
    event({"kind": "Node", "name": "worker-1"})
    event(pool, related="worker-1")
    event(pool)
    assert rules(run(api)) == ["scope"] * 3


def test_a_hold_past_max_hold_while_the_agent_is_up(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    hold(api, X, at=1.0)  # t=4, since t=1: expires at t=6 (max-hold 5); released at t=10
    for i in range(5):
        api.patch("nodes", "worker-0", {"metadata": {"labels": {"n": str(i)}}})
    release(api, X)
    assert rules(run(api, max_hold=5.0)) == ["overdue"]
    # The same log while the agent was down from t=5 on: nothing it could have done.
    assert run(api, max_hold=5.0, clean=[(0.0, 5.0)]).ok
    # Released within one reconcile interval of the expiry: fine.
    assert run(api, max_hold=8.5).ok


def test_a_hold_left_at_the_end_of_a_settled_run(api: SimApiServer) -> None:
    ann(api, MCD, {DD: X})
    hold(api, X, at=1.0)
    assert run(api).ok
    assert rules(run(api, settled=True)) == ["unreleased"]


def _evicting_drain(api: SimApiServer, *, agent_holds: bool = False, **extra: str) -> None:
    build_pod(api)
    ann(api, MCD, {DD: X})  # t=4 (3 creates before)
    if agent_holds:
        hold(api, X, at=5)
        release(api, X, **extra)  # an expiry or operator release, marked
    else:
        api.patch("nodes", "worker-1", {"metadata": {"labels": {"t": "5"}}})
        api.patch("nodes", "worker-1", {"metadata": {"labels": {"t": "6"}}})
    cordon(api)
    api.evict("b-build", NS, user=MCC)


def test_a_build_pod_evicted_while_the_agent_was_up(api: SimApiServer) -> None:
    _evicting_drain(api)
    result = run(api)
    assert rules(result) == ["evicted"]
    assert result.build_pod_evictions == 1
    # Agent down (or impaired by faults) meanwhile: not its failure.
    down = run(api, clean=[(0.0, 4.5)])
    assert down.ok
    assert down.evictions_excused == {"agent down or impaired": 1}
    # The MCC came within the agent's reaction grace.
    assert run(api, grace=3.5).ok


def test_a_build_pod_evicted_after_a_marked_release_is_allowed(api: SimApiServer) -> None:
    _evicting_drain(api, agent_holds=True, **{RELEASED: X})
    result = run(api)
    assert result.ok
    assert result.evictions_excused == {"held, released on purpose, or raced": 1}


def test_a_build_pod_evicted_after_an_unmarked_release(api: SimApiServer) -> None:
    _evicting_drain(api, agent_holds=True)
    assert rules(run(api, grace=0.5)) == ["evicted"]


def test_interval_helpers() -> None:
    assert intersect([(0, 2), (3, 5)], [(1, 4)]) == [(1, 2), (3, 4)]
    assert longest([(0, 1), (2, 4.5)]) == 2.5
    assert longest([]) == 0.0
