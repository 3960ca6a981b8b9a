"""The agent's Events through the real process: written off the hold path (a slow events
endpoint never delays a hold); a hold's three Events, on its MachineConfigPool and the Node."""

from __future__ import annotations

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer, WriteRecord
from tests.helpers import (
    AGENT_USER,
    CONFIG_B,
    IMAGE_B,
    MCO_NS,
    StartAgent,
    add_build_pod,
    mcd_request,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"
DRAIN_C = f"drain-rendered-worker-{'c' * 32}"
POOLS = "machineconfigpools.machineconfiguration.openshift.io"  # the simulator's key


def _event_writes(api: SimApiServer, reason: str) -> list[WriteRecord]:
    return [
        w
        for w in api.writes("events", user=AGENT_USER)
        if w.verb == "create" and (w.after or {}).get("reason") == reason
    ]


async def test_a_slow_events_endpoint_does_not_delay_the_next_hold(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    add_build_pod(api)
    await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    await api.wait_for(lambda: _event_writes(api, "PoolRolloutHeld"), timeout=15)

    # From now on every Event write of the agent takes seconds (an overloaded API server).
    api.faults.latency(2.0, user=AGENT_USER, resource="events")
    mcd_request(api, DRAIN_C)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_C)
    released = await api.wait_for(lambda: _event_writes(api, "DrainReleased"), timeout=15)

    hold_c = [
        w
        for w in api.writes("nodes", user=AGENT_USER)
        if ((w.after or {}).get("metadata", {}).get("annotations") or {}).get(
            protocol.DESIRED_DRAIN
        )
        == "hold-" + DRAIN_C
    ]
    # The superseded hold's DrainReleased was posted before the new hold was decided, yet the
    # new hold reached the API first: the controller did not wait for the Event.
    assert hold_c
    assert hold_c[0].rv < released[0].rv


async def test_an_invalid_hold_request_is_a_warning_event_on_the_node(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Issue 25: only the agent's /status said "invalid input", so a typo silently held
    nothing."""
    await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.HOLD_REQUEST: "30m;db failover"})
    [write] = await api.wait_for(lambda: _event_writes(api, "HoldRequestInvalid"), timeout=15)
    event = write.after or {}
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "worker-0"
    assert "drain-guard.io/hold-request='30m;db failover'" in event["message"]
    assert "'30m' is not an RFC 3339 time" in event["message"]


async def test_a_held_node_says_so_on_its_pool(api: SimApiServer, start_agent: StartAgent) -> None:
    """Issue 25: a hold stalls the pool's rollout; ``oc describe mcp worker`` shows it (an Event
    about the pool, with its uid), and that the rollout went on once the hold ended."""
    pool = api.create(
        "machineconfigpools",
        {
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigPool",
            "metadata": {"name": "worker"},
        },
    )
    add_build_pod(api)
    await start_agent()
    # The agent's watch of its pool has listed before the drain is asked for: its watch
    # request follows the list's reply into its cache, so the Event takes the pool's uid
    # from there (a hold before that list would GET the pool, once).
    await api.wait_for(lambda: api.request_count(user=AGENT_USER, verb="watch", resource=POOLS))
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    [held] = await api.wait_for(lambda: _event_writes(api, "PoolRolloutHeld"), timeout=15)
    event = held.after or {}
    assert event["involvedObject"] == {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "name": "worker",
        "uid": pool["metadata"]["uid"],
    }
    node_uid = api.get("nodes", "worker-0")["metadata"]["uid"]
    assert event["related"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "worker-0",
        "uid": node_uid,
    }
    assert event["message"].startswith("worker pool waiting: worker-0 held (build-pod, since ")
    assert f"ends when build pod {MCO_NS}/build-pod ends or at " in event["message"]

    pod = api.get("pods", "build-pod", MCO_NS)
    pod["status"]["phase"] = "Succeeded"
    api.update("pods", pod, MCO_NS, subresource="status")
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    [released] = await api.wait_for(lambda: _event_writes(api, "PoolRolloutReleased"), timeout=15)
    message = (released.after or {})["message"]
    assert message.startswith("worker pool goes on: worker-0 released after ")
    assert message.endswith("(outcome safe)")
    # On the Node, the hold's one Event: its end, saying what the hold was for (the Node's
    # annotations said it while it lasted; they are gone).
    [ended] = await api.wait_for(lambda: _event_writes(api, "DrainReleased"), timeout=15)
    assert (ended.after or {})["involvedObject"]["name"] == "worker-0"
    assert (ended.after or {})["message"].endswith(
        f"(outcome safe); held for build-pod: build pod {MCO_NS}/build-pod"
    )
    # What a hold costs: three Event writes, each an API (etcd) write, the pool's two creates
    # (unpacked above: one each) and the Node's one; no DrainHeld; and no read of the pool
    # for its uid (the pool's watch has it).
    writes = [
        (w.verb, (w.after or {}).get("reason")) for w in api.writes("events", user=AGENT_USER)
    ]
    assert sorted(writes) == [
        ("create", "DrainReleased"),
        ("create", "PoolRolloutHeld"),
        ("create", "PoolRolloutReleased"),
    ]
    assert api.request_count(user=AGENT_USER, verb="get", resource=POOLS) == 0


async def test_a_hold_before_the_pools_watch_listed_reads_the_pools_uid_once(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Until the agent's watch of its pool has listed, the pool's Event has its uid from a
    GET of the pool (``oc describe mcp`` finds the Event by it): here the list fails (500)
    until the hold's Event is written."""
    pool = api.create(
        "machineconfigpools",
        {
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigPool",
            "metadata": {"name": "worker"},
        },
    )
    unlisted = api.faults.error(500, user=AGENT_USER, verb="list", resource=POOLS)
    add_build_pod(api)
    await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    [held] = await api.wait_for(lambda: _event_writes(api, "PoolRolloutHeld"), timeout=15)
    api.faults.remove(unlisted)
    assert (held.after or {})["involvedObject"]["uid"] == pool["metadata"]["uid"]
    assert api.request_count(user=AGENT_USER, verb="watch", resource=POOLS) == 0
    assert api.request_count(user=AGENT_USER, verb="get", resource=POOLS) == 1
