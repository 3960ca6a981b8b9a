"""One chaos run (``run_chaos``): the cluster, the agents (``agents``), the schedule played
(``faults``), the cluster brought to rest, then the verdict (``verdict``)."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from drain_guard_sim.actors.mco import (
    CURRENT_CONFIG,
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    STATE,
    Timings,
    annotations_of,
)
from drain_guard_sim.harness.chaos.agents import AgentFleet
from drain_guard_sim.harness.chaos.faults import FaultPlayer
from drain_guard_sim.harness.chaos.schedule import Action, ChaosConfig, make_schedule
from drain_guard_sim.harness.chaos.verdict import check_run, mco_stall, node_timeline, pool_state
from drain_guard_sim.harness.checkresult import Checked
from drain_guard_sim.harness.cluster import SimCluster


@dataclass
class ChaosReport:
    """Everything a run produced: the verdict, the figures and the means to reproduce it."""

    seed: int
    schedule: list[Action]
    checked: Checked
    faults: Counter[str]
    events: list[tuple[float, str | None, str]]
    settled: bool
    crashes: list[str]
    agent_starts: int
    writes: int
    seconds: float
    timelines: dict[str, str] = field(default_factory=dict)
    #: Requests the fault rules of each kind hit (a rule may never fire: no write came).
    fired: Counter[str] = field(default_factory=Counter)
    #: The agents' writes to their own Node that refusal bursts refused (decisions made).
    refused_decisions: int = 0
    #: Why MCO itself stopped the last rollout (``verdict.mco_stall``): no failure then.
    stalled_by_mco: str | None = None
    #: The config the last rollout renders, and each node's current config at the end.
    final_config: str = ""
    current_configs: dict[str, str | None] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No violation, no crash, and the last rollout completed (every request got
        through in the end) or MCO itself stopped it. A run that did not come to rest says
        so first in its text."""
        return self.checked.ok and not self.crashes and (self.settled or bool(self.stalled_by_mco))

    @property
    def stalled(self) -> bool:
        return not self.settled

    def failure_text(self) -> str:
        """The seed, the schedule and the minimal timeline of each node concerned."""
        state = "stalled" if self.checked.ok and not self.crashes else "FAILED"
        rerun = f"pytest tests/chaos --chaos-seed={self.seed}"
        out = [f"chaos seed {self.seed} {state} (rerun: {rerun})"]
        if self.stalled_by_mco:
            out.append(f"MCO stopped the last rollout, not the agents: {self.stalled_by_mco}")
        elif not self.settled:
            out.append("the cluster did not come to rest after the faults stopped")
        out.extend(f"agent crashed: {c}" for c in self.crashes)
        out.extend(f"violation: {v}" for v in self.checked.violations)
        out.append("schedule:")
        out.extend(f"  {a}" for a in self.schedule)
        for node, text in self.timelines.items():
            out.append(f"timeline of {node}:")
            out.append(text)
        return "\n".join(out)


class _Run:
    """The run's timeline of its own actions, its background tasks, and the order of things:
    start, play the schedule, settle, judge, stop."""

    def __init__(self, config: ChaosConfig, workdir: Path) -> None:
        self.config = config
        self.cluster = SimCluster(
            workdir,
            nodes=config.nodes,
            time_factor=config.time_factor,
            timings=Timings(mcc_update_delay=config.mcc_delay),
            version=config.mco_version,
            node_writers=config.node_writers,
            seed=config.seed,
        )
        self.events: list[tuple[float, str | None, str]] = []
        self.stalled_by_mco: str | None = None
        self.final_config = ""
        self.tasks: set[asyncio.Task[Any]] = set()
        faults: Counter[str] = Counter()
        self.fleet = AgentFleet(self.cluster, workdir, config, faults, self.note, self.spawn)
        self.player = FaultPlayer(self.cluster, self.fleet, faults, self.note, self.spawn)

    @property
    def nodes(self) -> list[str]:
        return self.cluster.node_names

    def note(self, node: str | None, text: str) -> None:
        self.events.append((time.monotonic(), node, text))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self, schedule: Sequence[Action]) -> ChaosReport:
        began = time.monotonic()
        cluster = self.cluster
        cluster.api.faults.seed(self.config.seed)
        await cluster.start()
        # MCO 4.15 loses its build race as in the seed, by 10 MCO seconds (0.1 s here) each
        # side: the X→X drains come, whatever the machine's load.
        cluster.lose_build_races(margin=10.0)
        try:
            cluster.reboot_hooks.append(self.fleet.on_reboot)
            for node in self.nodes:
                await self.fleet.start(node)
            await self.fleet.synced(60)
            start = time.monotonic()
            self.player.schedule_end = start + self.config.duration
            for action in schedule:
                delay = start + action.at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self.player.act(action)
            settled = await self.settle()
            end = time.monotonic()
            current_configs = {
                n: annotations_of(cluster.api.get("nodes", n)).get(CURRENT_CONFIG)
                for n in self.nodes
            }
            checked = check_run(
                cluster, self.config, self.fleet.history, self.player.impaired, end, settled
            )
            await self.fleet.stop_all()
        finally:
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.fleet.kill_all()
            await cluster.stop()
        report = ChaosReport(
            seed=self.config.seed,
            schedule=list(schedule),
            checked=checked,
            faults=self.player.faults,
            fired=self.player.fired,
            refused_decisions=self.player.refused_decisions,
            events=self.events,
            settled=settled,
            stalled_by_mco=self.stalled_by_mco,
            final_config=self.final_config,
            current_configs=current_configs,
            crashes=self.fleet.crashes(),
            agent_starts=len(self.fleet.history),
            writes=len(cluster.api.write_log),
            seconds=time.monotonic() - began,
        )
        if not report.ok:
            if not settled:
                report.timelines["the pool"] = "  " + pool_state(cluster)
            nodes = {v.node for v in checked.violations} or set(self.nodes)
            for node in sorted(nodes):
                report.timelines[node] = node_timeline(
                    cluster, self.events, node, checked.violations
                )
        return report

    async def settle(self) -> bool:
        """Faults off, every agent up, tasks done; then one last rollout must complete: the
        pool's target must be the config it renders, and every node on it and its build's
        image (the pool names the render a moment after the MachineConfig is created, so
        its target before then is the previous rollout's, which every node may have)."""
        self.cluster.api.faults.clear()
        self.cluster.reboot_hooks.remove(self.fleet.on_reboot)  # no more agent restarts either
        if self.cluster.drain is not None:
            # Nor an MCC racing the agents: a build evicted by a lost race would fail the
            # last rollout, which is MCO 4.15's behaviour, not something to wait out.
            timings = self.cluster.drain.timings
            self.cluster.drain.timings = replace(timings, mcc_update_delay=60.0)
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for node in self.nodes:
            await self.fleet.ensure(node)
        await self.fleet.synced(60)
        # Let drains in flight finish (say, one an operator's release let through just
        # now): the simulated build controller would place the last build on a node being
        # drained, which a real scheduler would not.
        with contextlib.suppress(TimeoutError):
            await self.cluster.api.wait_for(self._quiet, 30.0)
        config = self.final_config = await self.player.rollout()
        self.note(None, f"final rollout: MachineConfig renders {config}")
        try:
            await self.cluster.wait_rollout_done(self.config.settle_timeout, config)
        except TimeoutError:
            self.stalled_by_mco = mco_stall(self.cluster.api, self.nodes, config)
            why = self.stalled_by_mco or "nothing MCO does explains it"
            self.note(None, f"the final rollout did not complete: {why}")
            return False
        self.note(None, "final rollout complete")
        return True

    def _quiet(self) -> bool:
        for node in self.nodes:
            obj = self.cluster.api.get("nodes", node)
            ann = annotations_of(obj)
            if ann.get(DESIRED_DRAIN) != ann.get(LAST_APPLIED_DRAIN):
                return False
            if (obj.get("spec") or {}).get("unschedulable") or ann.get(STATE) != "Done":
                return False
        return True


async def run_chaos(
    config: ChaosConfig, workdir: Path | None = None, schedule: Sequence[Action] | None = None
) -> ChaosReport:
    """One seeded chaos run (or a given schedule); see the package's docstring."""
    if schedule is None:
        schedule = make_schedule(config)
    with tempfile.TemporaryDirectory(prefix=f"chaos-{config.seed}-") as tmp:
        return await _Run(config, workdir or Path(tmp)).run(schedule)
