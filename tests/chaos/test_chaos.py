"""Chaos runs with real agent processes, judged by the independent checker.

The CI-sized run (two seeds per MCO version) is part of plain ``pytest``;
``make chaos SEEDS=300`` runs the long one. A failure prints the seed, its schedule and the
timeline of the node concerned; ``pytest tests/chaos --chaos-seed=S`` replays that seed's
schedule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drain_guard_sim.actors.mco import McoVersion
from drain_guard_sim.harness.chaos import Action, ChaosConfig, ChaosReport, make_schedule, run_chaos
from tests.chaos.conftest import CI_SEEDS


def _judge(report: ChaosReport) -> None:
    assert report.ok, report.failure_text()


async def test_chaos(chaos_seed: int, tmp_path: Path) -> None:
    config = ChaosConfig(seed=chaos_seed)
    report = await run_chaos(config, tmp_path)
    _judge(report)
    # Settled means every node reached the last rollout's config, not the one before it.
    if report.settled:
        assert set(report.current_configs.values()) == {report.final_config}, report.events[-3:]
    # The run did what it is for: requests came, and agents decided on them. On 4.15 they
    # held some, or wrote to their Node and were refused: a refusal burst is armed at a drain
    # request, and on a loaded machine it may outlast every request a seed's agents would
    # hold (one, when the build fails early) until the MCC has cordoned the node, after which
    # a noop-image request is rightly let through (nothing but max-hold ends that hold). An
    # agent that stops deciding writes nothing and fails this. (4.16+ never ask for a drain
    # to the booted image, so holds there need a build pod to meet.)
    assert report.checked.requests > 0
    if config.mco_version is McoVersion.V4_15:
        assert report.checked.holds + report.refused_decisions > 0, report.fired


@pytest.mark.slow
async def test_chaos_long(chaos_seed: int, tmp_path: Path) -> None:
    _judge(await run_chaos(ChaosConfig(seed=chaos_seed), tmp_path))


def test_every_version_meets_every_race_and_shield_combination() -> None:
    configs = [ChaosConfig(seed=s) for s in range(6 * len(McoVersion))]
    combos = {(c.mco_version, c.racing_mcc, c.shield) for c in configs}
    assert len(combos) == len(McoVersion) * 2 * 2
    ci = [ChaosConfig(seed=s) for s in CI_SEEDS]
    for version in McoVersion:  # a handful each, racing the MCC and not
        assert {c.racing_mcc for c in ci if c.mco_version is version} == {True, False}


def test_the_schedule_is_a_function_of_the_seed() -> None:
    one, again, other = (make_schedule(ChaosConfig(seed=s)) for s in (7, 7, 8))
    assert one == again
    assert one != other
    assert [a.kind for a in one].count("rollout") == ChaosConfig(seed=7).rollouts


async def test_the_checker_catches_an_agent_that_does_not_guard(tmp_path: Path) -> None:
    """An agent blind to build pods, on hosts whose booted image cannot be read, lets the
    seed's drain evict the build pod while it is up and synced: the run must fail."""
    # Seed 1: MCO 4.15, its MCC not racing (the build pod, started 20 MCO seconds after the
    # render in the lost build race, is there when it drains, 60 MCO seconds after the
    # target: no kubelet report may bring it earlier), no shield; MCO's seconds at 0.05 (not
    # 0.01) so that a loaded machine keeps that order.
    config = ChaosConfig(
        seed=1,
        time_factor=0.05,
        node_writers=False,
        agent_args=("--build-pod-selector", "drain-guard-chaos/never=match"),
        # The build fails: the last rollout cannot complete; 15 s (300 MCO seconds) see the
        # MCC's drain, 60 MCO seconds after the target, evict the build pod.
        settle_timeout=15.0,
    )
    schedule = [
        Action(0.0, "corrupt-host", "worker-0", (("how", "cmdline"),)),
        Action(0.0, "corrupt-host", "worker-1", (("how", "cmdline"),)),
        # 4 s (80 MCO seconds): the MCC's 60 s from the daemons' startup writes have passed.
        Action(4.0, "rollout"),
    ]
    report = await run_chaos(config, tmp_path, schedule)
    assert not report.ok
    rules = {v.rule for v in report.checked.violations}
    assert rules == {"evicted"}, report.failure_text()
    assert "timeline of worker-0" in report.failure_text()
