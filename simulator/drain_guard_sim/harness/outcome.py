"""What happened in a run of the seed's scenario, as a test or the demo reads it: the build's
result, each cordon with the update that asked for it, the evictions, updates and reboots."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from drain_guard_sim.actors.mcd import UpdateRecord
from drain_guard_sim.actors.mco import CURRENT_IMAGE, DESIRED_DRAIN, DESIRED_IMAGE, MCO_NAMESPACE
from drain_guard_sim.actors.nodemachine import NodeMachine


@dataclass(frozen=True)
class BuildResult:
    """How the build ended, as ``oc get build`` shows it (phase and reason)."""

    name: str
    phase: str
    reason: str
    node: str | None
    started: float
    finished: float

    @property
    def succeeded(self) -> bool:
        return self.phase == "Complete"


@dataclass(frozen=True)
class Cordon:
    """The MCC cordoned a node: when, for which request, and what the node said then."""

    node: str
    t: float
    desired_drain: str
    desired_image: str
    current_image: str
    update: UpdateRecord | None  # the MCD update that asked for it (its planned transition)

    @property
    def unchanged_image(self) -> bool:
        """The node's desired image equals its booted one: a pointless drain (a node of a pool
        without layering has no image: its drains are for its configs)."""
        return bool(self.desired_image) and self.desired_image == self.current_image


@dataclass
class Outcome:
    """What happened, reconstructed from the simulator's write log and the actors' records."""

    build: BuildResult | None
    cordons: list[Cordon]
    evictions: list[tuple[float, str, str]]  # (t, node, namespace/name)
    updates: list[UpdateRecord]
    reboots: dict[str, int]

    def during_build(self) -> list[Cordon]:
        b = self.build
        if b is None:
            return []
        return [c for c in self.cordons if b.started <= c.t <= b.finished]

    def after_build(self) -> list[Cordon]:
        b = self.build
        return [c for c in self.cordons if b is None or c.t > b.finished]

    def unchanged_image_cordons(self) -> list[Cordon]:
        return [c for c in self.cordons if c.unchanged_image]

    def build_pods_evicted(self) -> list[str]:
        """The build pods (``namespace/name``) the drain controller evicted."""
        return [p for _, _, p in self.evictions if p.startswith(f"{MCO_NAMESPACE}/build-")]

    def build_pod_evicted(self) -> bool:
        return bool(self.build_pods_evicted())


class ScenarioOutcome(abc.ABC):
    """The outcome part of :class:`~drain_guard_sim.harness.scenario.Scenario` (which holds the
    state); the server says how it reads back (the abstract methods)."""

    machines: dict[str, NodeMachine]

    def cordons(self) -> list[Cordon]:
        """Every time the MCC cordoned a node, with the MCD update that asked for it."""
        out = []
        for t, node, ann in self._cordon_records():
            update = None
            for u in self.machines[node].updates:
                if u.started <= t and u.drain_requested:
                    update = u
            out.append(
                Cordon(
                    node=node,
                    t=t,
                    desired_drain=ann.get(DESIRED_DRAIN, ""),
                    desired_image=ann.get(DESIRED_IMAGE, ""),
                    current_image=ann.get(CURRENT_IMAGE, ""),
                    update=update,
                )
            )
        return out

    def outcome(self) -> Outcome:
        return Outcome(
            build=self.build_result(),
            cordons=self.cordons(),
            evictions=self.evictions(),
            updates=[u for m in self.machines.values() for u in m.updates],
            reboots={name: m.reboots for name, m in self.machines.items()},
        )

    @abc.abstractmethod
    def _cordon_records(self) -> list[tuple[float, str, dict[str, str]]]:
        """Each cordon: when (timeline seconds), the node, its annotations then."""

    @abc.abstractmethod
    def build_result(self) -> BuildResult | None:
        """The (last) build's outcome; None before any build ended."""

    @abc.abstractmethod
    def evictions(self) -> list[tuple[float, str, str]]:
        """Pods the drain controller evicted: (timeline seconds, node, namespace/name)."""
