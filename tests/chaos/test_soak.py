"""The soak runner works (a short run); its figures come from
``python -m drain_guard_sim.harness.chaos soak``
and are a measurement reported in docs/reliability.md, not asserted here."""

from __future__ import annotations

from pathlib import Path

from drain_guard_sim.harness.chaos import run_soak


async def test_a_short_soak_feeds_the_agent_and_samples_it(tmp_path: Path) -> None:
    report = await run_soak(events=200, samples=4, workdir=tmp_path)
    assert [n for n, _, _ in report.samples][-1] == 200
    assert all(rss > 0 and fds > 0 for _, rss, fds in report.samples)
    # The agent was processing the churn: it held the drain requests and released them.
    assert report.agent_writes >= 20
    assert "holds and releases" in report.summary()
