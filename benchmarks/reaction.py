"""Reaction: the MCD's drain request landing in the API → the agent's hold committed.

Three phases in one run, each against ``SimApiServer`` with the agent as its own process:

1. latency: ``--requests`` drain requests per run, ``--runs`` runs (a fresh agent each);
   every request meets an idle node whose desired image is the booted one (the seed's no-op
   update), so the agent holds it. Reaction = write-log time of the hold minus write-log time of
   the MCD's strategic-merge patch, both monotonic in the simulator's process.
2. races: the simulated MCC drain controller (``drain_guard_sim.actors.drain``) with its
   ``UpdateDelay`` cut to each ``--race-delays`` value; a race is lost when the MCC starts cordoning
   for the request (its "cordoning" line) instead of failing on the ``hold`` verb.
3. supersede: a newer MCD request lands on a node whose older request is held (the MCD
   restarted, or rendered again); the agent records the old hold's end and holds the new one.
   Measured with the API's Event writes answering at once and after ``--event-latency`` s,
   because the agent writes the old hold's DrainReleased Event before the new hold;
4. baseline: the agent (node worker-0) and a polling script (``benchmarks.baseline``, node
   worker-1) receive the same requests at the same instant; reaction and API requests of both.

The agent runs as deployed (``--variant``, ``benchmarks/deployed.py``) in every phase.

``python -m benchmarks.reaction [--requests N] [--runs R] [--variant V] ...``
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s

from benchmarks import deployed
from benchmarks.baseline import Poller
from benchmarks.common import (
    IMAGE_A,
    MCD_USER,
    WAIT,
    config_name,
    diff_counts,
    is_hold_of,
    mcd_request_patch,
    median_of,
    requests_by_verb,
    reset_patch,
    seconds_to_ready,
    seed_api,
    start_agent,
    stop_agent,
    summary_ms,
    wait_write,
    write_result,
)
from drain_guard import protocol
from drain_guard_sim.actors.drain import DrainController
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.mco import MCC_USER, Timings, read_json
from drain_guard_sim.actors.timeline import Timeline, TimelineEntry
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from drain_guard_sim.apiserver.writelog import WriteRecord
from drain_guard_sim.harness.agentproc import agent_user

AGENT_NODE = "worker-0"
POLLER_NODE = "worker-1"
POLLER_USER = "system:serviceaccount:drain-guard:poll-script"


@dataclass(frozen=True)
class Params:
    requests: int = 1000
    runs: int = 3
    race_trials: int = 100
    race_delays: tuple[float, ...] = (0.5, 0.1, 0.02)
    baseline_trials: int = 40
    poll_interval: float = 2.0
    supersede_trials: int = 20
    event_latency: float = 1.0
    variant: str = "deployed"
    agent: deployed.Agent | None = None  # how ``variant`` runs; set once its tree is built


class Mcd:
    """The machine-config-daemon's writes: strategic merge, no resourceVersion, over HTTP."""

    def __init__(self, api: SimApiServer) -> None:
        self.api = api
        self.client: Any = api.api_client(MCD_USER)
        self.core: Any = k8s.CoreV1Api(self.client)

    async def request(self, node: str, value: str) -> WriteRecord:
        """Write ``desiredDrain``; returns the write-log record of the request landing."""
        body = await read_json(
            await self.core.patch_node(
                node,
                mcd_request_patch(value),
                _content_type="application/strategic-merge-patch+json",
                _preload_content=False,
            )
        )
        rv = int(body["metadata"]["resourceVersion"])
        for rec in reversed(self.api.write_log):
            if rec.rv == rv:
                return rec
        raise AssertionError(f"write {rv} not in the write log")

    async def close(self) -> None:
        await self.client.close()


def _hold_on(node: str, request: str) -> Callable[[WriteRecord], bool]:
    is_hold = is_hold_of(request)
    return lambda rec: rec.name == node and is_hold(rec)


def _held_or_applied(request: str) -> Callable[[WriteRecord], bool]:
    """The agent's hold of ``request``, or the MCC marking it drained, whichever is first."""
    is_hold = is_hold_of(request)

    def match(rec: WriteRecord) -> bool:
        if rec.name != AGENT_NODE or rec.after is None:
            return False
        ann = rec.after["metadata"].get("annotations") or {}
        return is_hold(rec) or ann.get(protocol.LAST_APPLIED_DRAIN) == request

    return match


def _mcc_sync_after(t0: float) -> Callable[[TimelineEntry], bool]:
    """The MCC drain controller's first verdict on the node: a cordon, or the hold verb refused."""

    def match(e: TimelineEntry) -> bool:
        return (
            e.node == AGENT_NODE
            and e.t >= t0
            and (e.message == "cordoning" or "non-recognized drain verb" in e.message)
        )

    return match


def _event_by(user: str, node: str) -> Callable[[WriteRecord], bool]:
    """An Event of ``user`` about ``node``: on the Node, or on its pool related to it."""

    def match(rec: WriteRecord) -> bool:
        event = rec.after or {}
        names = {(event.get(k) or {}).get("name") for k in ("involvedObject", "related")}
        return rec.resource == "events" and rec.user == user and node in names

    return match


async def cycle(
    api: SimApiServer, mcd: Mcd, node: str, i: int, *, settle_events: bool = True
) -> float:
    """One request on an idle node → hold; then back to idle. Returns the reaction in s."""
    request = f"drain-{config_name(i)}"
    start = len(api.write_log)
    landed = await mcd.request(node, request)
    held = await wait_write(api, _hold_on(node, request), start)
    user = agent_user(node)
    if settle_events:
        # The hold's Event (PoolRolloutHeld) follows the hold: wait for it so it does not
        # overlap the next request (it is not on the critical path of this one).
        await wait_write(api, _event_by(user, node), start)
    mark = len(api.write_log)
    api.patch("nodes", node, reset_patch(config_name(i)), user=ADMIN)
    if settle_events:
        # The agent sees its hold replaced and records DrainReleased (superseded).
        await wait_write(api, _event_by(user, node), mark)
    return held.time - landed.time


async def _latency_runs(params: Params, workdir: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    pooled: list[float] = []
    offset = 0
    for r in range(params.runs):
        async with SimApiServer() as api:
            seed_api(api, [AGENT_NODE])
            agent = await start_agent(api, AGENT_NODE, workdir / f"latency-{r}", agent=params.agent)
            mcd = Mcd(api)
            try:
                await seconds_to_ready(agent)
                samples = []
                for i in range(params.requests):
                    samples.append(await cycle(api, mcd, AGENT_NODE, offset + i))
                offset += params.requests
            finally:
                await mcd.close()
                await stop_agent(agent)
        runs.append(summary_ms(samples))
        pooled.extend(samples)
        print(f"reaction run {r + 1}/{params.runs}: {runs[-1]}", flush=True)
    return {
        "runs": runs,
        "median_of_run_medians_ms": round(median_of(runs, "median_ms"), 3),
        "median_of_run_p99s_ms": round(median_of(runs, "p99_ms"), 3),
        "pooled": summary_ms(pooled),
    }


async def _race(params: Params, workdir: Path, delay: float) -> dict[str, Any]:
    """Trials against the MCC drain controller with ``UpdateDelay`` = ``delay`` seconds."""
    async with SimApiServer() as api:
        seed_api(api, [AGENT_NODE])
        timeline = Timeline()
        kubeconfig = api.kubeconfig(MCC_USER, workdir / f"race-{delay}" / "mcc")
        mcc = DrainController(kubeconfig, timeline, Timings(mcc_update_delay=delay))
        agent = await start_agent(api, AGENT_NODE, workdir / f"race-{delay}", agent=params.agent)
        mcd = Mcd(api)
        won = lost = not_held = 0
        lost_trials: list[int] = []
        reactions: list[float] = []
        try:
            await seconds_to_ready(agent)
            await mcc.start()
            for i in range(params.race_trials):
                request = f"drain-{config_name(10_000_000 + i)}"
                start = len(api.write_log)
                t0 = timeline.since_start(time.monotonic())
                landed = await mcd.request(AGENT_NODE, request)
                # The MCC's first sync after the request decides the race.
                async with asyncio.timeout(WAIT):
                    verdict = await timeline.wait_for(_mcc_sync_after(t0))
                if verdict.message == "cordoning":
                    lost += 1
                    lost_trials.append(i)
                else:
                    won += 1
                # After a lost race the drain may complete (lastAppliedDrain = the request)
                # before the agent acts; then it rightly holds nothing.
                ended = await wait_write(api, _held_or_applied(request), start)
                if is_hold_of(request)(ended):
                    reactions.append(ended.time - landed.time)
                else:
                    not_held += 1
                api.patch("nodes", AGENT_NODE, reset_patch(config_name(i)), user=ADMIN)
                # Let the MCC's delayed syncs of this trial's writes run before the next one.
                await asyncio.sleep(2 * delay + 0.2)
        finally:
            await mcd.close()
            await mcc.stop()
            await stop_agent(agent)
    result = {
        "mcc_update_delay_s": delay,
        "trials": won + lost,
        "won": won,
        "lost": lost,
        "won_share": round(won / max(1, won + lost), 4),
        "drained_before_any_hold": not_held,
        "lost_trials": lost_trials,
        "reaction": summary_ms(reactions),
    }
    print(f"races at {delay}s: {result}", flush=True)
    return result


async def _supersede(params: Params, workdir: Path, event_latency: float) -> dict[str, Any]:
    """Newer requests over an active hold, with Event writes slowed by ``event_latency``."""
    async with SimApiServer() as api:
        seed_api(api, [AGENT_NODE])
        user = agent_user(AGENT_NODE)
        agent = await start_agent(
            api, AGENT_NODE, workdir / f"supersede-{event_latency}", agent=params.agent
        )
        mcd = Mcd(api)
        reactions: list[float] = []
        try:
            await seconds_to_ready(agent)
            first = f"drain-{config_name(30_000_000)}"
            start = len(api.write_log)
            await mcd.request(AGENT_NODE, first)
            await wait_write(api, _hold_on(AGENT_NODE, first), start)
            await wait_write(api, _event_by(user, AGENT_NODE), start)
            if event_latency > 0:
                api.faults.latency(event_latency, user=user, resource="events")
            for i in range(params.supersede_trials):
                request = f"drain-{config_name(30_000_001 + i)}"
                start = len(api.write_log)
                landed = await mcd.request(AGENT_NODE, request)
                held = await wait_write(api, _hold_on(AGENT_NODE, request), start)
                reactions.append(held.time - landed.time)
                # The hold's Event follows the hold; let it land before the next request.
                after_hold = api.write_log.index(held) + 1
                await wait_write(api, _event_by(user, AGENT_NODE), after_hold)
        finally:
            await mcd.close()
            await stop_agent(agent)
    result = {"event_latency_s": event_latency, "reaction": summary_ms(reactions)}
    print(f"supersede: {result}", flush=True)
    return result


async def _baseline(params: Params, workdir: Path) -> dict[str, Any]:
    """Agent and polling script side by side on two nodes, same requests, same instants."""
    async with SimApiServer() as api:
        seed_api(api, [AGENT_NODE, POLLER_NODE])
        agent = await start_agent(api, AGENT_NODE, workdir / "baseline", agent=params.agent)
        host = HostFS(workdir / "baseline" / "hosts" / POLLER_NODE, IMAGE_A)
        poller = Poller(
            POLLER_NODE,
            api.kubeconfig(POLLER_USER, workdir / "baseline" / "poller-kubeconfig"),
            host.root,
            host.cmdline_file,
            params.poll_interval,
        )
        mcd = Mcd(api)
        agent_reactions: list[float] = []
        poller_reactions: list[float] = []
        try:
            await seconds_to_ready(agent)
            await poller.start()
            before_agent = requests_by_verb(api, agent_user(AGENT_NODE))
            before_poller = requests_by_verb(api, POLLER_USER)
            began = time.monotonic()
            for i in range(params.baseline_trials):
                n = 20_000_000 + i
                request = f"drain-{config_name(n)}"
                start = len(api.write_log)
                a = await mcd.request(AGENT_NODE, request)
                p = await mcd.request(POLLER_NODE, request)
                ha = await wait_write(api, _hold_on(AGENT_NODE, request), start)
                hp = await wait_write(api, _hold_on(POLLER_NODE, request), start)
                agent_reactions.append(ha.time - a.time)
                poller_reactions.append(hp.time - p.time)
                for node in (AGENT_NODE, POLLER_NODE):
                    api.patch("nodes", node, reset_patch(config_name(n)), user=ADMIN)
                # Decorrelate the next request from the poller's phase.
                await asyncio.sleep(params.poll_interval * ((i * 0.618) % 1.0))
            elapsed = time.monotonic() - began
            agent_requests = diff_counts(
                requests_by_verb(api, agent_user(AGENT_NODE)), before_agent
            )
            poller_requests = diff_counts(requests_by_verb(api, POLLER_USER), before_poller)
        finally:
            await mcd.close()
            await poller.stop()
            await stop_agent(agent)
    per_hour = 3600.0 / elapsed

    def share_below(values: Sequence[float], limit: float) -> float:
        return round(sum(v < limit for v in values) / max(1, len(values)), 4)

    out: dict[str, Any] = {
        "trials": params.baseline_trials,
        "poll_interval_s": params.poll_interval,
    }
    for name, reactions, requests in (
        ("agent", agent_reactions, agent_requests),
        ("poller", poller_reactions, poller_requests),
    ):
        out[name] = {
            "reaction": summary_ms(reactions),
            "requests": requests,
            "requests_per_hour_during_phase": round(sum(requests.values()) * per_hour, 1),
            # Derived from the measured reactions: a race against an MCC acting after
            # 0.1 s / 0.5 s / 1.9 s (the seed) / 5 s is won when the hold lands first.
            "reaction_below_s": {
                str(limit): share_below(reactions, limit) for limit in (0.1, 0.5, 1.9, 5.0)
            },
        }
    out["phase_seconds"] = round(elapsed, 1)
    print(f"baseline: {out}", flush=True)
    return out


async def measure(params: Params, workdir: Path) -> dict[str, Any]:
    latency = await _latency_runs(params, workdir)
    races = [await _race(params, workdir, d) for d in params.race_delays]
    supersede = [await _supersede(params, workdir, lat) for lat in (0.0, params.event_latency)]
    baseline = await _baseline(params, workdir)
    p99 = latency["median_of_run_p99s_ms"]
    return {
        "params": asdict(params),
        "latency": latency,
        "races": races,
        "supersede": supersede,
        "baseline": baseline,
        "targets": {
            "p99_under_50ms": {"value_ms": p99, "met": p99 < 50.0},
            "all_races_won_at_0.5s": {
                "value": next(
                    (r["won_share"] for r in races if r["mcc_update_delay_s"] == 0.5), None
                ),
                "met": all(r["lost"] == 0 for r in races if r["mcc_update_delay_s"] == 0.5),
            },
        },
    }


def parse_args(argv: Sequence[str] | None) -> tuple[Params, Path | None]:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.reaction", description=__doc__
    )
    p.add_argument("--requests", type=int, default=Params.requests)
    p.add_argument("--runs", type=int, default=Params.runs)
    p.add_argument("--race-trials", type=int, default=Params.race_trials)
    p.add_argument("--race-delays", type=float, nargs="*", default=list(Params.race_delays))
    p.add_argument("--baseline-trials", type=int, default=Params.baseline_trials)
    p.add_argument("--poll-interval", type=float, default=Params.poll_interval)
    p.add_argument("--supersede-trials", type=int, default=Params.supersede_trials)
    p.add_argument("--event-latency", type=float, default=Params.event_latency)
    p.add_argument("--variant", choices=deployed.VARIANTS, default=Params.variant)
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    params = Params(
        a.requests,
        a.runs,
        a.race_trials,
        tuple(a.race_delays),
        a.baseline_trials,
        a.poll_interval,
        a.supersede_trials,
        a.event_latency,
        a.variant,
    )
    return params, a.out


def main(argv: Sequence[str] | None = None) -> int:
    params, out = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-reaction-") as tmp:
        tree = deployed.tree_for([params.variant], Path(tmp))
        params = replace(params, agent=deployed.agent(params.variant, tree))
        result = asyncio.run(measure(params, Path(tmp)))
    print(f"wrote {write_result('reaction', result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
