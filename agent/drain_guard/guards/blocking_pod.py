"""The blocking-pod guard: a pod the operator declared blocking runs on the node (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from drain_guard.core.pods import running_blocking_pods
from drain_guard.core.selectors import BuildPodSelector
from drain_guard.guards.base import (
    Block,
    Clear,
    Guard,
    GuardKind,
    GuardSettings,
    NodeView,
    ObjectRef,
    Unknown,
    Verdict,
)
from drain_guard.protocol import Reason


class BlockingPodGuard:
    """Blocks while a pod the operator declared blocking (``--blocking-pod-selector``) runs on
    the node, in a namespace opted in with ``--blocking-pod-namespace``: a drain would evict
    it. Separate from the build-pod guard: no shield budget follows these pods (a budget
    the agent keeps on any pod an opted-in tenant labels would outlive the agent's bounds)."""

    reason = Reason.BLOCKING_POD
    reads: tuple[ObjectRef, ...] = ()

    def __init__(self, selectors: Sequence[BuildPodSelector], namespaces: Iterable[str]) -> None:
        if not selectors:
            raise ValueError("the blocking-pod guard needs at least one selector")
        self.selectors = tuple(selectors)
        self.namespaces = frozenset(namespaces)

    def check(self, view: NodeView) -> Verdict:
        if view.pods is None or view.blocking_pods is None:
            return Unknown(self.reason, "pods on the node are not synced yet")
        pods = {p.key: p for p in (*view.pods, *view.blocking_pods)}.values()
        found = running_blocking_pods(pods, self.selectors, self.namespaces)
        if not found:
            return Clear(self.reason, "no blocking pod runs on the node")
        names = ", ".join(sorted(p.key for p in found))
        return Block(self.reason, f"blocking pod{'s' if len(found) > 1 else ''} {names}")


def _releases_when(detail: str, _until: datetime | None) -> str:
    pods = detail or "the blocking pod"
    ends = "stop" if pods.startswith("blocking pods") else "stops"
    return f"{Reason.BLOCKING_POD}: when {pods} {ends} running (completes, fails or is deleted)"


def _build(settings: GuardSettings, _raw: Mapping[str, object]) -> Guard | None:
    """On with ``--blocking-pod-selector``."""
    scope = settings.scope
    if not scope.blocking_pod_selectors:
        return None
    return BlockingPodGuard(scope.blocking_pod_selectors, scope.blocking_pod_namespaces)


KIND = GuardKind(Reason.BLOCKING_POD, _releases_when, _build)
