"""The node-label guard: the Node carries ``drain-guard.io/block-drains`` (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from drain_guard.guards.base import (
    Block,
    Clear,
    Guard,
    GuardKind,
    GuardSettings,
    NodeView,
    ObjectRef,
    Verdict,
)
from drain_guard.protocol import BLOCK_DRAINS_LABEL, Reason


class NodeLabelGuard:
    """Blocks while the Node carries the label ``drain-guard.io/block-drains`` (any value: an
    operator's note), set with ``oc label node``; the agent only reads it."""

    reason = Reason.NODE_LABEL
    reads: tuple[ObjectRef, ...] = ()

    def check(self, view: NodeView) -> Verdict:
        value = view.labels.get(BLOCK_DRAINS_LABEL)
        if value is None:
            return Clear(self.reason, f"no {BLOCK_DRAINS_LABEL} label")
        return Block(self.reason, f"node label {BLOCK_DRAINS_LABEL}={value}")


def _releases_when(_detail: str, _until: datetime | None) -> str:
    return f"{Reason.NODE_LABEL}: when the label {BLOCK_DRAINS_LABEL} is removed from the node"


def _build(_settings: GuardSettings, _raw: Mapping[str, object]) -> Guard:
    return NodeLabelGuard()


KIND = GuardKind(Reason.NODE_LABEL, _releases_when, _build)
