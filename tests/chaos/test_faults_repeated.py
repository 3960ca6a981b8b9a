"""Issue 35's faults on the real control plane, each repeated (``make chaos``: marked slow).

Done when no fault, repeated 20 times, gives a hold older than max-hold plus 30 s: the
webhook hung, slow inside and beyond its timeout, and refusing
(``tests/controlplane/test_webhook_release.py``), and the agent's wall clock stepped back
4 min, back 90 s and forward an hour (``tests/controlplane/test_clock_step.py``, whose bound
is tighter: max-hold plus 8 s, and never before max-hold). Each round is a fresh install,
Node and agent; a failure names the fault and the round.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client
from tests.controlplane.nodes import shared_namespace
from tests.controlplane.test_clock_step import STEPS, held_through_a_step
from tests.controlplane.test_webhook_release import (
    WEBHOOK_FAULTS,
    Install,
    install,
    released_behind,
)
from tests.helpers import MCO_NS

__all__ = ["install"]  # the fixture, shared with the fast test

ROUNDS = 20


@pytest.mark.slow
@pytest.mark.parametrize("webhook", WEBHOOK_FAULTS * ROUNDS)  # ids hung0, hung1, ...
async def test_every_webhook_fault_releases_at_max_hold_every_time(
    install: Install, webhook: str, tmp_path: Path
) -> None:
    await released_behind(install, webhook, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS * ROUNDS)
async def test_every_clock_step_ends_the_hold_at_max_hold_every_time(
    control_plane: ControlPlane, step: int, tmp_path: Path
) -> None:
    async with api_client(control_plane.admin_kubeconfig) as admin:
        await shared_namespace(admin, MCO_NS)
        await held_through_a_step(control_plane, admin, tmp_path, step)
