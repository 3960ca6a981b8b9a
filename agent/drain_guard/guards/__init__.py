"""Guards: given what the agent sees, does each say a drain should wait (pure: no I/O).

One module per guard, each declaring its ``GuardKind``; ``base`` holds what they share,
``registry`` lists them. Each guard returns a ``Verdict``;
``drain_guard.decision.decide`` turns the verdicts and the Node's annotations into a ``Decision``
(``drain_guard.decision.decisions``).
"""

from __future__ import annotations

from drain_guard.guards.alert import AlertGuard
from drain_guard.guards.base import (
    MAX_INVALID_BYTES,
    Block,
    BootedImage,
    BuildPodsSeen,
    Clear,
    Guard,
    GuardKind,
    GuardSettings,
    ImageCompared,
    InvalidInput,
    NodeView,
    Unknown,
    Verdict,
    evidence,
)
from drain_guard.guards.blocking_pod import BlockingPodGuard
from drain_guard.guards.build_pod import BuildPodGuard
from drain_guard.guards.manual import ManualGuard, format_hold_request, parse_hold_request
from drain_guard.guards.node_label import NodeLabelGuard
from drain_guard.guards.noop_image import NoopImageGuard

__all__ = [
    "MAX_INVALID_BYTES",
    "AlertGuard",
    "Block",
    "BlockingPodGuard",
    "BootedImage",
    "BuildPodGuard",
    "BuildPodsSeen",
    "Clear",
    "Guard",
    "GuardKind",
    "GuardSettings",
    "ImageCompared",
    "InvalidInput",
    "ManualGuard",
    "NodeLabelGuard",
    "NodeView",
    "NoopImageGuard",
    "Unknown",
    "Verdict",
    "evidence",
    "format_hold_request",
    "parse_hold_request",
]
