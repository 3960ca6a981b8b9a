"""The demo's agents: one real ``drain-guard run`` process per node, restarted when its node
reboots (as a DaemonSet pod is), and their decisions read from their structured logs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drain_guard_sim.harness.agentproc import AgentError, AgentProcess, spawn_agent
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.realcluster import RealCluster

AGENT_ACTOR = "drain-guard"
#: The cluster a run plays on: the simulator's, or the real control plane's (``--api real``).
Cluster = SimCluster | RealCluster
START_TIMEOUT = 30.0  # seconds for an agent to start and make its first decision
#: The agent's --noop-expect-within default (5 min), in MCO seconds, scaled for its agents.
NOOP_EXPECT_WITHIN = 300.0


class Agents:
    """One agent per node, as a DaemonSet would run them; a node's reboot restarts its agent."""

    def __init__(self, cluster: Cluster, logdir: Path, max_hold: float) -> None:
        self.cluster = cluster
        self.logdir = logdir
        # The agents' --max-hold in simulated seconds (MCO's scaled, as every duration here).
        self.max_hold = max(1, round(max_hold * cluster.timings.time_factor))
        # How long the noop-image guard waits for a build MCO is about to start, scaled alike
        # (the agent's --noop-expect-within is MCO's minutes, not the simulation's).
        self.expect_within_ms = max(
            1, round(NOOP_EXPECT_WITHIN * cluster.timings.time_factor * 1000)
        )
        self.procs: dict[str, AgentProcess] = {}
        self.decisions: list[AgentDecision] = []
        self._last: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._closed = False

    async def start(self, node: str) -> None:
        cluster = self.cluster
        agent = await spawn_agent(
            node,
            cluster.agent_kubeconfig(node),
            cluster.hosts[node],
            "--max-hold",
            f"{self.max_hold}s",
            "--noop-expect-within",
            f"{self.expect_within_ms}ms",
            log_path=self.logdir / f"agent-{node}.log",
            on_record=lambda record: self._decision(node, record),
        )
        self.procs[node] = agent
        try:
            await agent.wait_synced(START_TIMEOUT)
        except (TimeoutError, AgentError):
            await agent.kill()
            raise RuntimeError(
                f"the agent for {node} was not ready in time:\n{agent.log_text(20)}"
            ) from None

    def _decision(self, node: str, record: dict[str, Any]) -> None:
        """Put each change of an agent's decision on the shared timeline."""
        try:
            decision = AgentDecision.from_record(record)
        except ValueError as err:
            self.cluster.timeline.add(AGENT_ACTOR, node, f"unreadable decision record: {err}")
            return
        self.decisions.append(decision)
        if self._last.get(node) == (decision.outcome, decision.reasons):
            return
        self._last[node] = (decision.outcome, decision.reasons)
        if decision.outcome == "idle":
            return
        why = decision.why or decision.request
        self.cluster.timeline.add(AGENT_ACTOR, node, f"{decision.outcome}: {why}")

    async def restart(self, node: str) -> None:
        await self.stop(node)
        if not self._closed:  # a reboot finishing while the demo shuts down starts nothing
            await self.start(node)

    async def stop(self, node: str) -> None:
        agent = self.procs.pop(node, None)
        if agent is not None:
            await agent.stop(timeout=10, kill_after=True)

    async def stop_all(self) -> None:
        self._closed = True
        for node in list(self.procs):
            await self.stop(node)

    def holds(self) -> dict[str, set[str]]:
        return held_reasons(self.decisions)


#: The outcomes of the agent's decisions (the ``outcome`` field) that hold a drain.
HOLDING = frozenset({"hold", "holding", "update-hold"})


@dataclass(frozen=True)
class AgentDecision:
    """One decision of an agent as the demo reads it: the structured fields of the agent's
    ``decision`` log record (``--log-format json``), never its text."""

    node: str
    request: str
    outcome: str
    reasons: tuple[str, ...]
    why: str

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AgentDecision:
        """Raises ValueError naming the field when the record lacks one or has it mistyped."""
        reasons = record.get("reasons")
        if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
            raise ValueError(f"field 'reasons' is {reasons!r}, not a list of text")
        return cls(
            node=_text(record, "node"),
            request=_text(record, "request"),
            outcome=_text(record, "outcome"),
            reasons=tuple(reasons),
            why=_text(record, "why"),
        )


def _text(record: Mapping[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} is {value!r}, not text")
    return value


def held_reasons(decisions: Iterable[AgentDecision]) -> dict[str, set[str]]:
    """Node → the reasons of every hold its agent placed or kept."""
    out: dict[str, set[str]] = {}
    for decision in decisions:
        if decision.outcome in HOLDING:
            out.setdefault(decision.node, set()).update(decision.reasons)
    return out
