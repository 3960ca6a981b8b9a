"""Issue 35's faults on the real control plane, each repeated (``make chaos``: marked slow).

Done when no fault, repeated 20 times, gives a hold older than max-hold plus 30 s, counted
from the drain request by the audit log: the webhook hung, slow inside and beyond its
timeout, and refusing (``tests/controlplane/test_webhook_release.py``), the agent's wall
clock stepped back 4 min, back 90 s and forward an hour (``tests/controlplane/
test_clock_step.py``, whose own bound is tighter: max-hold plus 8 s from ``held-since``, and
never before max-hold), and the agent's expiry committed while etcd and then the API server
were stopped, with no answer to the agent (``tests/controlplane/test_release_committed_late.py``).
Each round is a fresh Node and agent on a control plane of this module's own that keeps an
audit log of every Node write; each round's hold, from the MCD's request to the write that
restored it, is read from that log (``harness/audit.py``, which counts a release answered
504 that committed all the same as its writer's, at the latest time it can have committed)
and recorded as the test's ``held_seconds`` property (``--junitxml`` keeps it). A failure
names the fault and the round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from drain_guard import protocol
from drain_guard_sim.harness.audit import write_log
from drain_guard_sim.harness.controlplane import ControlPlane, default_bin_dir, missing_binaries
from tests.controlplane.helpers import api_client
from tests.controlplane.nodes import DRAIN_B, shared_namespace
from tests.controlplane.test_clock_step import MAX_HOLD as CLOCK_MAX_HOLD
from tests.controlplane.test_clock_step import STEPS, held_through_a_step
from tests.controlplane.test_release_committed_late import (
    ATTEMPTS,
    agent_user,
    expired_though_unanswered,
)
from tests.controlplane.test_release_committed_late import MAX_HOLD as LATE_MAX_HOLD
from tests.controlplane.test_webhook import REQUEST
from tests.controlplane.test_webhook_release import MAX_HOLD as WEBHOOK_MAX_HOLD
from tests.controlplane.test_webhook_release import (
    WEBHOOK_FAULTS,
    Install,
    install,
    released_behind,
)
from tests.helpers import MCO_NS, require_or_skip

__all__ = ["install"]  # the fixture, shared with the fast test

ROUNDS = 20
#: The issue's bound: no hold older than max-hold plus this, from the drain request.
BOUND = timedelta(seconds=30)


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own (the fixtures above use it in place of the
    session's) whose API server logs every Node write with its request and response."""
    bin_dir = default_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        require_or_skip(f"{', '.join(missing)} not built in {bin_dir} (make control-plane)")
    with ControlPlane.start(bin_dir, tmp_path_factory.mktemp("audited-plane"), audit=True) as plane:
        yield plane


def held_for(
    plane: ControlPlane, node: str, request: str, since: datetime
) -> tuple[timedelta, str]:
    """How long ``request`` waited on ``node``, by the audit log: from the write that asked
    for it (``desiredDrain`` set to it) to the write that restored it after its hold; and
    who wrote that."""
    asked = released = None
    releaser = ""
    for write in write_log(plane.audit_log, since, 0.0):
        if write.resource != "nodes" or write.name != node or write.after is None:
            continue
        before = ((write.before or {}).get("metadata") or {}).get("annotations") or {}
        after = write.after["metadata"].get("annotations") or {}
        if asked is None and after.get(protocol.DESIRED_DRAIN) == request:
            asked = write.wall
        elif (
            asked is not None
            and before.get(protocol.DESIRED_DRAIN) == "hold-" + request
            and after.get(protocol.DESIRED_DRAIN) == request
        ):
            released, releaser = write.wall, write.user
            break
    assert asked is not None, f"{node}: no request {request} in the audit log"
    assert released is not None, f"{node}: {request} never released, by the audit log"
    return released - asked, releaser


def _judged(
    plane: ControlPlane,
    node: str,
    request: str,
    since: datetime,
    max_hold: timedelta,
    record_property: Callable[[str, object], None],
) -> str:
    """The hold's age by the audit log, recorded and held to the bound; returns who
    released it."""
    held, releaser = held_for(plane, node, request, since)
    record_property("held_seconds", round(held.total_seconds(), 3))
    assert held <= max_hold + BOUND, f"{node}: {request} waited {held} (max-hold {max_hold})"
    return releaser


@pytest.mark.slow
@pytest.mark.parametrize("webhook", WEBHOOK_FAULTS * ROUNDS)  # ids hung0, hung1, ...
async def test_every_webhook_fault_releases_at_max_hold_every_time(
    install: Install,
    webhook: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    since = datetime.now(UTC)
    node = await released_behind(install, webhook, tmp_path)
    _judged(install.plane, node, REQUEST, since, WEBHOOK_MAX_HOLD, record_property)


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS * ROUNDS)
async def test_every_clock_step_ends_the_hold_at_max_hold_every_time(
    control_plane: ControlPlane,
    step: int,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    since = datetime.now(UTC)
    async with api_client(control_plane.admin_kubeconfig) as admin:
        await shared_namespace(admin, MCO_NS)
        node = await held_through_a_step(control_plane, admin, tmp_path, step)
    _judged(control_plane, node, DRAIN_B, since, CLOCK_MAX_HOLD, record_property)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(ROUNDS), ids=lambda n: f"round{n}")
async def test_every_expiry_committed_unanswered_is_expired_every_time(
    control_plane: ControlPlane,
    round_: int,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    since = datetime.now(UTC)
    async with api_client(control_plane.admin_kubeconfig) as admin:
        await shared_namespace(admin, MCO_NS)
        for attempt in range(ATTEMPTS):
            node = await expired_though_unanswered(control_plane, admin, tmp_path / str(attempt))
            if node is not None:
                break
        else:
            raise AssertionError(
                f"round {round_}: the expiry never committed unanswered in {ATTEMPTS} attempts"
            )
    releaser = _judged(control_plane, node, DRAIN_B, since, LATE_MAX_HOLD, record_property)
    # The audit log answered the agent's release 504 (or not at all): it is the agent's all
    # the same, not the test's write that came after it.
    assert releaser == agent_user(node)
