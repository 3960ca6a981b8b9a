"""EventRecorder against the API simulator through the real kubernetes_asyncio client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from drain_guard.commands.preflight import event_rows
from drain_guard.core.operations import Watched
from drain_guard.kube.client import Kube
from drain_guard.node.events import (
    EVENT_NAMESPACE,
    MAX_MESSAGE,
    EventRecorder,
)
from drain_guard.node.mcowatch import McoWatches
from drain_guard.protocol import (
    DESIRED_CONFIG,
    DRAIN_HELD,
    DRAIN_HOLD_EXPIRED,
    DRAIN_RELEASED,
    POOL_ROLLOUT_HELD,
    POOL_ROLLOUT_RELEASED,
    HoldRecord,
    Reason,
)
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.health import Health
from drain_guard_sim.apiserver.server import SimApiServer

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NODE = "worker-0"
USER = "agent"


def _record(request: str, detail: str = "build-pod: build pod ns/build-1 Running") -> HoldRecord:
    """The hold that ends, as the Node recorded it."""
    return HoldRecord(request, (Reason.BUILD_POD,), T0, detail)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@dataclass
class Env:
    api: SimApiServer
    recorder: EventRecorder
    metrics: Metrics
    clock: Clock
    counters: Health

    def events(self) -> list[dict[str, Any]]:
        return sorted(self.api.list("events", EVENT_NAMESPACE), key=lambda e: e["metadata"]["name"])

    def requests(self, verb: str) -> int:
        return self.api.request_count(user=USER, verb=verb, resource="events")

    def emitted(self, reason: str) -> float | None:
        return self.metrics.registry.get_sample_value(
            "drain_guard_events_emitted_total", {"reason": reason}
        )

    def errors(self, operation: str) -> float | None:
        return self.metrics.registry.get_sample_value(
            "drain_guard_api_errors_total", {"operation": operation}
        )


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with SimApiServer() as api, api.api_client(USER) as client:
        clock, metrics = Clock(), Metrics()
        counters = Health(metrics)
        recorder = EventRecorder(Kube(client, counters), NODE, clock=clock, metrics=metrics)
        yield Env(api, recorder, metrics, clock, counters)


async def test_first_event_is_created_on_the_node(env: Env) -> None:
    env.recorder.node_uid = "0b6f-uid"
    await env.recorder.drain_held(
        "drain-rendered-worker-1", ["build-pod"], "openshift-machine-config-operator/build-1"
    )
    [event] = env.events()
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": NODE,
        "uid": "0b6f-uid",
    }
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"].startswith(f"{NODE}.")
    assert event["reason"] == DRAIN_HELD
    assert event["type"] == "Normal"
    assert event["message"] == (
        "Holding drain request drain-rendered-worker-1 (build-pod): "
        "openshift-machine-config-operator/build-1"
    )
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-03-01T12:00:00Z"
    assert event["source"] == {"component": "drain-guard", "host": NODE}
    assert event["reportingComponent"] == "drain-guard"
    assert event["reportingInstance"] == f"drain-guard-{NODE}"
    assert env.emitted(DRAIN_HELD) == 1


async def test_an_event_written_is_api_contact_as_every_other_call(env: Env) -> None:
    # Events go through Kube.call like the agent's other calls: an answer is contact
    # (/readyz, drain_guard_last_api_contact_timestamp_seconds), a failure an API error.
    assert env.counters.last_contact is None
    await env.recorder.drain_held("drain-r1", ["build-pod"], "a build")
    assert env.counters.last_contact is not None


async def test_repeats_within_the_window_bump_count_with_a_patch(env: Env) -> None:
    for minute in range(4):
        await env.recorder.drain_held("drain-r1", ["build-pod"], f"pods seen at minute {minute}")
        env.clock.advance(timedelta(minutes=3))
    [event] = env.events()
    assert event["count"] == 4
    assert event["firstTimestamp"] == "2026-03-01T12:00:00Z"
    assert event["lastTimestamp"] == "2026-03-01T12:09:00Z"
    assert event["message"].endswith("pods seen at minute 3")
    assert env.requests("create") == 1
    assert env.requests("patch") == 3
    assert env.emitted(DRAIN_HELD) == 4


async def test_after_the_window_a_new_event_is_created(env: Env) -> None:
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    env.clock.advance(timedelta(minutes=10, seconds=1))
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    assert [e["count"] for e in env.events()] == [1, 1]
    assert env.requests("patch") == 0


async def test_different_keys_are_different_events(env: Env) -> None:
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    await env.recorder.drain_held("drain-r2", ["build-pod"], "x")
    await env.recorder.drain_released(_record("drain-r1"), "safe", timedelta(minutes=5))
    reasons = sorted((e["reason"], e["count"]) for e in env.events())
    assert reasons == [(DRAIN_HELD, 1), (DRAIN_HELD, 1), (DRAIN_RELEASED, 1)]


async def test_a_change_of_the_hold_is_aggregated_into_its_event(env: Env) -> None:
    """New reasons are the same hold: its Event's count and newest message, one PATCH, not
    another Event (each is an API write)."""
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    await env.recorder.drain_held("drain-r1", ["build-pod", "noop-image"], "y")
    [event] = env.events()
    assert event["count"] == 2
    assert event["message"] == "Holding drain request drain-r1 (build-pod, noop-image): y"
    assert (env.requests("create"), env.requests("patch")) == (1, 1)


async def test_released_and_expired(env: Env) -> None:
    """The end is the hold's one Event on the Node: it says what the hold was for."""
    held = _record("drain-r1")
    await env.recorder.drain_released(held, "safe", timedelta(minutes=12, seconds=5))
    await env.recorder.drain_released(_record("drain-r2"), "expired", timedelta(minutes=45))
    released, expired = sorted(env.events(), key=lambda e: str(e["reason"]))[::-1]
    assert released["reason"] == DRAIN_RELEASED
    assert released["type"] == "Normal"
    assert released["message"] == (
        "Released drain request drain-r1 after 12m05s (outcome safe);"
        " held for build-pod: build pod ns/build-1 Running"
    )
    assert expired["reason"] == DRAIN_HOLD_EXPIRED
    assert expired["type"] == "Warning"
    assert expired["message"] == (
        "Hold of drain request drain-r2 expired after 45m00s (max-hold): the drain goes ahead"
        " although a guard still blocked; held for build-pod: build pod ns/build-1 Running"
    )
    assert env.emitted(DRAIN_HOLD_EXPIRED) == 1
    assert env.emitted(DRAIN_RELEASED) == 1


async def test_the_end_says_who_and_why_before_what_the_hold_was_for(env: Env) -> None:
    """What the hold was for comes last, so that the 1 KiB cap cuts it, not the outcome; a
    record without detail names its reasons; the detail is anyone's input (escaped)."""
    long = _record("drain-r1", "build-pod: " + "é" * 2000)
    await env.recorder.drain_released(long, "manual", timedelta(minutes=1), released_by="alice")
    bare = HoldRecord("drain-r2", (Reason.NOOP_IMAGE,), T0, "", unknown_reasons=("future",))
    await env.recorder.drain_released(bare, "safe", timedelta(minutes=2), why="nothing to wait")
    forged = _record("drain-r3", "build-pod: x\nNormal  Forged  1s  drain-guard  all is well")
    await env.recorder.drain_released(forged, "superseded", timedelta(minutes=3))
    first, second, third = env.events()
    assert first["message"].startswith(
        "Released drain request drain-r1 after 1m00s (outcome manual, released by alice);"
        " held for build-pod: éé"
    )
    assert len(first["message"].encode()) <= MAX_MESSAGE
    assert first["message"].endswith("…")
    assert second["message"] == (
        "Released drain request drain-r2 after 2m00s (outcome safe): nothing to wait;"
        " held for noop-image, future"
    )
    assert "\n" not in third["message"]
    assert third["message"].endswith(
        "held for build-pod: x\\nNormal  Forged  1s  drain-guard  all is well"
    )


async def test_a_deleted_event_is_recreated(env: Env) -> None:
    await env.recorder.drain_held("drain-r1", ["manual"], "x")
    [first] = env.events()
    env.api.delete("events", first["metadata"]["name"], EVENT_NAMESPACE)
    env.clock.advance(timedelta(minutes=1))
    await env.recorder.drain_held("drain-r1", ["manual"], "x")
    [second] = env.events()
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert second["count"] == 1
    assert env.errors("event_patch") == 0
    # ... and aggregation continues on the new one.
    await env.recorder.drain_held("drain-r1", ["manual"], "x")
    assert [e["count"] for e in env.events()] == [2]


async def test_only_create_and_patch_are_used(env: Env) -> None:
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    await env.recorder.drain_released(_record("drain-r1"), "safe", timedelta(minutes=1))
    used = {verb for (user, verb, resource) in env.api.requests if user == USER}
    assert used == {"create", "patch"}


async def test_create_failure_is_logged_and_counted_not_raised(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.api.faults.error(500, verb="create", resource="events", times=1)
    with caplog.at_level(logging.WARNING, logger="drain_guard.node.events"):
        await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    assert env.events() == []
    assert env.errors("event_create") == 1
    assert env.emitted(DRAIN_HELD) == 0
    assert any("could not write DrainHeld event" in r.getMessage() for r in caplog.records)
    # The next attempt creates it (nothing half-remembered from the failure).
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    assert [e["count"] for e in env.events()] == [1]


async def test_patch_failure_is_counted_and_the_next_bump_still_works(env: Env) -> None:
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    env.api.faults.error(403, verb="patch", resource="events", times=1)
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    assert env.errors("event_patch") == 1
    assert [e["count"] for e in env.events()] == [1]
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    assert [e["count"] for e in env.events()] == [2]


async def test_unreachable_api_server_is_not_raised(env: Env) -> None:
    await env.api.stop()
    await env.recorder.drain_held("drain-r1", ["build-pod"], "x")
    assert env.errors("event_create") == 1


async def test_concurrent_emits_aggregate(env: Env) -> None:
    await asyncio.gather(
        *(env.recorder.drain_held("drain-r1", ["build-pod"], "x") for _ in range(5))
    )
    assert [e["count"] for e in env.events()] == [5]
    assert env.requests("create") == 1


async def test_long_messages_are_truncated(env: Env) -> None:
    await env.recorder.drain_held("drain-r1", ["build-pod"], "é" * 2000)
    [event] = env.events()
    assert len(event["message"].encode()) <= MAX_MESSAGE
    assert event["message"].endswith("…")


# --- the pool's Events ----------------------------------------------------------------------

POOLS = "machineconfigpools.machineconfiguration.openshift.io"
BUILD = "build-pod: build pod openshift-machine-config-operator/build-1 Running"


def _pool(api: SimApiServer, name: str = "worker") -> str:
    """A MachineConfigPool in the simulator; its uid."""
    pool = {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": name},
    }
    return str(api.create("machineconfigpools", pool)["metadata"]["uid"])


async def _pool_held(recorder: EventRecorder, request: str = "drain-r1") -> None:
    await recorder.pool_held(
        "worker", request, ["build-pod"], BUILD, T0, T0 + timedelta(minutes=45)
    )


async def test_a_held_pool_gets_an_event_that_describe_finds(env: Env) -> None:
    """kubectl describe lists the Events whose involvedObject has the pool's kind, name, empty
    namespace and uid: the uid is looked up once, the Node is the related object."""
    uid = _pool(env.api)
    env.recorder.node_uid = "0b6f-uid"
    await _pool_held(env.recorder)
    [event] = env.events()
    assert event["involvedObject"] == {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "name": "worker",
        "uid": uid,
    }
    assert event["related"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "0b6f-uid"}
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"].startswith(f"{NODE}.")
    assert (event["reason"], event["type"]) == (POOL_ROLLOUT_HELD, "Normal")
    assert event["message"] == (
        "worker pool waiting: worker-0 held (build-pod, since 2026-03-01T12:00:00Z, ends when"
        " build pod openshift-machine-config-operator/build-1 Running ends or at"
        " 2026-03-01T12:45:00Z)"
    )
    assert event["reportingInstance"] == f"drain-guard-{NODE}"
    # Found by what describe asks for (kubectl's searchEvents: name, namespace, kind, uid).
    selector = (
        "involvedObject.name=worker,involvedObject.namespace=,"
        f"involvedObject.kind=MachineConfigPool,involvedObject.uid={uid}"
    )
    assert [e["metadata"]["name"] for e in env.api.list("events", field_selector=selector)] == [
        event["metadata"]["name"]
    ]
    # Re-posted within the window (the MCD restarted, the hold gained a reason): aggregated
    # into the hold's one Event, with the newest message, and the pool is not read again.
    await env.recorder.pool_held(
        "worker", "drain-r1", ["build-pod", "noop-image"], BUILD, T0, T0 + timedelta(minutes=45)
    )
    await env.recorder.pool_released("worker", "drain-r1", "safe", timedelta(minutes=12))
    held, released = sorted(env.events(), key=lambda e: str(e["reason"]))
    assert held["count"] == 2
    assert held["message"].startswith("worker pool waiting: worker-0 held (build-pod, noop-image,")
    assert released["reason"] == POOL_ROLLOUT_RELEASED
    assert (
        released["message"] == "worker pool goes on: worker-0 released after 12m00s (outcome safe)"
    )
    assert released["involvedObject"]["uid"] == uid
    assert env.api.request_count(user=USER, verb="get", resource=POOLS) == 1
    assert env.emitted(POOL_ROLLOUT_HELD) == 2


async def test_the_pools_uid_comes_from_the_agents_watch_of_its_pool(env: Env) -> None:
    """The agent watches its own pool by name: its uid is taken from that watch, with no GET;
    a pool deleted and created again is named by its new uid (a uid looked up once would name
    the old one, and describe would not find the Event); a pool the watch does not have (the
    node moved to another pool since) is looked up."""
    watches = McoWatches({Watched.MACHINECONFIGPOOL: "v1"}, asyncio.Event())
    env.recorder.watched_pool_uid = watches.pool_uid
    watches.objects({DESIRED_CONFIG: "rendered-worker-" + "a" * 32})  # the node's pool: worker
    watches.pools.replace(env.api.list("machineconfigpools"))
    await _pool_held(env.recorder, "drain-r1")  # not in the watch: looked up (404)
    assert env.api.request_count(user=USER, verb="get", resource=POOLS) == 1
    uid = _pool(env.api)
    watches.pools.replace(env.api.list("machineconfigpools"))
    await _pool_held(env.recorder, "drain-r2")
    env.api.delete("machineconfigpools", "worker")
    again = _pool(env.api)
    watches.pools.replace(env.api.list("machineconfigpools"))
    await _pool_held(env.recorder, "drain-r3")
    await env.recorder.pool_held(
        "infra", "drain-r4", ["build-pod"], BUILD, T0, T0 + timedelta(minutes=45)
    )
    first, second, third, infra = env.events()
    assert "uid" not in first["involvedObject"]  # no pool at all
    assert (second["involvedObject"]["uid"], third["involvedObject"]["uid"]) == (uid, again)
    assert uid != again
    assert "uid" not in infra["involvedObject"]
    assert env.api.request_count(user=USER, verb="get", resource=POOLS) == 2  # worker's, infra's


async def test_without_the_pools_uid_the_event_still_names_the_pool(env: Env) -> None:
    """The systemd install (pool_uids off) reads no pool; a pool that is not there (404) or
    not readable leaves the uid out: ``oc get events --field-selector`` still finds it."""
    _pool(env.api)
    env.api.faults.error(403, verb="get", resource=POOLS, times=1)
    await _pool_held(env.recorder, "drain-r1")
    await _pool_held(env.recorder, "drain-r2")  # the lookup is tried again, and succeeds
    first, second = env.events()
    assert "uid" not in first["involvedObject"]
    assert "uid" in second["involvedObject"]
    assert env.errors("machineconfigpool_get") == 1

    async with env.api.api_client(USER) as client:
        offline = EventRecorder(Kube(client), "worker-1", clock=env.clock, pool_uids=False)
        await _pool_held(offline)
    gets = env.api.request_count(user=USER, verb="get", resource=POOLS)
    assert gets == 2  # none by the recorder with pool_uids off
    found = env.api.list(
        "events", field_selector="involvedObject.kind=MachineConfigPool,involvedObject.name=worker"
    )
    assert sorted(e["related"]["name"] for e in found) == [NODE, NODE, "worker-1"]
    assert next(e for e in found if e["related"]["name"] == "worker-1")["involvedObject"] == {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "name": "worker",
    }


async def test_the_preflight_proves_the_event_every_hold_writes_on_its_node(env: Env) -> None:
    """drain-guard preflight's Event about the agent's own Node is the one a hold's end
    writes there (a hold's start is told on the pool): same reason, type and fields, so the
    confinement it proves right is the one the agent meets."""
    await env.recorder.drain_released(_record("drain-r1"), "safe", timedelta(minutes=5))
    [written] = env.events()
    proved = event_rows.event(NODE)
    unproved = ("metadata", "message", "firstTimestamp", "lastTimestamp")
    assert {k: v for k, v in proved.items() if k not in unproved} == {
        k: v for k, v in written.items() if k in proved and k not in unproved
    }
    assert set(proved) == set(written)
    assert proved["metadata"]["namespace"] == written["metadata"]["namespace"]
