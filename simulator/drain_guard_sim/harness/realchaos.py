"""Chaos seeds on the real control plane: a rollout on ``RealCluster`` with one real agent per
node, agents killed (SIGKILL) and restarted and daemons restarted at times drawn from the seed,
judged by the simulator's invariant checker (``checker.py``) over kube-apiserver's audit log
(``audit.py``).

What the simulator's chaos runs (``chaos.py``) add and a real server cannot play is left
out: injected API faults (latency, 429/500/503, cut watches, forced 410s). The seed picks the
MCO version (4.15, 4.16, 4.18 in turn), the faults and their times; the run ends when the
rollout has completed with every agent up, which is the checker's settled end, or when the
build has failed (its pod evicted while its node's agent was down: the checker excuses that
eviction, and the rollout stops there as MCO's does), judged unsettled.
"""

from __future__ import annotations

import asyncio
import functools
import random
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from drain_guard_sim.actors.build import is_build_pod
from drain_guard_sim.actors.mco import MCC_USER, MCD_USER, McoVersion, Timings
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_agent
from drain_guard_sim.harness.audit import write_log
from drain_guard_sim.harness.checker import check
from drain_guard_sim.harness.checkresult import Checked, CheckerConfig
from drain_guard_sim.harness.controlplane import ControlPlane
from drain_guard_sim.harness.intervals import Interval
from drain_guard_sim.harness.realcluster import RealCluster, agent_user

__all__ = ["RealChaosReport", "RealChaosStalledError", "run_real_chaos"]

VERSIONS = (McoVersion.V4_15, McoVersion.V4_16, McoVersion.V4_18)
#: MCO seconds are a tenth of a second (the seed's race margins are 0.2 s of real time).
TIME_FACTOR = 0.1
TIMINGS = Timings(reboot=10.0, build_duration=30.0)
MAX_HOLD = 60.0  # seconds, real: longer than any build here, so no hold expires
GRACE = 0.3  # seconds an agent may take to hold a request it can see (the checker's)
RECONCILE = 1.0


class RealChaosStalledError(RuntimeError):
    """The run never came to rest; the message has the seed and the timeline's end."""


@dataclass
class RealChaosReport:
    seed: int
    version: McoVersion
    checked: Checked
    faults: Counter[str]
    writes: int
    seconds: float
    #: The build failed (its pod evicted while an agent was down): MCO 4.15 to 4.18 roll out
    #: nothing more until an administrator resets the pool, so the run ends unsettled.
    stalled: bool


class _Agents:
    """One agent per node; every process is kept (``history``) for the checker's intervals."""

    def __init__(self, cluster: RealCluster) -> None:
        self.cluster = cluster
        self.running: dict[str, AgentProcess] = {}
        self.history: list[AgentProcess] = []
        self._locks: dict[str, asyncio.Lock] = {}

    async def start(self, node: str) -> None:
        agent = await spawn_agent(
            node,
            self.cluster.agent_kubeconfig(node),
            self.cluster.hosts[node],
            "--max-hold",
            f"{MAX_HOLD:g}s",
        )
        self.running[node] = agent
        self.history.append(agent)
        await agent.wait_synced(60.0)

    async def restart(self, node: str, down: float = 0.0) -> None:
        async with self._locks.setdefault(node, asyncio.Lock()):
            agent = self.running.pop(node, None)
            if agent is not None:
                await agent.kill()
            await asyncio.sleep(down)
            await self.start(node)

    async def stop_all(self) -> None:
        for agent in self.running.values():
            await agent.stop(timeout=10, kill_after=True)
        self.running.clear()

    def clean(self, nodes: list[str], end: float) -> dict[str, list[Interval]]:
        return {
            node: sorted(
                (a.synced_at, a.ended if a.ended is not None else end)
                for a in self.history
                if a.node == node and a.synced_at is not None
            )
            for node in nodes
        }


async def run_real_chaos(
    plane: ControlPlane,
    workdir: Path,
    seed: int,
    timeout: float = 180.0,  # noqa: ASYNC109
) -> RealChaosReport:
    """One seed on ``plane`` (started with ``audit=True``)."""
    rng = random.Random(seed)
    version = VERSIONS[seed % len(VERSIONS)]
    faults: Counter[str] = Counter()
    clock_offset = time.monotonic() - time.time()
    since = datetime.now(UTC)
    started = time.monotonic()
    pool = f"chaos-{seed}-{secrets.token_hex(2)}"
    async with RealCluster(
        plane, workdir, pool=pool, nodes=2, time_factor=TIME_FACTOR, timings=TIMINGS,
        version=version,
    ) as cluster:  # fmt: skip
        agents = _Agents(cluster)
        tasks: list[asyncio.Task[None]] = []
        try:
            for node in cluster.node_names:
                await agents.start(node)
            # A reboot restarts the node's pods, the agent among them.
            cluster.reboot_hooks.append(agents.restart)
            await cluster.create_machine_config(
                "99-worker-chaos", lose_build_race=version is McoVersion.V4_15
            )
            for _ in range(rng.randint(1, 3)):
                at = rng.uniform(0.0, 60.0) * TIME_FACTOR
                node = rng.choice(cluster.node_names)
                if rng.random() < 0.7:
                    down = rng.uniform(0.0, 5.0) * TIME_FACTOR
                    restart = functools.partial(agents.restart, node, down)
                    tasks.append(asyncio.create_task(_later(at, restart)))
                    faults["agent-killed"] += 1
                else:
                    mcd = functools.partial(_restart_mcd, cluster, node)
                    tasks.append(asyncio.create_task(_later(at, mcd)))
                    faults["mcd-restarted"] += 1
            try:
                await cluster.wait_for(lambda: cluster.rollout_done() or _failed(cluster), timeout)
            except TimeoutError:
                raise RealChaosStalledError(
                    f"seed {seed} (MCO {version.value}, {dict(faults)}): the rollout did not"
                    f" complete in {timeout:g} s; the timeline's end:\n"
                    + cluster.timeline.format()[-6000:]
                ) from None
            await asyncio.gather(*tasks)
            end = time.monotonic()
            settled = cluster.rollout_done()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            cluster.reboot_hooks.clear()
            await agents.stop_all()
        config = CheckerConfig(
            agent_users={agent_user(n): n for n in cluster.node_names},
            mcd_user=MCD_USER,
            mcc_user=MCC_USER,
            max_hold=MAX_HOLD,
            reconcile_interval=RECONCILE,
            grace=GRACE,
            clean=agents.clean(cluster.node_names, end),
            is_build_pod=is_build_pod,
            end=end,
            settled=settled,
        )
    writes = [
        w
        for w in write_log(plane.audit_log, since, clock_offset)
        if w.resource != "nodes" or w.name.startswith(f"{pool}-")
    ]
    return RealChaosReport(
        seed=seed,
        version=version,
        checked=check(writes, config),
        faults=faults,
        writes=len(writes),
        seconds=time.monotonic() - started,
        stalled=not settled,
    )


def _failed(cluster: RealCluster) -> bool:
    build = cluster.build_result()
    return build is not None and not build.succeeded


async def _later(delay: float, action: Callable[[], Awaitable[None]]) -> None:
    await asyncio.sleep(delay)
    await action()


async def _restart_mcd(cluster: RealCluster, node: str) -> None:
    """The daemon pod deleted (SIGKILL): a new one runs its first sync again."""
    cluster.machines[node].restart_daemon()
