"""What the invariant checker (``checker``) is given besides the write log, and what it
returns: the broken rules and what was checked."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drain_guard_sim.harness.intervals import Interval

JsonObj = dict[str, Any]


@dataclass(frozen=True)
class Violation:
    """One broken rule: which, where, when (monotonic), and the write that shows it."""

    rule: str
    node: str
    t: float
    message: str
    rv: int | None = None

    def __str__(self) -> str:
        where = f" (write rv={self.rv})" if self.rv is not None else ""
        return f"[{self.rule}] {self.node} at t={self.t:.3f}: {self.message}{where}"


@dataclass(frozen=True)
class CheckerConfig:
    """What the checker needs to know besides the write log."""

    #: Agent user name → the node that agent runs on.
    agent_users: Mapping[str, str]
    mcd_user: str
    mcc_user: str
    max_hold: float
    #: How late past ``max-hold`` a release may land (one pass of the agent's loop).
    reconcile_interval: float
    #: How long an agent may take to react to a request it can see.
    grace: float
    #: node → intervals in which its agent was up, synced and not hit by faults.
    clean: Mapping[str, Sequence[Interval]]
    #: Whether a Pod object is a build pod (decided here, not by the agent's selectors).
    is_build_pod: Callable[[JsonObj], bool]
    #: When the run ended (monotonic); holds still in force are judged up to here.
    end: float
    #: The run was brought to rest (faults off, agents up, rollout done): no hold may remain.
    settled: bool = True


@dataclass
class Checked:
    """The checker's verdict plus the figures a long run reports."""

    violations: list[Violation] = field(default_factory=list)
    holds: int = 0
    releases: int = 0
    race_lost_releases: int = 0
    supersedes: int = 0
    build_pod_evictions: int = 0
    #: Why the evictions that are not violations are not: the agent was down or impaired,
    #: or the request was never un-held long enough (held, released on purpose, a race).
    evictions_excused: Counter[str] = field(default_factory=Counter)
    requests: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations
