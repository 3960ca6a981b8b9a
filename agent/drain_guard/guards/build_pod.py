"""The build-pod guard: a drain would evict a running build (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Sequence

from drain_guard.guards.base import Block, BuildPodsSeen, Clear, NodeView, Unknown, Verdict
from drain_guard.pods import DEFAULT_SCOPE, Pod, PodScope, running_build_pods
from drain_guard.protocol import Reason
from drain_guard.selectors import BuildPodSelector


class BuildPodGuard:
    """Blocks while a build pod of the scope runs on the node: a drain would evict it."""

    reason = Reason.BUILD_POD

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
