"""The build-pod guard: a drain would evict a running build (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from drain_guard.core.pods import DEFAULT_SCOPE, Pod, PodScope, running_build_pods
from drain_guard.core.selectors import BuildPodSelector
from drain_guard.guards.base import (
    AgentSettings,
    Block,
    BuildPodsSeen,
    Clear,
    Guard,
    GuardKind,
    NodeView,
    ObjectRef,
    Unknown,
    Verdict,
)
from drain_guard.protocol import Reason


class BuildPodGuard:
    """Blocks while a build pod of the scope runs on the node: a drain would evict it."""

    reason = Reason.BUILD_POD
    reads: tuple[ObjectRef, ...] = ()

    def __init__(
        self, selectors: Sequence[BuildPodSelector], scope: PodScope = DEFAULT_SCOPE
    ) -> None:
        if not selectors:
            raise ValueError("the build-pod guard needs at least one selector")
        self.selectors = tuple(selectors)
        self.scope = scope

    def build_pods(self, pods: Sequence[Pod]) -> list[Pod]:
        """The pods a drain would harm (``pods.running_build_pods``)."""
        return running_build_pods(pods, self.selectors, self.scope)

    def check(self, view: NodeView) -> Verdict:
        if view.pods is None:
            return Unknown(self.reason, "pods on the node are not synced yet")
        found = self.build_pods(view.pods)
        seen = BuildPodsSeen(tuple(found))
        if not found:
            return Clear(self.reason, "no build pod on the node", evidence=seen)
        names = ", ".join(sorted(f"{p.namespace}/{p.name}" for p in found))
        return Block(self.reason, f"build pod{'s' if len(found) > 1 else ''} {names}", seen)


def _releases_when(detail: str, _until: datetime | None) -> str:
    pods = detail or "the build pod"
    return f"{Reason.BUILD_POD}: when {pods} {'end' if pods.startswith('build pods') else 'ends'}"


def _build(settings: AgentSettings, _raw: Mapping[str, object]) -> Guard:
    return BuildPodGuard(settings.build_pod_selectors, settings.build_pod_scope)


KIND = GuardKind(Reason.BUILD_POD, _releases_when, _build)
