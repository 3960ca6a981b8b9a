"""The agents of a chaos run: one ``drain-guard run`` process per node, started, killed and
restarted by the run (and by the nodes' reboots), never two at once for a node."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from drain_guard_sim.harness.agentproc import AgentError, AgentProcess, agent_user, spawn_agent
from drain_guard_sim.harness.chaos.schedule import ChaosConfig
from drain_guard_sim.harness.cluster import SimCluster

#: Notes a line on the run's own timeline: (node or None, text).
Note = Callable[[str | None, str], None]
#: Runs a coroutine in the background for as long as the run lasts.
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class AgentFleet:
    """Every agent process the run started (``history``), the current one per node
    (``agents``), and which of them the harness stopped (the others crashed)."""

    def __init__(
        self,
        cluster: SimCluster,
        workdir: Path,
        config: ChaosConfig,
        faults: Counter[str],
        note: Note,
        spawn: Spawn,
    ) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.config = config
        self.faults = faults
        self.note = note
        self.spawn = spawn
        self.agents: dict[str, AgentProcess] = {}
        self.history: list[AgentProcess] = []
        self.by_harness: set[int] = set()  # id() of the agents the harness stopped
        self.reboots: Counter[str] = Counter()
        self.locks: dict[str, asyncio.Lock] = {}

    def lock(self, node: str) -> asyncio.Lock:
        """One lifecycle change of a node's agent at a time: never two agents for one node."""
        return self.locks.setdefault(node, asyncio.Lock())

    async def start(self, node: str) -> AgentProcess:
        async with self.lock(node):
            return await self._start(node)

    async def synced(self, timeout: float) -> None:  # noqa: ASYNC109
        """Until every current agent has made its first decision (or has exited)."""
        async with asyncio.timeout(timeout):
            for agent in list(self.agents.values()):
                with contextlib.suppress(AgentError):
                    await agent.wait_synced(timeout)

    async def restart(self, node: str, down: float) -> None:
        async with self.lock(node):
            await self._kill(node)
            await asyncio.sleep(down)
            await self._start(node)

    async def ensure(self, node: str) -> None:
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
            self.spawn(self.restart(node, 0.0))

    async def stop_all(self) -> None:
        """Stop the agents still running (SIGTERM: they release on the way out)."""
        for agent in self.history:
            if agent.running:
                self.by_harness.add(id(agent))
                agent.proc.terminate()
        for agent in self.history:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await agent.closed()

    async def kill_all(self) -> None:
        for agent in self.history:
            await agent.kill()

    def crashes(self) -> list[str]:
        """The agents that ended without the harness stopping them, with their last lines."""
        return [
            f"{a.node} pid {a.proc.pid} exited {a.proc.returncode}:\n    "
            + "\n    ".join(a.lines[-8:])
            for a in self.history
            if id(a) not in self.by_harness
        ]
