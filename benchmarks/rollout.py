"""One MCO rollout over a set of nodes, as the seed report's cluster goes through it.

Per node, in the order MCO writes them (in-process writes under the MCO identities, so that
the simulator's HTTP request counters hold the agents' requests alone):

1. node controller: ``desiredConfig`` = the new config while ``desiredImage`` is still the
   booted image (4.15 moves the config before the build is done: the seed's bug);
2. MCD: ``desiredDrain = drain-<config>`` → the agent holds it (no-op image);
3. the build is done: node controller sets ``desiredImage`` to the new image → the agent
   releases the hold (its request is restored exactly);
4. MCC: cordon, drain (no pods to evict), ``lastAppliedDrain = drain-<config>``;
5. MCD after the reboot into the new image: current config/image, ``uncordon-<config>``;
6. MCC: uncordon, ``lastAppliedDrain = uncordon-<config>``.

The reboot itself is not played on the host tree: on a real node it restarts the agent, which
then lists afresh (the start-up requests, counted apart). Flipping the host's booted image
under a running agent, as no real reboot can, lets an agent still working through older Node
versions decide on a Node the MCO has moved past; its compare-and-swap refuses that write, at
the cost of a PATCH and a GET that no real node would see.

Nodes go in waves of ``batch`` (MCO's ``maxUnavailable``), each step for the whole wave, the
next step once every agent of the wave has reacted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from benchmarks.common import IMAGE_B, MCD_USER, WAIT, is_hold_of
from drain_guard import protocol
from drain_guard_sim.actors.mco import MCC_USER
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.writelog import WriteRecord

NodeMatcher = Callable[[WriteRecord], bool]


@dataclass
class RolloutResult:
    hold_reactions: dict[str, float] = field(default_factory=dict)
    release_reactions: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def _is_release_of(request: str) -> NodeMatcher:
    held = protocol.HOLD_PREFIX + request

    def match(rec: WriteRecord) -> bool:
        if rec.resource != "nodes" or rec.after is None or rec.before is None:
            return False
        before = rec.before["metadata"].get("annotations") or {}
        after = rec.after["metadata"].get("annotations") or {}
        return bool(
            before.get(protocol.DESIRED_DRAIN) == held
            and after.get(protocol.DESIRED_DRAIN) == request
        )

    return match


async def collect(
    api: SimApiServer,
    start: int,
    wanted: Mapping[str, NodeMatcher],
    timeout: float = WAIT,  # noqa: ASYNC109
) -> dict[str, WriteRecord]:
    """The first matching write per node (write-log index ``start`` on); waits for all."""
    found: dict[str, WriteRecord] = {}
    log = api.write_log
    position = start

    def scan() -> bool:
        nonlocal position
        end = len(log)
        for i in range(position, end):
            rec = log[i]
            match = wanted.get(rec.name)
            if match is not None and rec.name not in found and match(rec):
                found[rec.name] = rec
        position = end
        return len(found) == len(wanted)

    await api.wait_for(scan, timeout)
    return found


def _annotate(api: SimApiServer, node: str, user: str, **values: str | None) -> WriteRecord:
    annotations = {getattr(protocol, k): v for k, v in values.items()}
    api.patch("nodes", node, {"metadata": {"annotations": annotations}}, user=user)
    return api.write_log[-1]


async def roll(
    api: SimApiServer,
    nodes: Sequence[str],
    config: str,
    batch: int,
    timeout: float = WAIT,  # noqa: ASYNC109
) -> RolloutResult:
    """Roll ``config`` out over ``nodes``; reaction times of every agent's hold and release."""
    result = RolloutResult()
    began = time.monotonic()
    request = f"drain-{config}"
    for w in range(0, len(nodes), batch):
        wave = nodes[w : w + batch]
        start = len(api.write_log)
        landed = {}
        for node in wave:
            _annotate(api, node, MCC_USER, DESIRED_CONFIG=config)
            landed[node] = _annotate(api, node, MCD_USER, DESIRED_DRAIN=request)
        holds = await collect(api, start, dict.fromkeys(wave, is_hold_of(request)), timeout)
        start = len(api.write_log)
        built = {n: _annotate(api, n, MCC_USER, DESIRED_IMAGE=IMAGE_B) for n in wave}
        releases = await collect(api, start, dict.fromkeys(wave, _is_release_of(request)), timeout)
        for node in wave:
            result.hold_reactions[node] = holds[node].time - landed[node].time
            result.release_reactions[node] = releases[node].time - built[node].time
            api.patch("nodes", node, {"spec": {"unschedulable": True}}, user=MCC_USER)
            _annotate(api, node, MCC_USER, LAST_APPLIED_DRAIN=request)
            _annotate(
                api,
                node,
                MCD_USER,
                CURRENT_CONFIG=config,
                CURRENT_IMAGE=IMAGE_B,
                DESIRED_DRAIN=f"uncordon-{config}",
            )
            api.patch("nodes", node, {"spec": {"unschedulable": None}}, user=MCC_USER)
            _annotate(api, node, MCC_USER, LAST_APPLIED_DRAIN=f"uncordon-{config}")
    result.seconds = time.monotonic() - began
    # The agents' Events follow their patches: let the last wave's land before counting.
    await asyncio.sleep(1.0)
    return result
