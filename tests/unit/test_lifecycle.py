"""The process life-cycle (drain_guard.runtime.lifecycle): how the parts end a process (in-process),
and its start-up warnings."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from datetime import timedelta

import pytest

from drain_guard.runtime.lifecycle import (
    MIN_API_STALE_AFTER,
    Stopped,
    until_stopped,
    warn_short_api_stale_after,
)


async def _forever() -> None:
    await asyncio.Event().wait()


async def test_a_failing_part_ends_the_agent_with_1(caplog: pytest.LogCaptureFixture) -> None:
    async def boom() -> None:
        raise RuntimeError("boom")

    cancelled = asyncio.Event()

    async def other() -> None:
        try:
            await _forever()
        finally:
            cancelled.set()

    assert await until_stopped({"pods": boom(), "node": other()}) == Stopped(1, signalled=False)
    assert cancelled.is_set()
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failed] == ["pods task failed"]
    assert failed[0].exc_info is not None


async def test_sigterm_ends_the_agent_with_0() -> None:
    async def term() -> None:
        await asyncio.sleep(0)
        os.kill(os.getpid(), signal.SIGTERM)
        await _forever()

    stopped = await until_stopped({"controller": term(), "node": _forever()})
    assert stopped == Stopped(0, signalled=True)


async def test_a_part_that_returns_ends_the_agent_with_1_unsignalled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every part runs until cancelled: one that returns is a bug, not a stop (no release)."""

    async def done() -> None:
        return None

    assert await until_stopped({"node": done(), "pods": _forever()}) == Stopped(1, signalled=False)
    assert "node task ended" in [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize(
    ("stale_after", "warned"),
    [
        (timedelta(seconds=1), True),
        (MIN_API_STALE_AFTER - timedelta(seconds=1), True),
        (MIN_API_STALE_AFTER, False),
        (timedelta(minutes=10), False),
    ],
)
def test_an_api_stale_after_shorter_than_two_bookmarks_is_warned_about(
    caplog: pytest.LogCaptureFixture, stale_after: timedelta, *, warned: bool
) -> None:
    """Issue 25: `--api-stale-after 1s` was accepted silently; against kube-apiserver (a
    bookmark a minute) it makes /readyz fail on a healthy idle agent."""
    with caplog.at_level(logging.WARNING, "drain_guard.runtime.lifecycle"):
        warn_short_api_stale_after(stale_after)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m.startswith("--api-stale-after ") and "below 2m" in m for m in messages] == (
        [True] if warned else []
    )
