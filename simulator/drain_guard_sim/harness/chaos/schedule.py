"""A chaos run's schedule: its size and pace (``ChaosConfig``) and its actions, a pure
function of the seed (``make_schedule``), so that a failing seed replays the same actions."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from drain_guard_sim.actors.mco import McoVersion, Timings

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
