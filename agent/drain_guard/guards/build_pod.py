"""The build-pod guard: a drain would evict a running build, or the builder it needs (pure: no
I/O).

It blocks while a build pod of the scope runs on the node, and, where the agent reads MCO's
MachineOSBuilds (4.16+), while the ``machine-os-builder`` pod runs on the node and a
MachineOSBuild is in flight (its ``Prepared`` or ``Building`` condition True): on MCO 4.18
and 4.19 a drain of that pod during a build makes MCO create the build again and leaves the
pool degraded (OCPBUGS-58238, fixed from 4.20; docs/mco-versions.md, D2). On 4.20+ and 4.16/
4.17, which do not need it, the hold costs that node's drain at most the rest of the build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from drain_guard.core.pods import DEFAULT_SCOPE, Pod, PodScope, running_build_pods
from drain_guard.core.replacement import McoObjects
from drain_guard.core.selectors import MCO_NAMESPACE, BuildPodSelector
from drain_guard.guards.base import (
    Block,
    BuildPodsSeen,
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
        if found:
            names = ", ".join(sorted(f"{p.namespace}/{p.name}" for p in found))
            return Block(self.reason, f"build pod{'s' if len(found) > 1 else ''} {names}", seen)
        builders = sorted(p.key for p in view.pods if is_builder(p))
        building = builds_in_flight(view.mco) if builders else []
        if building:
            detail = f"{builders[0]} while MachineOSBuild {building[0]} builds"
            return Block(self.reason, detail, seen)
        return Clear(self.reason, "no build pod on the node", evidence=seen)


#: The pod of MCO's build controller (``machine-os-builder``), by its Deployment's label.
BUILDER_LABEL = ("k8s-app", "machine-os-builder")
_IN_FLIGHT = ("Prepared", "Building")


def is_builder(pod: Pod) -> bool:
    """A running ``machine-os-builder`` pod of MCO's namespace."""
    key, value = BUILDER_LABEL
    return pod.running and pod.namespace == MCO_NAMESPACE and pod.labels.get(key) == value


def builds_in_flight(mco: McoObjects | None) -> list[str]:
    """The MachineOSBuilds whose ``Prepared`` or ``Building`` condition is True, by name;
    none where the agent does not read them or cannot now (it never holds on a guess)."""
    if mco is None or mco.unreadable is not None or not mco.builds:
        return []
    out = []
    for build in mco.builds:
        status = build.get("status")
        conditions = status.get("conditions") if isinstance(status, Mapping) else None
        for cond in conditions if isinstance(conditions, list) else ():
            if (
                isinstance(cond, Mapping)
                and cond.get("type") in _IN_FLIGHT
                and cond.get("status") == "True"
            ):
                meta = build.get("metadata")
                out.append(str(meta.get("name", "")) if isinstance(meta, Mapping) else "")
                break
    return sorted(out)


def _releases_when(detail: str, _until: datetime | None) -> str:
    if " while MachineOSBuild " in detail:
        return f"{Reason.BUILD_POD}: when the MachineOSBuild ends or {detail.split()[0]} leaves"
    pods = detail or "the build pod"
    return f"{Reason.BUILD_POD}: when {pods} {'end' if pods.startswith('build pods') else 'ends'}"


def _build(settings: GuardSettings, _raw: Mapping[str, object]) -> Guard:
    return BuildPodGuard(settings.scope.build_pod_selectors, settings.scope.build_pod_scope)


KIND = GuardKind(Reason.BUILD_POD, _releases_when, _build)
