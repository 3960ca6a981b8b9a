"""The controller's loop in-process: a fake Kube (the Node as a dict, written with real JSON
Patch semantics), the real watch cache, metrics and host reader, and an injected clock, so
reaction and hold times are exact. The agent-process tests cover the same paths end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import errno
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from drain_guard import protocol
from drain_guard.core.nodes import NodeObj
from drain_guard.core.operations import Watched
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Applied, Conflict, PatchResult
from drain_guard.kube.listwatch import WatchCache
from drain_guard.node import host
from drain_guard.node.controller import Controller
from drain_guard.node.loop_settings import loop_settings
from drain_guard.protocol import HoldRecord
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.health import Health
from drain_guard.settings.agent import add_run_arguments, settings_from
from drain_guard.status.agent import AgentStatus
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.seedobjects import worker_node
from tests.helpers import CONFIG_A, CONFIG_B, IMAGE_A, IMAGE_B, MCO_NS, NODE

DRAIN_B = f"drain-{CONFIG_B}"
DRAIN_C = "drain-rendered-worker-" + "c" * 32
MAX_HOLD = timedelta(minutes=45)


class FakeKube:
    """The API server's copy of the Node; ``interfere`` runs before a patch lands (a racing
    writer), and a failed ``test`` operation is the API's 422."""

    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node
        self.patches = 0
        self.interfere: Callable[[], None] | None = None
        #: The next this many patches are refused (422) with nothing changed: a webhook.
        self.refuse = 0
        self.refused = 0
        self.landed = asyncio.Event()

    def obj(self) -> NodeObj:
        return NodeObj.from_dict(self.node)

    def write(
        self, annotations: Mapping[str, str | None], unschedulable: bool | None = None
    ) -> None:
        """Someone else (the MCD, an operator) writes the Node; None removes a key."""
        node = copy.deepcopy(self.node)
        ann = node["metadata"]["annotations"]
        for key, value in annotations.items():
            if value is None:
                ann.pop(key, None)
            else:
                ann[key] = value
        if unschedulable is not None:
            node["spec"]["unschedulable"] = unschedulable
        self._store(node)

    def _store(self, node: dict[str, Any]) -> None:
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        self.node = node

    async def get_node(self, name: str) -> NodeObj | None:
        return self.obj() if name == NODE else None

    async def patch_node_json(self, name: str, ops: Sequence[Mapping[str, Any]]) -> PatchResult:
        assert name == NODE
        if self.refuse:
            self.refuse -= 1
            self.refused += 1
            return Conflict(422, "denied by a webhook")
        if self.interfere is not None:
            interfere, self.interfere = self.interfere, None
            interfere()
        try:
            node = jsonpatch.apply_patch(self.node, [dict(op) for op in ops])
        except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict) as exc:
            return Conflict(422, str(exc))
        self.patches += 1
        self._store(node)
        self.landed.set()
        return Applied(self.obj())


@dataclass
class Events:
    """The Events the controller posts, in order."""

    node_uid: str | None = None
    posted: list[tuple[Any, ...]] = field(default_factory=list)
    #: The Events on the node's MachineConfigPool.
    pool: list[tuple[Any, ...]] = field(default_factory=list)
    #: Set by the first DrainReleased.
    released: asyncio.Event = field(default_factory=asyncio.Event)
    #: What each DrainReleased says let the drain go (empty: nothing said).
    whys: list[str] = field(default_factory=list)
    #: The hold each DrainReleased ends, as its message tells what it was for.
    ended: list[HoldRecord] = field(default_factory=list)

    def drain_held(self, held_drain: str, reasons: Sequence[str], detail: str) -> None:
        self.posted.append(("DrainHeld", held_drain, tuple(reasons)))

    def drain_released(
        self,
        record: HoldRecord,
        outcome: str,
        held_for: timedelta,
        released_by: str | None = None,
        why: str = "",
    ) -> None:
        self.whys.append(why)
        self.ended.append(record)
        by = () if released_by is None else (released_by,)
        self.posted.append(("DrainReleased", record.held_drain, outcome, held_for, *by))
        self.released.set()

    def pool_held(
        self,
        pool: str,
        held_drain: str,
        reasons: Sequence[str],
        detail: str,
        since: datetime,
        expires: datetime,
    ) -> None:
        self.pool.append(("PoolRolloutHeld", pool, held_drain, tuple(reasons), expires))

    def pool_released(self, pool: str, held_drain: str, outcome: str, held_for: timedelta) -> None:
        self.pool.append(("PoolRolloutReleased", pool, held_drain, outcome))

    def hold_request_invalid(self, what: str, why: str) -> None:
        self.posted.append(("HoldRequestInvalid", what))


class FakeClock:
    def __init__(self) -> None:
        # A whole second: held-since (second precision) loses nothing, durations are exact.
        self.wall = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
        self.mono = 1000.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


@dataclass
class Env:
    controller: Controller
    kube: FakeKube
    cache: WatchCache
    clock: FakeClock
    metrics: Metrics
    events: Events
    host: HostFS

    def deliver(self) -> None:
        """The watch delivers the API's current Node."""
        self.cache.node = self.kube.obj()
        self.cache.node_seen_at = self.clock.monotonic()

    async def step(self) -> datetime | None:
        """The watch delivers the Node, and the loop makes one pass."""
        self.deliver()
        return await self.controller.step()

    def value(self, name: str, **labels: str) -> float:
        found = self.metrics.registry.get_sample_value(name, labels)
        assert found is not None, name
        return found

    def annotations(self) -> dict[str, str]:
        ann: dict[str, str] = self.kube.node["metadata"]["annotations"]
        return ann

    def build_pod(self, running: bool = True) -> None:
        pod = {
            "metadata": {
                "name": "build-pod",
                "namespace": MCO_NS,
                "labels": {"openshift.io/build.name": f"build-{CONFIG_B}"},
            },
            "spec": {"nodeName": NODE},
            "status": {"phase": "Running"},
        }
        self.cache.replace_pods([pod] if running else [])


def make_env(
    tmp_path: Path,
    *flags: str,
    node: dict[str, Any] | None = None,
    mco: Mapping[Watched, str] | None = None,
) -> Env:
    host = HostFS(tmp_path / "host", IMAGE_A)
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    argv = ["--node-name", NODE, "--host-root", str(host.root)]
    argv += ["--cmdline-file", str(host.cmdline_file), "--boot-id-file", str(host.boot_id_file)]
    argv += ["--max-hold", "45m", *flags]
    settings = settings_from(parser.parse_args(argv), {})
    kube = FakeKube(node or worker_node(NODE, CONFIG_A, IMAGE_A))
    kube.node["metadata"]["resourceVersion"] = "10"
    metrics, clock, events = Metrics(), FakeClock(), Events()
    cache = WatchCache()
    cache.replace_pods([])
    cache.node_synced = True
    loop = loop_settings(settings)
    controller = Controller(
        loop, kube, metrics, Health(metrics), events, cache, clock=clock, mco=mco
    )
    return Env(controller, kube, cache, clock, metrics, events, host)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


async def _hold_b(env: Env) -> None:
    """A build pod runs; the MCD asks for B; 0.25 s later the loop holds it."""
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B})
    env.deliver()
    env.clock.mono += 0.25  # the pass runs a quarter second after the watch delivered it
    await env.controller.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B


async def test_a_hold_begins_and_ends_with_its_reaction_and_duration_exact(env: Env) -> None:
    await _hold_b(env)
    assert env.value("drain_guard_holds_total", reason="build-pod") == 1
    assert env.value("drain_guard_reaction_seconds_sum") == 0.25
    assert env.value("drain_guard_hold_active", reason="build-pod") == 1
    assert env.value("drain_guard_drain_requests_total", verb="drain") == 1
    status = env.controller.status()
    assert (status.decision, status.held_request, status.since) == ("hold", DRAIN_B, env.clock.wall)
    await env.step()  # the watch shows our own write: nothing new, nothing written
    assert env.kube.patches == 1
    assert env.value("drain_guard_drain_requests_total", verb="hold") == 0

    env.clock.advance(600)
    env.build_pod(running=False)
    await env.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    assert env.value("drain_guard_releases_total", outcome="safe") == 1
    assert env.value("drain_guard_hold_duration_seconds_sum") == 600
    assert env.value("drain_guard_hold_active", reason="build-pod") == 0
    # Three Events (each an API write): the start on the pool (of rendered-worker-…), which
    # waited on the hold, at the latest until since + max-hold; none on the Node, whose
    # annotations say the hold while it lasts; the end on both, the Node's with what the hold
    # was for.
    expires = env.clock.wall - timedelta(seconds=600) + MAX_HOLD
    assert env.events.pool == [
        ("PoolRolloutHeld", "worker", DRAIN_B, ("build-pod",), expires),
        ("PoolRolloutReleased", "worker", DRAIN_B, "safe"),
    ]
    assert env.events.posted == [("DrainReleased", DRAIN_B, "safe", timedelta(seconds=600))]
    [ended] = env.events.ended
    assert ended.reason_names == ("build-pod",)
    assert ended.detail.startswith(f"build-pod: build pod {MCO_NS}/build-pod")
    assert env.controller.status().held_request is None


async def test_a_hold_of_a_node_in_no_pool_is_told_on_the_node(tmp_path: Path) -> None:
    """Without a rendered config of MCO's form no pool can be told: the start is a DrainHeld
    on the Node, the end its DrainReleased; two Events."""
    node = worker_node(NODE, CONFIG_A, IMAGE_A)
    for key in (protocol.DESIRED_CONFIG, protocol.CURRENT_CONFIG):
        del node["metadata"]["annotations"][key]
    env = make_env(tmp_path, node=node)
    await _hold_b(env)
    env.clock.advance(60)
    env.build_pod(running=False)
    await env.step()
    assert env.events.posted == [
        ("DrainHeld", DRAIN_B, ("build-pod",)),
        ("DrainReleased", DRAIN_B, "safe", timedelta(seconds=60)),
    ]
    assert env.events.pool == []


async def test_a_change_of_the_hold_refreshes_its_start_event_on_the_pool(env: Env) -> None:
    """A build pod starts on a node held for its image: the pool's Event says the new reasons
    (the recorder aggregates it into the hold's one Event); nothing is posted on the Node."""
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_A})
    await env.step()
    assert env.annotations()[protocol.HOLD_REASONS] == "noop-image"
    env.build_pod()
    env.clock.advance(10)
    await env.step()
    assert env.annotations()[protocol.HOLD_REASONS] == "build-pod,noop-image"
    assert [(e[0], e[2], e[3]) for e in env.events.pool] == [
        ("PoolRolloutHeld", DRAIN_B, ("noop-image",)),
        ("PoolRolloutHeld", DRAIN_B, ("build-pod", "noop-image")),
    ]
    assert env.events.posted == []


async def test_a_hold_expires_at_max_hold_by_the_decisions_own_recheck(env: Env) -> None:
    await _hold_b(env)
    recheck = await env.step()
    assert recheck == env.clock.wall + MAX_HOLD
    env.clock.advance(MAX_HOLD.total_seconds())
    await env.controller.step()  # woken by the recheck time, no watch event
    assert env.annotations()[protocol.RELEASED] == DRAIN_B
    assert env.value("drain_guard_releases_total", outcome="expired") == 1
    assert env.value("drain_guard_hold_duration_seconds_sum") == MAX_HOLD.total_seconds()


async def test_the_mcds_newer_request_supersedes_the_hold_and_is_held_anew(env: Env) -> None:
    await _hold_b(env)
    env.clock.advance(30)
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_C})
    await env.step()
    assert env.annotations()[protocol.HELD_DRAIN] == DRAIN_C
    assert env.value("drain_guard_releases_total", outcome="superseded") == 1
    assert env.value("drain_guard_holds_total", reason="build-pod") == 2
    assert env.events.posted == [("DrainReleased", DRAIN_B, "superseded", timedelta(seconds=30))]
    assert [(e[0], e[2]) for e in env.events.pool] == [
        ("PoolRolloutHeld", DRAIN_B),
        ("PoolRolloutReleased", DRAIN_B),
        ("PoolRolloutHeld", DRAIN_C),
    ]


async def test_a_node_moved_to_another_pool_releases_on_the_pool_it_held(env: Env) -> None:
    """Relabelled into pool infra while held on worker: infra's request supersedes the hold.
    The release goes on worker's stream (where "waiting" was said), the new hold on infra's."""
    await _hold_b(env)
    infra = "rendered-infra-" + "c" * 32
    env.kube.write({protocol.DESIRED_CONFIG: infra, protocol.DESIRED_DRAIN: f"drain-{infra}"})
    await env.step()
    assert [(e[0], e[1]) for e in env.events.pool] == [
        ("PoolRolloutHeld", "worker"),
        ("PoolRolloutReleased", "worker"),
        ("PoolRolloutHeld", "infra"),
    ]


async def test_the_mcd_writing_the_held_request_again_resumes_the_same_hold(env: Env) -> None:
    await _hold_b(env)
    since = env.annotations()[protocol.HELD_SINCE]
    env.clock.advance(60)
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B})  # a restarted MCD, over the hold
    await env.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert env.annotations()[protocol.HELD_SINCE] == since
    assert env.value("drain_guard_holds_total", reason="build-pod") == 1
    assert env.value("drain_guard_hold_duration_seconds_count") == 0
    assert env.value("drain_guard_hold_active", reason="build-pod") == 1


async def test_a_release_by_someone_else_ends_the_hold_as_manual(env: Env) -> None:
    await _hold_b(env)
    env.clock.advance(90)
    release: dict[str, str | None] = dict.fromkeys(protocol.OWNED_KEYS)
    env.kube.write({**release, protocol.DESIRED_DRAIN: DRAIN_B, protocol.RELEASED: DRAIN_B})
    await env.step()
    assert env.value("drain_guard_releases_total", outcome="manual") == 1
    assert env.events.posted[-1] == ("DrainReleased", DRAIN_B, "manual", timedelta(seconds=90))
    assert env.kube.patches == 1  # released stays: the request is not held again
    assert "released earlier" in env.controller.status().explanation


async def test_who_released_is_told_in_the_event_the_log_and_the_status(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    await _hold_b(env)
    env.clock.advance(90)
    release: dict[str, str | None] = dict.fromkeys(protocol.OWNED_KEYS)
    marker = {protocol.RELEASED: DRAIN_B, protocol.RELEASED_BY: "alice@example.com"}
    env.kube.write({**release, protocol.DESIRED_DRAIN: DRAIN_B, **marker})
    with caplog.at_level(logging.INFO, "drain_guard.node.controller"):
        await env.step()
    assert env.events.posted[-1] == (
        "DrainReleased",
        DRAIN_B,
        "manual",
        timedelta(seconds=90),
        "alice@example.com",
    )
    (ended,) = [r for r in caplog.records if r.getMessage() == "hold ended"]
    assert ended.__dict__["fields"]["releasedBy"] == "alice@example.com"
    status = env.controller.status()
    assert status.released_by == "alice@example.com"
    assert f"{DRAIN_B} was released by alice@example.com and is not held again" in (
        status.explanation
    )
    assert status.invalid_inputs == ()


@pytest.mark.parametrize(
    ("value", "why"),
    [("x" * 513, "longer than 512 bytes"), ("alice\nroot", "control character")],
)
async def test_a_malformed_released_by_is_invalid_input_and_breaks_nothing(
    env: Env, value: str, why: str
) -> None:
    """Anyone who may patch the Node can write it (4.15, no policy): the release is told
    without a name, the value reported once as invalid input, the agent goes on."""
    await _hold_b(env)
    env.clock.advance(90)
    release: dict[str, str | None] = dict.fromkeys(protocol.OWNED_KEYS)
    marker = {protocol.RELEASED: DRAIN_B, protocol.RELEASED_BY: value}
    env.kube.write({**release, protocol.DESIRED_DRAIN: DRAIN_B, **marker})
    await env.step()
    assert env.events.posted[-1] == ("DrainReleased", DRAIN_B, "manual", timedelta(seconds=90))
    status = env.controller.status()
    assert status.released_by is None
    assert "released earlier" in status.explanation
    (bad,) = status.invalid_inputs
    assert bad.what.startswith(f"{protocol.RELEASED_BY}=")
    assert why in bad.why
    assert env.value("drain_guard_invalid_input_total", kind="annotation") == 1
    await env.step()
    assert env.value("drain_guard_invalid_input_total", kind="annotation") == 1  # once
    # The MCD moves on: the agent removes the marker, the bad value with it.
    env.kube.write({protocol.DESIRED_DRAIN: "uncordon-" + DRAIN_B.removeprefix("drain-")})
    await env.step()
    assert not set(protocol.RELEASED_KEYS) & set(env.annotations())
    assert env.controller.status().invalid_inputs == ()


async def test_a_hold_found_at_start_is_resumed_not_counted(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.build_pod()
    since = env.clock.wall - timedelta(minutes=5)
    env.kube.write(
        {
            protocol.DESIRED_DRAIN: "hold-" + DRAIN_B,
            protocol.DESIRED_IMAGE: IMAGE_B,
            protocol.HELD_DRAIN: DRAIN_B,
            protocol.HOLD_REASONS: "build-pod",
            protocol.HELD_SINCE: protocol.format_rfc3339(since),
            protocol.HOLD_DETAIL: "build-pod: stale detail",
        }
    )
    with caplog.at_level(logging.INFO, "drain_guard.node.controller"):
        await env.step()
    assert caplog.records[0].getMessage() == "resuming hold found on the node"
    assert env.value("drain_guard_holds_total", reason="build-pod") == 0
    # Its own write from before the restart, not a request: none is counted, of any verb.
    for verb in protocol.Verb:
        assert env.value("drain_guard_drain_requests_total", verb=verb.value) == 0, verb
    assert env.value("drain_guard_hold_started_timestamp_seconds") == since.timestamp()
    # The stale detail was rewritten: an update of the same hold, with its Event (on its pool).
    assert env.controller.status().decision == "update-hold"
    assert env.events.pool == [
        ("PoolRolloutHeld", "worker", DRAIN_B, ("build-pod",), since + MAX_HOLD)
    ]
    assert env.events.posted == []


async def test_a_hold_found_at_start_counts_only_the_reasons_it_gains(env: Env) -> None:
    """A restarted agent: the hold it finds was counted under its reasons by the agent that
    wrote it; a reason it gains now (a build pod starts) is counted, those are not again."""
    env.kube.write(
        {
            protocol.DESIRED_DRAIN: "hold-" + DRAIN_B,
            protocol.DESIRED_IMAGE: IMAGE_A,
            protocol.HELD_DRAIN: DRAIN_B,
            protocol.HOLD_REASONS: "noop-image",
            protocol.HELD_SINCE: protocol.format_rfc3339(env.clock.wall),
            protocol.HOLD_DETAIL: "noop-image: stale detail",
        }
    )
    await env.step()
    env.build_pod()
    env.clock.advance(10)
    await env.step()
    assert env.annotations()[protocol.HOLD_REASONS] == "build-pod,noop-image"
    assert env.value("drain_guard_holds_total", reason="build-pod") == 1
    assert env.value("drain_guard_holds_total", reason="noop-image") == 0


async def test_a_hold_superseded_while_no_agent_ran_ends_when_the_new_one_is_written(
    env: Env,
) -> None:
    """The MCD wrote C over hold-B while no agent ran, and C is held too: B's end is counted
    (before this, only a clean-up counted it; a new hold of C did not)."""
    env.build_pod()
    since = env.clock.wall - timedelta(minutes=5)
    env.kube.write(
        {
            protocol.DESIRED_DRAIN: DRAIN_C,
            protocol.DESIRED_IMAGE: IMAGE_B,
            protocol.HELD_DRAIN: DRAIN_B,
            protocol.HOLD_REASONS: "build-pod",
            protocol.HELD_SINCE: protocol.format_rfc3339(since),
        }
    )
    await env.step()
    assert env.annotations()[protocol.HELD_DRAIN] == DRAIN_C
    assert env.value("drain_guard_releases_total", outcome="superseded") == 1
    assert env.value("drain_guard_hold_duration_seconds_sum") == 300
    assert env.value("drain_guard_holds_total", reason="build-pod") == 1
    assert env.value("drain_guard_hold_active", reason="build-pod") == 1


async def test_a_hold_written_after_the_cordon_counts_a_lost_race(env: Env) -> None:
    env.build_pod()
    env.kube.write(
        {protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B}, unschedulable=True
    )
    await env.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert env.value("drain_guard_race_lost_total") == 1


async def test_a_cordon_just_after_the_hold_counts_a_lost_race_once(env: Env) -> None:
    """The MCC's sync read the request before the hold landed and cordons a second after it
    (the drain controller acts on no hold- value): a lost race, as a hold written on a
    cordoned Node is. Its drain then completes (released race-lost): the same race, not
    counted again."""
    await _hold_b(env)
    env.clock.advance(1)
    env.kube.write({}, unschedulable=True)
    await env.step()
    assert env.value("drain_guard_race_lost_total") == 1
    env.clock.advance(60)
    env.kube.write({protocol.LAST_APPLIED_DRAIN: DRAIN_B})
    await env.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    assert env.value("drain_guard_releases_total", outcome="race-lost") == 1
    assert env.value("drain_guard_race_lost_total") == 1


async def test_a_cordon_long_after_the_hold_is_no_lost_race(env: Env) -> None:
    """An operator cordons the held node ten minutes into the hold: not the MCC's race."""
    await _hold_b(env)
    env.clock.advance(600)
    env.kube.write({}, unschedulable=True)
    await env.step()
    assert env.value("drain_guard_race_lost_total") == 0


async def test_a_lost_compare_and_swap_is_decided_again_on_the_current_node(env: Env) -> None:
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B})
    # The MCD's newer request lands between our read and our write: B's patch fails its test.
    env.kube.interfere = lambda: env.kube.write({protocol.DESIRED_DRAIN: DRAIN_C})
    await env.step()
    assert env.annotations()[protocol.HELD_DRAIN] == DRAIN_C
    assert env.kube.patches == 1
    assert env.value("drain_guard_holds_total", reason="build-pod") == 1


async def test_release_on_exit_ends_the_hold_as_uninstall(env: Env) -> None:
    await _hold_b(env)
    env.clock.advance(42)
    await env.controller.release_on_exit()
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    assert env.value("drain_guard_releases_total", outcome="uninstall") == 1
    assert env.events.posted[-1] == ("DrainReleased", DRAIN_B, "uninstall", timedelta(seconds=42))


async def test_a_hold_puts_its_pool_in_view(env: Env) -> None:
    """Issue 25: a held node stalls its pool's rollout; the metric says which pool waits."""
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B})
    await env.step()
    assert env.value("drain_guard_pool_rollout_held", pool="worker") == 1
    assert "  pool:          worker pool waiting: " in env.controller.status().to_text()
    env.build_pod(running=False)
    await env.step()
    assert env.value("drain_guard_pool_rollout_held", pool="worker") == 0


async def test_observe_only_writes_nothing_and_counts_a_would_be_hold_once(
    tmp_path: Path,
) -> None:
    env = make_env(tmp_path, "--observe-only")
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B})
    await env.step()
    await env.step()
    assert env.kube.patches == 0
    assert env.value("drain_guard_would_holds_total", reason="build-pod") == 1
    assert env.value("drain_guard_holds_total", reason="build-pod") == 0
    status = env.controller.status()
    assert status.held_request is None
    assert status.explanation.startswith("observe-only, not written: would hold")
    assert env.events.posted == []
    assert env.events.pool == []

    first = status.last_would_hold
    assert first is not None
    assert (first.request, first.reasons) == (DRAIN_B, ("build-pod",))
    # The drain goes ahead (nothing was held): /status still shows what would have been held,
    # and when (issue 25: it read "idle" a second after the log's "would hold").
    env.clock.wall += timedelta(seconds=30)
    env.kube.write({protocol.LAST_APPLIED_DRAIN: DRAIN_B})
    env.build_pod(running=False)
    await env.step()
    status = env.controller.status()
    assert status.decision == "idle"
    assert status.last_would_hold == first
    assert f"would hold:    {DRAIN_B} at " in status.to_text()
    assert "(30s ago) for build-pod: build-pod: build pod" in status.to_text()


# --- a hold counts once under each of its reasons (issue 37, docs/metrics.md) ---------------


@pytest.mark.parametrize(
    ("flags", "counter", "other"),
    [
        ((), "drain_guard_holds_total", "drain_guard_would_holds_total"),
        (("--observe-only",), "drain_guard_would_holds_total", "drain_guard_holds_total"),
    ],
    ids=["enforcing", "observe-only"],
)
async def test_a_request_with_two_reasons_counts_once_under_each(
    tmp_path: Path, flags: tuple[str, ...], counter: str, other: str
) -> None:
    """A build pod runs and the request is for the booted image: build-pod and noop-image at
    once. Each counts once, however often the request is decided again."""
    env = make_env(tmp_path, *flags)
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_A})
    for _ in range(3):
        await env.step()
        env.clock.advance(10)
    assert env.value(counter, reason="build-pod") == 1
    assert env.value(counter, reason="noop-image") == 1
    assert env.value(other, reason="build-pod") == 0
    assert env.value(other, reason="noop-image") == 0


@pytest.mark.parametrize(
    ("flags", "counter"),
    [((), "drain_guard_holds_total"), (("--observe-only",), "drain_guard_would_holds_total")],
    ids=["enforcing", "observe-only"],
)
async def test_a_reason_gained_while_held_counts_once_and_a_new_request_again(
    tmp_path: Path, flags: tuple[str, ...], counter: str
) -> None:
    """The issue's drain: held for its image, then a build pod starts (the drain would have
    evicted it). build-pod counts when gained, not again when it goes and comes back; a new
    request counts anew under each of its reasons."""
    env = make_env(tmp_path, *flags)
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_A})
    await env.step()
    assert env.value(counter, reason="noop-image") == 1
    assert env.value(counter, reason="build-pod") == 0
    for running in (True, False, True):
        env.build_pod(running=running)
        env.clock.advance(10)
        await env.step()
    assert env.value(counter, reason="build-pod") == 1
    assert env.value(counter, reason="noop-image") == 1

    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_C, protocol.DESIRED_IMAGE: IMAGE_A})
    env.clock.advance(10)
    await env.step()
    assert env.value(counter, reason="build-pod") == 2
    assert env.value(counter, reason="noop-image") == 2


async def test_observe_only_status_says_what_it_saw_over_its_run(tmp_path: Path) -> None:
    """The admin's view before enforcing (issue 37): the drain requests, the would-be holds by
    reason, and the build pod the drain evicted (gone from the cordoned node), in /status and
    its text; a build pod gone from a schedulable node is not an eviction."""
    env = make_env(tmp_path, "--observe-only")
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_A})
    await env.step()
    env.kube.write({}, unschedulable=True)  # the MCC cordons: nothing held it
    env.clock.advance(5)
    await env.step()
    # and evicts the build pod: deleted with a grace period, then gone (counted once).
    pod = {
        "metadata": {
            "name": "build-pod",
            "namespace": MCO_NS,
            "labels": {"openshift.io/build.name": f"build-{CONFIG_B}"},
            "deletionTimestamp": "2026-03-01T12:00:10Z",
        },
        "spec": {"nodeName": NODE},
        "status": {"phase": "Running"},
    }
    env.cache.replace_pods([pod])
    env.clock.advance(5)
    await env.step()
    env.build_pod(running=False)
    env.clock.advance(5)
    await env.step()
    env.kube.write({protocol.LAST_APPLIED_DRAIN: DRAIN_B}, unschedulable=False)
    await env.step()

    # A second request, while a build runs to its end on the schedulable node.
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_C, protocol.DESIRED_IMAGE: IMAGE_B})
    await env.step()
    env.cache.replace_pods([])
    await env.step()

    observed = env.controller.status().observed
    assert observed is not None
    assert observed.requests == 2
    assert dict(observed.would_holds) == {"build-pod": 2, "noop-image": 1}
    assert (observed.build_pods_evicted, observed.last_evicted) == (1, f"{MCO_NS}/build-pod")
    status = env.controller.status()
    assert AgentStatus.from_json(status.to_json()) == status
    line = (
        "  observed:      since 2026-03-01T12:00:00Z: 2 drain requests; would have held, by"
        " reason: build-pod 2, noop-image 1; build pods gone from the cordoned node (a drain"
        f" evicts them): 1 (latest {MCO_NS}/build-pod)"
    )
    assert line in status.to_text().splitlines()
    # docs/install.md ("First rollout") quotes this very line.
    assert f"   {line}\n" in (Path(__file__).parents[2] / "docs" / "install.md").read_text()


async def test_an_enforcing_agent_shows_no_observe_only_summary(env: Env) -> None:
    await _hold_b(env)
    assert env.controller.status().observed is None
    assert "observed:" not in env.controller.status().to_text()


async def test_status_and_gauges_come_from_the_decision_with_no_request_pending(env: Env) -> None:
    env.build_pod()
    await env.step()
    status = env.controller.status()
    assert (status.decision, status.held_request) == ("idle", None)
    assert [(p.name, p.phase) for p in status.build_pods or ()] == [("build-pod", "Running")]
    assert env.value("drain_guard_build_pods") == 1
    assert env.value("drain_guard_image_match") == 1  # desiredImage is the booted image
    env.kube.write({protocol.DESIRED_IMAGE: IMAGE_B})
    env.build_pod(running=False)
    await env.step()
    assert env.value("drain_guard_build_pods") == 0
    assert env.value("drain_guard_image_match") == 0
    assert env.controller.status().desired_digest == IMAGE_B.rpartition("@")[2]


async def test_a_malformed_hold_request_is_logged_and_counted_once_per_value(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.kube.write({protocol.HOLD_REQUEST: "tomorrow"})
    with caplog.at_level(logging.WARNING, "drain_guard.node.controller"):
        for _ in range(3):
            await env.step()
        env.kube.write({protocol.HOLD_REQUEST: "soon"})
        await env.step()
        await env.step()
    assert [r.getMessage().split(":")[1] for r in caplog.records] == [
        " drain-guard.io/hold-request='tomorrow'",
        " drain-guard.io/hold-request='soon'",
    ]
    assert env.value("drain_guard_invalid_input_total", kind="hold_request") == 2
    assert [i.what for i in env.controller.status().invalid_inputs] == [
        "drain-guard.io/hold-request='soon'"
    ]
    # One Warning Event per value, where operators look (a typo silently held nothing).
    assert [e for e in env.events.posted if e[0] == "HoldRequestInvalid"] == [
        ("HoldRequestInvalid", "drain-guard.io/hold-request='tomorrow'"),
        ("HoldRequestInvalid", "drain-guard.io/hold-request='soon'"),
    ]


async def _run_until_landed(env: Env) -> None:
    """The loop itself, woken by the watch once; stopped when a patch lands."""
    env.deliver()
    env.cache.changed.set()
    loop = asyncio.create_task(env.controller.run())
    try:
        await env.kube.landed.wait()
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


async def test_ten_refused_writes_in_a_row_are_retried_on_the_backoffs_timer(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27: after five refusals the loop waited for the next watch event, dropping its
    timers; a webhook's refusal comes with no event. Now the pass is retried with backoff,
    with no event at all, and the hold lands; one warning and one recovery line, counted."""
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B})
    env.kube.refuse = 10
    await _run_until_landed(env)
    assert env.kube.refused == 10
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert env.value("drain_guard_retries_total", part="controller") == 2
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2, lines
    assert "API refusing it since" in lines[0]
    assert "(node write failed: 422 5 times in a row: denied by a webhook)" in lines[0]
    assert "API accepting it again" in lines[1]


async def test_an_oserror_in_a_decision_is_logged_once_counted_and_retried(
    env: Env, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: out of descriptors, every decision raised OSError (EMFILE) and the first one
    ended the agent. Now the pass is retried: one warning with the traceback, then a
    recovery line, each failure counted."""
    env.build_pod()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_B})
    real_get = env.controller.booted.get
    failures = [OSError(errno.EMFILE, "Too many open files")] * 3

    async def get() -> Any:
        if failures:
            raise failures.pop()
        return await real_get()

    monkeypatch.setattr(env.controller.booted, "get", get)
    await _run_until_landed(env)
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert env.value("drain_guard_retries_total", part="controller") == 3
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, [r.getMessage() for r in warnings]
    assert "failing since" in warnings[0].getMessage()
    assert "(decision failed: OSError: [Errno 24] Too many open files)" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None
    assert "working again" in warnings[1].getMessage()


async def test_the_command_line_is_read_once_per_boot_and_no_descriptor_is_not_a_new_boot(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: the kernel command line was read on every decision, though it cannot change
    without a reboot. Now each check reads the boot id alone, and the command line (and the
    deployment it names) only when the boot id is new; issue 21: out of descriptors, an
    unreadable boot id is not a new boot."""
    cmdline, boot_id = str(env.host.cmdline_file), str(env.host.boot_id_file)
    opened: list[str] = []
    starved: set[str] = set()
    real_open = open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        if str(file) in starved:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(host, "open", counting_open, raising=False)
    monkeypatch.setattr(Path, "open", lambda p, *a, **k: counting_open(p, *a, **k))
    first = await env.controller.booted.get()
    assert first.digest is not None
    for _ in range(3):
        assert await env.controller.booted.get() == first
    assert opened.count(cmdline) == 1
    assert opened.count(boot_id) == 4

    env.host.reboot_into(IMAGE_B)  # a new boot: a new id and a new command line
    opened.clear()  # reboot_into's own writes
    second = await env.controller.booted.get()
    assert second.digest is not None
    assert second.digest != first.digest
    assert opened.count(cmdline) == 1

    starved.add(boot_id)
    for _ in range(3):
        assert await env.controller.booted.get() == second
    assert opened.count(cmdline) == 1
    assert opened.count(boot_id) == 4


async def test_a_hold_past_max_hold_is_released_after_refused_writes_with_no_event(
    env: Env,
) -> None:
    """Issue 27: with --max-hold 10s a hold lasted 43 s after refusals: the max-hold timer
    was dropped with the retry. Now the release is retried on the backoff's timer alone."""
    await _hold_b(env)
    env.kube.landed.clear()
    env.clock.advance(MAX_HOLD.total_seconds())
    env.kube.refuse = 7
    await _run_until_landed(env)
    assert env.kube.refused == 7
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    assert env.value("drain_guard_releases_total", outcome="expired") == 1


async def test_a_release_that_cannot_be_written_is_retried_and_escalated_until_it_lands(
    env: Env, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: a release the API server does not commit (a webhook refusing it, etcd
    down) was only retried: nothing told an operator before the MCD's hour ran out. Now the
    first failure sets /status's releaseFailing and its metric, each retry counts an attempt,
    and the release landing clears both."""
    await _hold_b(env)
    env.kube.landed.clear()
    env.clock.advance(MAX_HOLD.total_seconds())
    real_patch = env.kube.patch_node_json
    seen: list[tuple[int, float]] = []

    async def patch(name: str, ops: Sequence[Mapping[str, Any]]) -> PatchResult:
        failing = env.controller.status().release_failing
        gauge = env.value("drain_guard_release_failing_since_timestamp_seconds")
        seen.append((0 if failing is None else failing.attempts, gauge))
        if len(seen) <= 3:
            raise KubeError(500, 'failed calling webhook "release.drain-guard.io": timeout')
        return await real_patch(name, ops)

    monkeypatch.setattr(env.kube, "patch_node_json", patch)
    failed_at = env.clock.now().timestamp()
    await _run_until_landed(env)
    assert seen == [(0, 0.0), (1, failed_at), (2, failed_at), (3, failed_at)]
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    assert env.value("drain_guard_releases_total", outcome="expired") == 1
    assert env.controller.status().release_failing is None
    assert env.value("drain_guard_release_failing_since_timestamp_seconds") == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "drain_guard.node.controller"]
    assert [line for line in lines if line.startswith("release of ")] == [
        f"release of {DRAIN_B} (expired) failed; retried until it lands: 500 failed calling"
        ' webhook "release.drain-guard.io": timeout',
        f"release of {DRAIN_B} no longer failing after 3 failed attempts since"
        f" {protocol.format_rfc3339(env.clock.now())}",
    ]


async def test_an_expiry_release_answered_504_that_committed_is_counted_as_expired(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 F3: during an etcd freeze the release was answered 504 yet committed; the
    next pass found the request restored and reported an operator's release (manual)."""
    await _hold_b(env)
    env.clock.advance(MAX_HOLD.total_seconds())
    real_patch = env.kube.patch_node_json

    answered: list[PatchResult] = []

    async def committed_then_504(name: str, ops: Sequence[Mapping[str, Any]]) -> PatchResult:
        answered.append(await real_patch(name, ops))
        if len(answered) == 1:
            raise KubeError(504, "Timeout: request did not complete within requested timeout")
        return answered[-1]

    monkeypatch.setattr(env.kube, "patch_node_json", committed_then_504)
    env.deliver()
    env.cache.changed.set()
    loop = asyncio.create_task(env.controller.run())
    try:
        # The loop retries on the Node as the watch last showed it: its compare-and-swap
        # fails, it reads the Node, and finds the request restored.
        async with asyncio.timeout(30):
            await env.events.released.wait()
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
    assert isinstance(answered[0], Applied)  # the first release committed
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    assert env.value("drain_guard_releases_total", outcome="expired") == 1
    assert env.value("drain_guard_releases_total", outcome="manual") == 0
    assert env.events.posted[-1][:3] == ("DrainReleased", DRAIN_B, "expired")


@pytest.mark.parametrize(
    "step", [timedelta(minutes=-4), timedelta(seconds=-90), timedelta(hours=1)]
)
async def test_a_step_of_the_wall_clock_neither_lengthens_nor_shortens_a_hold(
    env: Env, step: timedelta
) -> None:
    """Issue 35 F2: with the clock stepped back 4 min (or 90 s, under the 2-minute skew
    allowance) a hold lasted max-hold plus the step: the agent's own known start was
    discarded with the Node's, both "in the future", and the hold's clock restarted; a step
    forward aged it at once. The hold's age is now the monotonic clock's."""
    await _hold_b(env)
    env.clock.wall += step  # the wall clock alone: the monotonic clock does not step
    env.clock.advance(MAX_HOLD.total_seconds() - 1)
    await env.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert env.controller.status().time_left == timedelta(seconds=1)
    env.clock.advance(1)
    await env.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    assert env.value("drain_guard_releases_total", outcome="expired") == 1
    assert env.events.posted[-1] == ("DrainReleased", DRAIN_B, "expired", MAX_HOLD)


async def test_a_booted_image_unreadable_at_start_is_read_again_until_it_is_known(
    tmp_path: Path,
) -> None:
    """Issue 35 F4: the origin file missing at start (for a moment, at boot) left the
    noop-image guard off for the life of the process: the reader kept its error until the
    boot changed. Now a failed read is due again with backoff, the loop wakes for it with
    no event, /status says since when it fails, and the guard holds once it is known."""
    env = make_env(tmp_path)
    host_fs = HostFS(tmp_path / "host", IMAGE_A)  # the env's host tree, by its path
    origin = host_fs.origin_file()
    kept = origin.read_text()
    origin.unlink()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, protocol.DESIRED_IMAGE: IMAGE_A})
    await env.step()  # a drain for the booted image: held only if the image is known
    status = env.controller.status()
    assert status.booted.digest is None
    assert status.booted.error is not None
    assert status.booted.error_since == env.clock.now()
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B  # let through: abstains
    delay = env.controller.booted.retry_in()
    assert delay is not None
    assert 0.5 <= delay <= 1.0  # the backoff's first step
    origin.write_text(kept)
    env.clock.advance(delay)
    # No Node event: the loop's timer is the reader's (the decision names none here).
    recheck = env.controller.wake_at(None)
    assert recheck == env.clock.now()
    await env.controller.step()
    status = env.controller.status()
    assert status.booted.error is None
    assert status.booted.error_since is None
    assert env.controller.booted.retry_in() is None
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B  # noop-image


async def test_readyz_fails_while_node_writes_fail_though_reads_answer(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: in an etcd freeze /readyz said 200 for 22 s while every write timed out: the
    watch cache answered reads, which count as contact. A write that fails without an answer
    or with a 5xx now makes the agent unready until a pass succeeds; a refusal (422) does not."""
    await _hold_b(env)
    for resource in (Watched.NODE, Watched.POD):
        env.controller.counters.watch_state(resource, WatchStatus(listed=True, watching=True))
    env.controller.counters.api_contact()
    assert env.controller.ready() == (True, "")
    env.clock.advance(MAX_HOLD.total_seconds())
    real_patch = env.kube.patch_node_json

    async def frozen(name: str, ops: Sequence[Mapping[str, Any]]) -> PatchResult:
        raise KubeError(0, "patch_node: TimeoutError: no answer within 8s")

    monkeypatch.setattr(env.kube, "patch_node_json", frozen)
    env.controller.counters.api_contact()  # a read answered meanwhile
    with pytest.raises(KubeError):
        await env.step()
    ready, why = env.controller.ready()
    assert not ready
    assert why == (
        f"node writes failing since {protocol.format_rfc3339(env.clock.now())}"
        " (no answer: patch_node: TimeoutError: no answer within 8s)"
    )
    monkeypatch.setattr(env.kube, "patch_node_json", real_patch)
    await env.step()
    assert env.controller.ready() == (True, "")


def _pool_moved_to_b(env: Env) -> None:
    """4.15's pool, listed: moved to config B, still BuildSuccess of A (the build about to
    start: noop-image's ``expected``)."""
    mco = env.controller.mco
    mco.objects(env.kube.obj().annotations)  # the Node seen: its pool's watch follows it
    pools = mco.caches[Watched.MACHINECONFIGPOOL]
    built = {"type": "BuildSuccess", "status": "True"}
    pools.replace(
        [
            {
                "metadata": {"name": "worker"},
                "spec": {"configuration": {"name": CONFIG_B}},
                "status": {"configuration": {"name": CONFIG_A}, "conditions": [built]},
            }
        ]
    )


async def test_a_request_written_again_after_desired_drain_moved_on_is_a_new_wait(
    tmp_path: Path,
) -> None:
    """noop-image's expected wait is keyed by the request's stay in desiredDrain, not by its
    name. The window of drain-B runs out and the hold is released; while MCO has not acted,
    drain-B is the same wait (not held again). Once desiredDrain moved on (drained, uncordoned)
    the same name requested again (a revert X→Y→X, the config requested again) is a new wait
    and gets its own window, bounded as the first."""
    env = make_env(tmp_path, mco={Watched.MACHINECONFIGPOOL: "v1"})
    _pool_moved_to_b(env)
    same_image = {protocol.DESIRED_CONFIG: CONFIG_B, protocol.DESIRED_IMAGE: IMAGE_A}
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B, **same_image})
    until = await env.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert until == env.clock.wall + timedelta(minutes=5)
    env.clock.advance(300)
    await env.step()  # no build came in time: let go
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    env.clock.advance(60)
    await env.step()  # MCO has not acted yet: the same wait, not held again
    assert env.annotations()[protocol.DESIRED_DRAIN] == DRAIN_B
    for drain, applied in (
        (DRAIN_B, DRAIN_B),
        (f"uncordon-{CONFIG_B}", DRAIN_B),
        (f"uncordon-{CONFIG_B}", f"uncordon-{CONFIG_B}"),
    ):
        env.kube.write({protocol.DESIRED_DRAIN: drain, protocol.LAST_APPLIED_DRAIN: applied})
        env.clock.advance(30)
        await env.step()
    env.kube.write({protocol.DESIRED_DRAIN: DRAIN_B})
    until = await env.step()
    assert env.annotations()[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert until == env.clock.wall + timedelta(minutes=5)
    assert env.value("drain_guard_holds_total", reason="noop-image") == 2
