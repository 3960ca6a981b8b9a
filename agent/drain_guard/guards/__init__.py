"""Guards: given what the agent sees, does each say a drain should wait (pure: no I/O).

One module per guard; ``base`` holds what they share. Each guard returns a ``Verdict``;
``drain_guard.decide`` turns the verdicts and the Node's annotations into a ``Decision``
(``drain_guard.decisions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from drain_guard.alerts import OnUnreachable
from drain_guard.guards.alert import AlertGuard
from drain_guard.guards.base import (
    MAX_INVALID_BYTES,
    Block,
    BootedImage,
    BuildPodsSeen,
    Clear,
    Guard,
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
from drain_guard.pods import DEFAULT_SCOPE, PodScope
from drain_guard.selectors import BuildPodSelector

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
    "ImageCompared",
    "InvalidInput",
    "ManualGuard",
    "NodeLabelGuard",
    "NodeView",
    "NoopImageGuard",
    "Unknown",
    "Verdict",
    "default_guards",
    "evidence",
    "format_hold_request",
    "parse_hold_request",
]


def default_guards(
    selectors: Sequence[BuildPodSelector],
    scope: PodScope = DEFAULT_SCOPE,
    on_unreachable: OnUnreachable | None = None,
    blocking: Sequence[BuildPodSelector] = (),
    blocking_namespaces: Iterable[str] = (),
) -> tuple[Guard, ...]:
    """The guards the agent runs, in the order their reasons are listed; the alert guard
    only with alert gating on (``on_unreachable`` given), the blocking-pod guard only with
    ``blocking`` selectors."""
    found: tuple[Guard, ...] = (BuildPodGuard(selectors, scope), NoopImageGuard(), ManualGuard())
    if on_unreachable is not None:
        found += (AlertGuard(on_unreachable),)
    if blocking:
        found += (BlockingPodGuard(blocking, blocking_namespaces),)
    return (*found, NodeLabelGuard())
