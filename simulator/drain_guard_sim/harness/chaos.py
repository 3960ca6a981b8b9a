"""Chaos runs: the simulated cluster, one real agent process per node, and faults from a seed.

A run (``run_chaos``) starts a ``SimCluster`` (MCO 4.15, 4.16 or 4.18 actors, by seed; on-cluster
builds, scaled time), one ``drain-guard run`` subprocess per node with its own identity, and plays
a fault schedule drawn from the seed (``make_schedule``): MachineConfig rollouts (each starts a
build), API latency and 500/429/503 replies, watch streams cut, forced 410s, agents killed
with SIGKILL and restarted, the MCD restarted mid-wait, operators releasing holds with
``drain-guard release``, builds that fail (their pod deleted), hosts whose booted image cannot
be read. Then it brings the cluster to rest (faults off, every agent up, one last rollout
that must complete) and hands the simulator's whole write log to ``checker``.

The schedule is a pure function of the seed, so a failing seed replays the same actions in
the same order; the exact interleaving with the agents' processes and the actors' timers
still varies from run to run (real processes, real time), so a seed that failed once may
need a few replays. A failure prints the seed, the schedule and a short timeline of the
node concerned.

``run_soak`` measures one agent's RSS and open file descriptors over thousands of watch
events (pod churn and node updates); it is a measurement, not a timed test.

Command line::

    python -m drain_guard_sim.harness.chaos run --seeds 20 [--first 1]   # summary of a long run
    python -m drain_guard_sim.harness.chaos run --seed 17        # one seed, with its schedule
    python -m drain_guard_sim.harness.chaos soak --events 5000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from drain_guard_sim.actors.build import is_build_pod
from drain_guard_sim.actors.mco import (
    ADMIN_USER,
    BUILD_NAME_LABEL,
    DESIRED_DRAIN,
    LAST_APPLIED_DRAIN,
    MCC_USER,
    MCD_USER,
    MCO_NAMESPACE,
    STATE,
    McoVersion,
    Timings,
    annotations_of,
)
from drain_guard_sim.apiserver.store import WriteRecord
from drain_guard_sim.harness.agentproc import (
    AgentError,
    AgentProcess,
    agent_user,
    spawn_agent,
)
from drain_guard_sim.harness.checker import (
    HOLD_REQUEST,
    Checked,
    CheckerConfig,
    Interval,
    Violation,
    check,
)
from drain_guard_sim.harness.cluster import SimCluster

__all__ = [
    "Action",
    "ChaosConfig",
    "ChaosReport",
    "SoakReport",
    "main",
    "make_schedule",
    "run_chaos",
    "run_soak",
]

#: Fault kinds a schedule draws from (besides the rollouts that drive the run).
FAULT_KINDS = (
    "latency",
    "error",
    "cut-watches",
    "expire-watches",
    "kill-agent",
    "restart-mcd",
    "release",
    "fail-build",
    "corrupt-host",
)
#: Faults of issue 27, drawn from a random stream of their own (each with probability 1/2),
#: so that every seed's other actions stay as they were: a burst of refused Node writes (409
#: or 422 with no competing write, as a webhook answers), a Node write that hangs, and an
#: operator's hold-request at the edge of the calendar (invalid input the agent must survive).
RELIABILITY_KINDS = ("refuse-writes", "hang-write", "edge-date")
#: hold-requests the agent must report as invalid and survive (they crashed it).
EDGE_DATES = (
    "9999-12-31T23:59:59-05:00;hold until further notice",
    "0001-01-01T00:00:00+01:00",
    "2026-01-01T00:00:00+25:00;typo",
    "2026-06-30T12:00:60Z",
)
#: After a fault that hit an agent, how long it may take to be current again: a watch's
#: backoff after a few failed attempts (``drain_guard.kube.retry.Backoff``: 0.5 s doubling,
#: jittered).
RECOVERY = 4.0


@dataclass(frozen=True)
class Action:
    """One scheduled step: ``at`` seconds after the start, ``kind``, target ``node``, params."""

    at: float
    kind: str
    node: str | None = None
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)

    def __str__(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.params)
        return f"+{self.at:6.2f}s {self.kind:<15} {self.node or '*':<9} {extra}".rstrip()


@dataclass(frozen=True)
class ChaosConfig:
    """The size and pace of a run. Seconds are real (wall) seconds."""

    seed: int
    nodes: int = 2
    #: Seconds over which the scheduled actions are spread.
    duration: float = 10.0
    rollouts: int = 2
    faults: int = 10
    #: MCO's durations are multiplied by this (0.01: the MCD's 10 s poll takes 0.1 s).
    time_factor: float = 0.01
    #: The MCC's update delay, in MCO seconds, set so that the MCC acts about 0.6 s after a
    #: request: longer than ``grace``, so that "the agent was up and did not hold" shows.
    #: Every third seed uses MCO's own 5 s instead (``racing_mcc``).
    mcc_update_delay: float = 60.0
    max_hold: float = 5.0
    grace: float = 0.3
    reconcile_interval: float = 1.0
    settle_timeout: float = 45.0
    #: Extra ``drain-guard run`` flags (the checker's own tests cripple the agent with them).
    agent_args: tuple[str, ...] = ()
    #: The kubelets' status reports (``SimCluster(node_writers=...)``): on 4.15 and 4.16-early
    #: each queues the MCC, which then may act before its delay from the target.
    node_writers: bool = True

    @property
    def racing_mcc(self) -> bool:
        """The MCC runs on MCO's own 5 s, racing the agent: in 4.15 it acts 2-3.5 MCO seconds
        after a request (20-35 ms here), in 4.16+ 5 s after it; the race-lost path runs."""
        return self.seed % 3 == 0

    @property
    def mco_version(self) -> McoVersion:
        """The MCO the actors play: seeds cycle through every ``McoVersion`` in runs of six, so
        every version meets every combination of ``racing_mcc`` and ``shield``."""
        return list(McoVersion)[(self.seed // 6) % len(McoVersion)]

    @property
    def shield(self) -> bool:
        """Even seeds run the agents' default PodDisruptionBudget shield; odd seeds turn it
        off, so that only the hold stands between a drain and a build pod there."""
        return self.seed % 2 == 0

    @property
    def mcc_delay(self) -> float:
        return Timings.mcc_update_delay if self.racing_mcc else self.mcc_update_delay


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

    @property
    def ok(self) -> bool:
        """No violation, no crash, and the last rollout completed (every request got
        through in the end). A run that did not come to rest says so first in its text."""
        return self.checked.ok and not self.crashes and self.settled

    @property
    def stalled(self) -> bool:
        return not self.settled

    def failure_text(self) -> str:
        """The seed, the schedule and the minimal timeline of each node concerned."""
        state = "stalled" if self.checked.ok and not self.crashes else "FAILED"
        rerun = f"pytest tests/chaos --chaos-seed={self.seed}"
        out = [f"chaos seed {self.seed} {state} (rerun: {rerun})"]
        if not self.settled:
            out.append("the cluster did not come to rest after the faults stopped")
        out.extend(f"agent crashed: {c}" for c in self.crashes)
        out.extend(f"violation: {v}" for v in self.checked.violations)
        out.append("schedule:")
        out.extend(f"  {a}" for a in self.schedule)
        for node, text in self.timelines.items():
            out.append(f"timeline of {node}:")
            out.append(text)
        return "\n".join(out)


# --- the schedule ---------------------------------------------------------------------------


def make_schedule(config: ChaosConfig) -> list[Action]:
    """The run's actions, a pure function of ``config`` (and so of the seed)."""
    rng = random.Random(config.seed)
    nodes = [f"worker-{i}" for i in range(config.nodes)]
    actions: list[Action] = []
    for i in range(config.rollouts):
        slot = config.duration / config.rollouts
        actions.append(Action(round(i * slot + rng.uniform(0, slot / 2), 2), "rollout"))
    for _ in range(config.faults):
        kind = rng.choice(FAULT_KINDS)
        at = round(rng.uniform(0.2, config.duration), 2)
        node = rng.choice(nodes)
        params: dict[str, Any] = {}
        if kind in ("latency", "error"):
            # Error replies hit agents only: the simulated MCO actors do not retry every
            # call as real controllers do, so errors sent to them stall the rollout itself.
            targets = ("agent", "agents", "everyone") if kind == "latency" else ("agent", "agents")
            params["target"] = rng.choice(targets)
            params["seconds"] = round(rng.uniform(0.3, 1.5), 2)
            params["probability"] = round(rng.uniform(0.3, 0.9), 2)
            if kind == "latency":
                params["delay"] = round(rng.uniform(0.05, 0.4), 2)
            else:
                params["status"] = rng.choice((500, 500, 429, 503))
                params["verb"] = rng.choice((None, "patch", "get", "list", "watch"))
        elif kind in ("cut-watches", "expire-watches"):
            params["target"] = rng.choice(("agent", "agents", "everyone"))
            params["abort"] = rng.random() < 0.5
        elif kind == "kill-agent":
            params["down"] = round(rng.uniform(0.0, 1.5), 2)
        elif kind == "corrupt-host":
            params["how"] = rng.choice(("cmdline", "link-loop", "link-escape"))
        actions.append(Action(at, kind, node, tuple(params.items())))
    extra = random.Random(f"{config.seed}-reliability")
    for kind in RELIABILITY_KINDS:
        if extra.random() < 0.5:
            continue
        at = round(extra.uniform(0.2, config.duration), 2)
        node = extra.choice(nodes)
        if kind == "refuse-writes":
            params = {"status": extra.choice((409, 422)), "times": extra.randint(6, 12)}
        elif kind == "edge-date":
            params = {"value": extra.choice(EDGE_DATES)}
        else:
            params = {}
        actions.append(Action(at, kind, node, tuple(params.items())))
    actions.sort(key=lambda a: a.at)
    return actions


# --- the run --------------------------------------------------------------------------------


class _Run:
    def __init__(self, config: ChaosConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        timings = Timings(mcc_update_delay=config.mcc_delay)
        self.cluster = SimCluster(
            workdir,
            nodes=config.nodes,
            time_factor=config.time_factor,
            timings=timings,
            version=config.mco_version,
            node_writers=config.node_writers,
            seed=config.seed,
        )
        self.agents: dict[str, AgentProcess] = {}
        self.history: list[AgentProcess] = []
        self.by_harness: set[int] = set()  # id() of the agents the harness stopped
        self.impaired: dict[str, list[Interval]] = {}
        self.events: list[tuple[float, str | None, str]] = []
        self.faults: Counter[str] = Counter()
        self.fired: Counter[str] = Counter()
        self.reboots: Counter[str] = Counter()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.rollouts = 0
        self.locks: dict[str, asyncio.Lock] = {}
        #: When the scheduled actions are over (monotonic): a burst not armed by then is not.
        self.schedule_end = 0.0

    @property
    def nodes(self) -> list[str]:
        return self.cluster.node_names

    def note(self, node: str | None, text: str) -> None:
        self.events.append((time.monotonic(), node, text))

    def impair(self, nodes: Sequence[str], start: float, end: float) -> None:
        for node in nodes:
            self.impaired.setdefault(node, []).append((start, end + RECOVERY))

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- agents ------------------------------------------------------------------------------

    def lock(self, node: str) -> asyncio.Lock:
        """One lifecycle change of a node's agent at a time: never two agents for one node."""
        return self.locks.setdefault(node, asyncio.Lock())

    async def start_agent(self, node: str) -> AgentProcess:
        async with self.lock(node):
            return await self._start(node)

    async def _synced(self, timeout: float) -> None:  # noqa: ASYNC109
        """Until every current agent has made its first decision (or has exited)."""
        async with asyncio.timeout(timeout):
            for agent in list(self.agents.values()):
                with contextlib.suppress(AgentError):
                    await agent.wait_synced(timeout)

    async def restart_agent(self, node: str, down: float) -> None:
        async with self.lock(node):
            await self._kill(node)
            await asyncio.sleep(down)
            await self._start(node)

    async def ensure_agent(self, node: str) -> None:
        async with self.lock(node):
            agent = self.agents.get(node)
            if agent is None or not agent.running:
                await self._start(node)

    async def _start(self, node: str) -> AgentProcess:
        host = self.cluster.hosts[node]
        kubeconfig = self.cluster.api.kubeconfig(
            agent_user(node), self.workdir / "kubeconfigs" / f"agent-{node}"
        )
        agent = await spawn_agent(
            node,
            kubeconfig,
            host,
            "--max-hold",
            f"{self.config.max_hold:g}s",
            *(() if self.config.shield else ("--shield-build-pods", "false")),
            *self.config.agent_args,
        )
        self.agents[node] = agent
        self.history.append(agent)
        self.note(node, f"agent started (pid {agent.pid})")
        return agent

    async def _kill(self, node: str) -> None:
        agent = self.agents.get(node)
        if agent is None or not agent.running:
            return
        self.by_harness.add(id(agent))
        await agent.kill()
        self.note(node, f"agent killed (SIGKILL, pid {agent.pid})")

    async def on_reboot(self, node: str) -> None:
        """A reboot restarts the node's pods; whether it does here is drawn from the seed."""
        self.reboots[node] += 1
        key = f"{self.config.seed}/{node}/{self.reboots[node]}".encode()
        if hashlib.sha256(key).digest()[0] % 2 == 0:
            self.faults["reboot-restart"] += 1
            self.spawn(self.restart_agent(node, 0.0))

    # -- actions -----------------------------------------------------------------------------

    def _users(self, action: Action) -> tuple[list[str | None], list[str]]:
        """(fault users, impaired nodes) for a target of ``agent``, ``agents``, ``everyone``."""
        target = action.param("target", "agent")
        assert action.node is not None
        if target == "agent":
            return [agent_user(action.node)], [action.node]
        if target == "agents":
            return [agent_user(n) for n in self.nodes], list(self.nodes)
        return [None], list(self.nodes)

    async def act(self, action: Action) -> None:
        api = self.cluster.api
        node = action.node
        now = time.monotonic()
        self.faults[action.kind] += 1
        if action.kind == "rollout":
            self.rollouts += 1
            config = await self.cluster.create_machine_config(f"99-chaos-{self.rollouts}")
            self.note(None, f"rollout {self.rollouts}: MachineConfig renders {config}")
        elif action.kind in ("latency", "error"):
            users, hit = self._users(action)
            seconds = float(action.param("seconds"))
            rules = []
            for user in users:
                if action.kind == "latency":
                    rules.append(
                        api.faults.latency(
                            float(action.param("delay")),
                            user=user,
                            probability=float(action.param("probability")),
                        )
                    )
                else:
                    status = int(action.param("status"))
                    rules.append(
                        api.faults.error(
                            status,
                            retry_after=1 if status == 429 else None,
                            user=user,
                            verb=action.param("verb"),
                            probability=float(action.param("probability")),
                        )
                    )
            self.impair(hit, now, now + seconds)
            self.note(node, f"fault on: {action}")
            self.spawn(self._lift(rules, seconds, action))
        elif action.kind in ("cut-watches", "expire-watches"):
            users, hit = self._users(action)
            for user in users:
                if action.kind == "expire-watches":
                    api.faults.expire_watches(times=2, user=user)
                api.cut_watches(abort=bool(action.param("abort")), user=user)
            self.impair(hit, now, now)
            self.note(node, f"{action.kind} ({action.param('target')})")
        elif action.kind == "kill-agent":
            assert node is not None
            self.spawn(self.restart_agent(node, float(action.param("down"))))
        elif action.kind == "restart-mcd":
            assert node is not None
            self.cluster.restart_mcd(node)
            self.note(node, "MCD restarted")
        elif action.kind == "release":
            assert node is not None
            self.spawn(self._release(node))
        elif action.kind == "fail-build":
            self._fail_build()
        elif action.kind == "corrupt-host":
            assert node is not None
            await self._corrupt(node, str(action.param("how")))
        elif action.kind == "refuse-writes":
            self.spawn(self._refuse_from_next_request(action))
        elif action.kind == "hang-write":
            # Only the node's agent's Node writes, as a webhook's outage. Given up by the
            # agent after its 2 s write timeout, and retried.
            assert node is not None
            rule = api.faults.latency(
                30.0, user=agent_user(node), verb="patch", resource="nodes", times=1
            )
            self.impair([node], now, now + 3.0)
            self.note(node, f"fault on: {action}")
            self.spawn(self._lift([rule], 3.0, action))
        elif action.kind == "edge-date":
            assert node is not None
            value = str(action.param("value"))
            api.patch(
                "nodes",
                node,
                {"metadata": {"annotations": {HOLD_REQUEST: value}}},
                patch_type="merge",
                user=ADMIN_USER,
            )
            self.note(node, f"operator: hold-request={value!r}")

    async def _refuse_from_next_request(self, action: Action) -> None:
        """Refuse the node's agent's Node writes from the node's next drain request on: its
        next write meets the burst (its hold of the request, a release, a clean-up; armed at
        a random time for 5 s, a burst mostly met no write), which lasts until it is spent or
        max-hold and a bit have passed. The node counts as impaired only from its first
        refused write to its last (and the recovery after): with no competing write to wake
        it, the agent must keep its retry and max-hold timers, and the checker holds it to
        the build pod and to max-hold."""
        node = action.node
        assert node is not None
        api = self.cluster.api
        agent = agent_user(node)
        seen = len(api.write_log)

        def drain_requested() -> bool:
            nonlocal seen
            log = api.write_log
            found = any(_requests_drain(w, node, agent) for w in log[seen:])
            seen = len(log)
            return found

        try:  # until the schedule ends
            await api.wait_for(drain_requested, max(0.0, self.schedule_end - time.monotonic()))
        except TimeoutError:
            self.note(node, f"no drain request met: {action}")
            return
        status = int(action.param("status"))
        rule = api.faults.error(
            status,
            message="refused by chaos (an admission webhook)",
            user=agent,
            verb="patch",
            resource="nodes",
            times=int(action.param("times")),
        )
        armed = time.monotonic()
        self.note(node, f"fault on at the drain request: {action}")
        # Armed until the agent's next Node write meets it (or the schedule ends; re-checked
        # on every write of the cluster's), then until it is spent or max-hold has passed.
        with contextlib.suppress(TimeoutError):
            await api.wait_for(lambda: rule.fired, max(0.0, self.schedule_end - armed))
        await self._lift([rule], self.config.max_hold + 2.0 if rule.fired else 0.0, action)
        refused = [
            started
            for started, user, verb, resource, _, answer in api.request_log
            if started >= armed
            and (user, verb, resource, answer) == (agent, "patch", "nodes", status)
        ]
        if refused:
            self.impair([node], min(refused), max(refused))

    async def _lift(self, rules: list[Any], seconds: float, action: Action) -> None:
        await asyncio.sleep(seconds)
        for rule in rules:
            self.cluster.api.faults.remove(rule)
        fired = sum(rule.fired for rule in rules)
        self.fired[action.kind] += fired
        self.note(action.node, f"fault off: {action.kind} (fired {fired} times)")

    async def _release(self, node: str) -> None:
        """``drain-guard release`` as an operator would type it."""
        held = annotations_of(self.cluster.api.get("nodes", node)).get(DESIRED_DRAIN, "")
        if not held.startswith("hold-"):
            self.note(node, "operator: nothing held, no release")
            return
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "drain_guard",
            "release",
            "--node-name",
            node,
            "--kubeconfig",
            str(self.cluster.admin_kubeconfig),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        text = (out or err).decode(errors="replace").strip().splitlines()
        self.note(node, f"operator: drain-guard release → {proc.returncode} {text[:1]}")

    def _fail_build(self) -> None:
        """A build that fails: its pod goes away before the build completes."""
        for pod in self.cluster.build_pods():
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                continue
            name = pod["metadata"]["name"]
            with contextlib.suppress(Exception):
                self.cluster.api.delete("pods", name, MCO_NAMESPACE, user=ADMIN_USER)
                self.note(pod["spec"].get("nodeName"), f"build pod {name} killed: build fails")
                return
        self.note(None, "no running build to fail")

    async def _corrupt(self, node: str, how: str) -> None:
        """Make the booted image unreadable to the agent (the MCD reads other files)."""
        host = self.cluster.hosts[node]
        if how == "cmdline":
            text = host.cmdline_file.read_text()
            words = [w for w in text.split() if not w.startswith("ostree=")]
            host.cmdline_file.write_text(" ".join(words) + "\n")
        else:
            links = sorted((host.root / "ostree").glob("boot.*/*/*/*"))
            for link in links:
                link.unlink()
                link.symlink_to(link if how == "link-loop" else "/../../../../etc")
            # The agent re-reads the booted image when the boot changes; make it read now.
            await self.restart_agent(node, 0.0)
        self.note(node, f"host tree corrupted ({how}): booted image unreadable")

    # -- the whole run -----------------------------------------------------------------------

    async def run(self, schedule: Sequence[Action]) -> ChaosReport:
        began = time.monotonic()
        cluster = self.cluster
        cluster.api.faults.seed(self.config.seed)
        await cluster.start()
        # MCO 4.15 loses its build race as in the seed, by 10 MCO seconds (0.1 s here) each
        # side: the X→X drains come, whatever the machine's load.
        cluster.lose_build_races(margin=10.0)
        try:
            cluster.reboot_hooks.append(self.on_reboot)
            for node in self.nodes:
                await self.start_agent(node)
            await self._synced(60)
            start = time.monotonic()
            self.schedule_end = start + self.config.duration
            for action in schedule:
                delay = start + action.at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self.act(action)
            settled = await self.settle()
            end = time.monotonic()
            checked = self.check(end, settled)
            for agent in self.history:
                if agent.running:
                    self.by_harness.add(id(agent))
                    agent.proc.terminate()
            for agent in self.history:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(10):
                        await agent.closed()
        finally:
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            for agent in self.history:
                await agent.kill()
            await cluster.stop()
        crashes = [
            f"{a.node} pid {a.proc.pid} exited {a.proc.returncode}:\n    "
            + "\n    ".join(a.lines[-8:])
            for a in self.history
            if id(a) not in self.by_harness
        ]
        report = ChaosReport(
            seed=self.config.seed,
            schedule=list(schedule),
            checked=checked,
            faults=self.faults,
            fired=self.fired,
            events=self.events,
            settled=settled,
            crashes=crashes,
            agent_starts=len(self.history),
            writes=len(cluster.api.write_log),
            seconds=time.monotonic() - began,
        )
        if not report.ok:
            if not settled:
                report.timelines["the pool"] = "  " + self.pool_state()
            nodes = {v.node for v in checked.violations} or set(self.nodes)
            for node in sorted(nodes):
                report.timelines[node] = self.timeline(node, checked.violations)
        return report

    async def settle(self) -> bool:
        """Faults off, every agent up, tasks done; then one last rollout must complete."""
        self.cluster.api.faults.clear()
        self.cluster.reboot_hooks.remove(self.on_reboot)  # no more agent restarts either
        if self.cluster.drain is not None:
            # Nor an MCC racing the agents: a build evicted by a lost race would fail the
            # last rollout, which is MCO 4.15's behaviour, not something to wait out.
            timings = self.cluster.drain.timings
            self.cluster.drain.timings = replace(timings, mcc_update_delay=60.0)
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for node in self.nodes:
            await self.ensure_agent(node)
        await self._synced(60)
        # Let drains in flight finish (say, one an operator's release let through just
        # now): the simulated build controller would place the last build on a node being
        # drained, which a real scheduler would not.
        with contextlib.suppress(TimeoutError):
            await self.cluster.api.wait_for(self._quiet, 30.0)
        self.rollouts += 1
        config = await self.cluster.create_machine_config(f"99-chaos-{self.rollouts}")
        self.note(None, f"final rollout: MachineConfig renders {config}")
        try:
            await self.cluster.wait_rollout_done(self.config.settle_timeout)
        except TimeoutError:
            self.note(None, "the final rollout did not complete")
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

    def pool_state(self) -> str:
        """The worker pool and the builds, for a run that did not come to rest."""
        pool = self.cluster.api.get("machineconfigpools", "worker")
        status = pool.get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        builds = [
            (b["metadata"]["name"][-12:], (b.get("status") or {}).get("phase"))
            for b in self.cluster.api.list("builds", MCO_NAMESPACE)
        ]
        return (
            f"pool spec {pool['spec']['configuration']['name'][-12:]} "
            f"status {(status.get('configuration') or {}).get('name', '')[-12:]} "
            f"conditions {conditions} builds {builds}"
        )

    def clean(self, end: float) -> dict[str, list[Interval]]:
        """Per node: when its agent was up and synced, minus the impaired windows."""
        out: dict[str, list[Interval]] = {}
        for node in self.nodes:
            up = sorted(
                (a.synced_at, a.ended if a.ended is not None else end)
                for a in self.history
                if a.node == node and a.synced_at is not None
            )
            bad = sorted(self.impaired.get(node, []))
            for user_time, _status in self._failed_requests(agent_user(node)):
                bad.append((user_time, user_time + RECOVERY))
            out[node] = _subtract(up, sorted(bad))
        return out

    def _failed_requests(self, user: str) -> list[tuple[float, int]]:
        return [
            (t, status)
            for t, who, _verb, _res, _path, status in self.cluster.api.request_log
            if who == user and (status >= 500 or status == 429)
        ]

    def check(self, end: float, settled: bool) -> Checked:
        config = CheckerConfig(
            agent_users={agent_user(n): n for n in self.nodes},
            mcd_user=MCD_USER,
            mcc_user=MCC_USER,
            max_hold=self.config.max_hold,
            reconcile_interval=self.config.reconcile_interval,
            grace=self.config.grace,
            clean=self.clean(end),
            is_build_pod=is_build_pod,
            end=end,
            settled=settled,
        )
        return check(self.cluster.api.write_log, config)

    def timeline(self, node: str, violations: Sequence[Violation]) -> str:
        """The node's drain-relevant writes and the harness's actions before the violation."""
        last = max((v.t for v in violations if v.node == node), default=time.monotonic())
        entries: list[tuple[float, str]] = []
        for t, who, text in self.events:
            if who in (node, None):
                entries.append((t, f"harness   {text}"))
        for w in self.cluster.api.write_log:
            if w.resource != "nodes" or w.name != node:
                evicted = w.resource == "pods" and w.subresource == "eviction"
                pod_node = ((w.before or {}).get("spec") or {}).get("nodeName")
                if evicted and w.user == MCC_USER and pod_node == node:
                    entries.append((w.time, f"{_who(w.user):<9} evicted {w.name}"))
                continue
            before, after = annotations_of(w.before or {}), annotations_of(w.after or {})
            changes = [
                f"{k.rsplit('/', 1)[1]}={after.get(k)!r}"
                for k in (DESIRED_DRAIN, LAST_APPLIED_DRAIN)
                if before.get(k) != after.get(k)
            ]
            cordon = (
                ((w.before or {}).get("spec") or {}).get("unschedulable"),
                ((w.after or {}).get("spec") or {}).get("unschedulable"),
            )
            if cordon[0] != cordon[1]:
                changes.append("cordon" if cordon[1] else "uncordon")
            if changes:
                entries.append((w.time, f"{_who(w.user):<9} rv={w.rv} " + " ".join(changes)))
        entries.sort()
        window = [e for e in entries if e[0] <= last + 0.001][-30:]
        since = self.cluster.timeline.since_start
        lines = [f"  {since(t):8.3f}s {text}" for t, text in window]
        state = annotations_of(self.cluster.api.get("nodes", node))
        shown = {k.rsplit("/", 1)[1]: v for k, v in sorted(state.items()) if "Image" not in k}
        lines.append(f"  at the end: {shown}")
        return "\n".join(lines)


def _who(user: str) -> str:
    if user == MCD_USER:
        return "MCD"
    if user == MCC_USER:
        return "MCC"
    if user.startswith("system:serviceaccount:drain-guard:"):
        return "agent"
    return user.rsplit(":", 1)[-1]


def _subtract(intervals: Sequence[Interval], holes: Sequence[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for lo, hi in intervals:
        pieces = [(lo, hi)]
        for hlo, hhi in holes:
            nxt: list[Interval] = []
            for plo, phi in pieces:
                if hhi <= plo or hlo >= phi:
                    nxt.append((plo, phi))
                    continue
                if plo < hlo:
                    nxt.append((plo, hlo))
                if hhi < phi:
                    nxt.append((hhi, phi))
            pieces = nxt
        out.extend(pieces)
    return out


async def run_chaos(
    config: ChaosConfig, workdir: Path | None = None, schedule: Sequence[Action] | None = None
) -> ChaosReport:
    """One seeded chaos run (or a given schedule); see the module docstring."""
    if schedule is None:
        schedule = make_schedule(config)
    with tempfile.TemporaryDirectory(prefix=f"chaos-{config.seed}-") as tmp:
        return await _Run(config, workdir or Path(tmp)).run(schedule)


# --- soak -----------------------------------------------------------------------------------


@dataclass
class SoakReport:
    """RSS (bytes) and open fds of the agent, sampled as events were fed to it."""

    events: int
    samples: list[tuple[int, int, int]]  # (events so far, rss, fds)
    seconds: float
    #: The agent's own writes meanwhile (holds and releases): it was processing the events.
    agent_writes: int

    def summary(self) -> str:
        first, last = self.samples[0], self.samples[-1]
        peak = max(s[1] for s in self.samples)
        return (
            f"{self.events} events in {self.seconds:.1f}s: RSS {first[1] / 2**20:.1f} MiB → "
            f"{last[1] / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB), "
            f"fds {first[2]} → {last[2]} (max {max(s[2] for s in self.samples)}); "
            f"the agent wrote {self.agent_writes} holds and releases meanwhile"
        )


async def run_soak(
    events: int = 5000,
    samples: int = 20,
    workdir: Path | None = None,
    *,
    program: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> SoakReport:
    """Feed one agent ``events`` watch events (pod churn on its node, node annotation updates,
    drain requests it holds and releases) and sample its RSS and open fds along the way.
    ``program`` and ``env`` run drain-guard as :func:`spawn_agent` says (``benchmarks.soak``:
    as the image runs it)."""
    from drain_guard_sim.actors.hostfs import HostFS
    from drain_guard_sim.apiserver.server import SimApiServer

    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        root = workdir or Path(tmp)
        async with SimApiServer(bookmark_interval=1.0) as api:
            api.create("namespaces", {"metadata": {"name": MCO_NAMESPACE}})
            api.create("namespaces", {"metadata": {"name": "churn"}})
            api.create("nodes", {"metadata": {"name": "worker-0", "annotations": {}}, "spec": {}})
            host = HostFS(root / "host", "registry.example/os@sha256:" + "a" * 64)
            kubeconfig = api.kubeconfig(agent_user("worker-0"), root / "kubeconfig")
            agent = await spawn_agent(
                "worker-0",
                kubeconfig,
                host,
                "--log-level",
                "WARNING",
                log_path=root / "agent.log",
                program=program,
                env=env,
            )
            try:
                probe = psutil.Process(agent.pid)
                # Warm-up, not measured: imports, the first lists, one hold and release.
                await api.wait_for(_soak_event(api, -4) or (lambda: True), 60.0)
                await api.wait_for(_soak_event(api, -2) or (lambda: True), 10.0)
                out: list[tuple[int, int, int]] = []
                every = max(1, events // samples)
                for i in range(events):
                    awaited = _soak_event(api, i)
                    # The agent holds the request, or releases it once the build pod is
                    # gone: each cycle goes through it, or the soak stops here, saying why.
                    try:
                        await api.wait_for(awaited or (lambda: True), 10.0)
                    except TimeoutError:
                        tail = agent.lines[-15:]
                        user = agent_user("worker-0")
                        raise RuntimeError(
                            f"event {i}: the agent did not act (desiredDrain "
                            f"{_desired(api)!r}; open watches {api.open_watches}, its pod "
                            f"lists {api.request_count(user=user, verb='list')} and watches "
                            f"{api.request_count(user=user, verb='watch')}); its log ends:\n"
                            + "\n".join(tail)
                        ) from None
                    if i % every == 0 or i == events - 1:
                        await asyncio.sleep(0.2)
                        out.append((i + 1, probe.memory_info().rss, probe.num_fds()))
            finally:
                await agent.stop(timeout=10, kill_after=True)
            written = len(api.writes("nodes", user=agent_user("worker-0")))
    return SoakReport(events, out, time.monotonic() - began, written)


def _soak_event(api: Any, i: int) -> Callable[[], bool] | None:
    """One event of a churning node: pods come and go, requests are held and released.
    Returns what the agent must have done before the next event, if anything."""
    name = f"pod-{i % 40}"
    step = i % 10
    if step < 6:
        if api.try_get("pods", name, "churn") is None:
            api.create(
                "pods",
                {
                    "metadata": {"name": name, "namespace": "churn", "labels": {"i": str(i)}},
                    "spec": {"nodeName": "worker-0", "containers": [{"name": "c", "image": "x"}]},
                    "status": {"phase": "Running"},
                },
                "churn",
            )
        else:
            api.delete("pods", name, "churn")
    elif step == 6:
        labels = {BUILD_NAME_LABEL: f"build-{i}"}
        api.create(
            "pods",
            {
                "metadata": {"name": f"build-{i}", "namespace": MCO_NAMESPACE, "labels": labels},
                "spec": {"nodeName": "worker-0", "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running"},
            },
            MCO_NAMESPACE,
        )
        api.patch(
            "nodes",
            "worker-0",
            {"metadata": {"annotations": {DESIRED_DRAIN: f"drain-rendered-{i}"}}},
            user=MCD_USER,
        )
        return lambda: _desired(api) == f"hold-drain-rendered-{i}"
    elif step == 8:
        api.delete("pods", f"build-{i - 2}", MCO_NAMESPACE)
        return lambda: _desired(api) == f"drain-rendered-{i - 2}"
    else:
        api.patch("nodes", "worker-0", {"metadata": {"labels": {"churn": str(i)}}}, user=ADMIN_USER)
    return None


def _requests_drain(write: WriteRecord, node: str, agent: str) -> bool:
    """Whether ``write`` is someone else's new drain request on ``node`` (the MCD's, or an
    MCD's restart writing it again), not the agent's own release of a held one."""
    if write.resource != "nodes" or write.name != node or write.user == agent:
        return False
    before = annotations_of(write.before or {}).get(DESIRED_DRAIN)
    after = annotations_of(write.after or {}).get(DESIRED_DRAIN) or ""
    return after != before and after.startswith("drain-")


def _desired(api: Any) -> str | None:
    desired: str | None = annotations_of(api.get("nodes", "worker-0")).get(DESIRED_DRAIN)
    return desired


# --- command line ---------------------------------------------------------------------------


def _summary(reports: Sequence[ChaosReport]) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    for r in reports:
        faults.update(r.faults)
    return {
        "seeds": len(reports),
        "failed_seeds": [r.seed for r in reports if not r.ok],
        "stalled_seeds": [r.seed for r in reports if r.stalled],
        "violations": sum(len(r.checked.violations) for r in reports),
        "actions_by_kind": dict(sorted(faults.items())),
        "requests_hit_by_kind": dict(
            sorted(sum((r.fired for r in reports), Counter[str]()).items())
        ),
        "mcd_requests": sum(r.checked.requests for r in reports),
        "holds": sum(r.checked.holds for r in reports),
        "releases": sum(r.checked.releases for r in reports),
        "race_lost_releases": sum(r.checked.race_lost_releases for r in reports),
        "superseded_by_mcd": sum(r.checked.supersedes for r in reports),
        "build_pod_evictions": sum(r.checked.build_pod_evictions for r in reports),
        "evictions_excused": dict(
            sum((r.checked.evictions_excused for r in reports), Counter[str]())
        ),
        "agent_starts": sum(r.agent_starts for r in reports),
        "writes": sum(r.writes for r in reports),
        "seconds": round(sum(r.seconds for r in reports), 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drain_guard_sim.harness.chaos")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="chaos runs; prints a JSON summary")
    run.add_argument("--seeds", type=int, default=1)
    run.add_argument("--first", type=int, default=1)
    run.add_argument("--seed", type=int, default=None, help="one seed, schedule printed")
    soak = sub.add_parser("soak", help="agent RSS and fds over many events")
    soak.add_argument("--events", type=int, default=5000)
    soak.add_argument("--samples", type=int, default=20)
    args = parser.parse_args(argv)
    # The simulator's server logs every watch a cut or a stop breaks; that is the chaos.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    if args.command == "soak":
        soaked = asyncio.run(run_soak(args.events, args.samples))
        print(soaked.summary())
        for n, rss, fds in soaked.samples:
            print(f"  {n:6d} events  rss {rss / 2**20:6.1f} MiB  fds {fds}")
        return 0
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    reports = []
    for seed in seeds:
        report = asyncio.run(run_chaos(ChaosConfig(seed=seed)))
        reports.append(report)
        state = "ok" if report.ok else "FAILED"
        print(f"seed {seed}: {state} ({report.seconds:.1f}s)", file=sys.stderr, flush=True)
        if state != "ok":
            print(report.failure_text(), flush=True)
        elif args.seed is not None:
            print("\n".join(map(str, report.schedule)))
    print(json.dumps(_summary(reports), indent=2))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        sys.exit(main())
