"""What every guard shares (pure: no I/O): what it looks at (``NodeView``), what it says (a
``Verdict``: ``Block``, ``Unknown`` or ``Clear``, with its evidence) and the ``Guard`` protocol.

``drain_guard.decision.decide`` turns the verdicts and the Node's annotations into a ``Decision``
(``drain_guard.decision.decisions``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from drain_guard.config.alerts import AlertSettings
from drain_guard.config.options import Option
from drain_guard.config.scope import ScopeSettings
from drain_guard.core.alerts import AlertsSeen
from drain_guard.core.operations import Watched
from drain_guard.core.pods import Pod
from drain_guard.core.replacement import McoObjects, Replacement
from drain_guard.protocol import HoldRecord, Reason, truncate_utf8

# --- what the guards look at --------------------------------------------------------------


@dataclass(frozen=True)
class BootedImage:
    """The image the host booted; ``digest`` None means unknown, ``error`` says why."""

    digest: str | None
    reference: str | None
    source: str
    error: str | None = None
    #: Since when reading it fails (the agent reads it again with backoff meanwhile).
    failing_since: datetime | None = None


@dataclass(frozen=True, order=True)
class ObjectRef:
    """One named object a guard reads (the agent keeps it current with a watch of that name
    alone, ``Kube.watch_named``): a guard says which in ``reads``."""

    resource: Watched
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def watch_name(self) -> str:
        """Its watch's name in ``/status``'s watches and ``/readyz``: ``poddisruptionbudget
        NS/NAME``."""
        return f"{self.resource} {self}"


@dataclass(frozen=True)
class NodeView:
    """Everything ``decide()`` needs, as read by the controller at one moment."""

    name: str
    annotations: Mapping[str, str]
    #: None: the pod watch has not synced yet.
    pods: tuple[Pod, ...] | None
    booted: BootedImage
    now: datetime
    #: The Node's ``metadata.resourceVersion``: pinned by a patch when ``lastAppliedDrain``
    #: is absent (JSON Patch cannot test that a key is absent).
    resource_version: str
    #: The alert query's latest answer (None: alert gating is off).
    alerts: AlertsSeen | None = None
    #: The Node's labels (``drain-guard.io/block-drains``).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The node's pods in the blocking-pod namespaces that the pod watch does not cover (a
    #: watch of their own in each); None: one of those watches has not listed yet.
    blocking_pods: tuple[Pod, ...] | None = ()
    #: The hold this agent knows on the Node (its memory): when the Node's ``held-since``
    #: turns unreadable, the hold keeps the age it had rather than starting again.
    known_hold: HoldRecord | None = None
    #: The hold this agent ended whose request is still pending, unchanged since (its memory,
    #: ``holds.Memory.pending_end``): the same wait, not a new one (noop-image's ``expected``
    #: does not start again); a request written again after ``desiredDrain`` moved on is new.
    ended_hold: HoldRecord | None = None
    #: The Node's ``spec.unschedulable`` (cordoned): MCO's node controller gives a cordoned
    #: node no new target, so a ``noop-image`` hold there could not save its drain.
    unschedulable: bool = False
    #: The objects the guards read (their ``reads``), as the API server last gave them: None
    #: when the object does not exist; no key while its watch has not listed yet.
    objects: Mapping[ObjectRef, Mapping[str, Any] | None] = field(default_factory=dict)
    #: MCO's pools, MachineOSBuilds and MachineOSConfigs, as the agent's watches list them:
    #: whether a build will replace a same-image target (``guards.replacement``); None where
    #: the agent does not read them (through the node proxy).
    mco: McoObjects | None = None


# --- verdicts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildPodsSeen:
    """The build-pod guard's evidence: the build pods running on the node."""

    pods: tuple[Pod, ...]


@dataclass(frozen=True)
class ImageCompared:
    """The no-op guard's evidence: desiredImage's digest (None: no image, no digest, or
    unreadable) and whether it is the booted one (None: the guard cannot know)."""

    desired_digest: str | None
    equal: bool | None
    #: For an equal image, whether MCO will replace the target (None: not asked).
    replacement: Replacement | None = field(default=None, compare=False)


#: What a guard saw, for ``/status`` and the metrics; the decision reads only the verdict, and
#: two verdicts that say the same are equal whatever their evidence.
Evidence = BuildPodsSeen | ImageCompared


#: How much of a malformed value ``InvalidInput`` repeats (logs and /status stay small).
MAX_INVALID_BYTES = 256


@dataclass(frozen=True)
class InvalidInput:
    """Malformed input, ignored: ``kind`` as ``drain_guard_invalid_input_total`` counts it,
    ``what`` names the annotation and its value, ``why`` says what is wrong with it."""

    kind: str
    what: str
    why: str

    @classmethod
    def of(cls, kind: str, key: str, value: str, why: str) -> InvalidInput:
        what = f"{key}={truncate_utf8(repr(value), MAX_INVALID_BYTES)}"
        return cls(kind, what, truncate_utf8(" ".join(why.split()), MAX_INVALID_BYTES))


@dataclass(frozen=True)
class Block:
    """The guard blocks the drain; ``until``: it blocks no longer than that (decide again
    then, with no watch event)."""

    reason: Reason
    detail: str
    evidence: Evidence | None = field(default=None, compare=False)
    until: datetime | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Unknown:
    """The guard cannot decide yet (its data is not there): do not let a held drain go."""

    reason: Reason
    detail: str
    evidence: Evidence | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Clear:
    """The guard does not block; ``detail`` says why, for the status."""

    reason: Reason
    detail: str
    #: The guard could not compare and abstained (never hold on a guess).
    abstained: bool = False
    #: The guard's input was malformed: reported and counted, never held on.
    invalid: InvalidInput | None = None
    evidence: Evidence | None = field(default=None, compare=False)


Verdict = Block | Unknown | Clear

_E = TypeVar("_E", BuildPodsSeen, ImageCompared)


def evidence(verdicts: Sequence[Verdict], kind: type[_E]) -> _E | None:
    """The first evidence of ``kind`` among the verdicts, if a guard gave one."""
    return next((v.evidence for v in verdicts if isinstance(v.evidence, kind)), None)


class Guard(Protocol):
    """A small object that says whether a drain of this node should wait."""

    @property
    def reason(self) -> Reason: ...

    #: The named objects the guard reads from ``NodeView.objects`` (most read none).
    @property
    def reads(self) -> tuple[ObjectRef, ...]: ...

    def check(self, view: NodeView) -> Verdict: ...


#: What clears one reason of a hold, as one line of ``/status``, ``drain-guard status`` and the
#: hold's Event: given the reason's part of ``hold-detail`` and, for a hold request, its expiry.
ReleasesWhen = Callable[[str, datetime | None], str]


@dataclass(frozen=True)
class GuardSettings:
    """What the guards read of ``drain-guard run``'s settings besides their own options: the
    scope group (which pods may hold), alert gating (None: off), and whether the agent's API
    requests go through the node proxy (the node's identity, which reads no more than its own
    Node, pods and Events)."""

    scope: ScopeSettings
    alerts: AlertSettings | None
    through_node_proxy: bool


#: The guard the agent's settings ask for (None: off), from its validated settings and the
#: raw values of the guard's own ``options`` (by their ``dest``); ``SettingsError`` if bad.
Build = Callable[[GuardSettings, Mapping[str, object]], "Guard | None"]


@dataclass(frozen=True)
class GuardKind:
    """What one guard module declares, so that a guard is one module and one line of the
    registry (``guards.registry``): its reason, what releases a hold it made, its flags and
    how it is built from the agent's settings."""

    reason: Reason
    releases_when: ReleasesWhen
    build: Build
    #: The flags only this guard reads (``drain-guard run`` lists them); a flag other parts
    #: read too (the build-pod selectors the shield shares) stays in ``config``.
    options: tuple[Option, ...] = ()
