"""Guards: given what the agent sees, does each say a drain should wait (pure: no I/O).

Each guard returns a ``Verdict``; ``drain_guard.decide`` turns the verdicts and the Node's
annotations into a ``Decision`` (``drain_guard.decisions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar

from drain_guard.alerts import AlertsSeen, OnUnreachable
from drain_guard.imageref import ImageRefError, digest_of
from drain_guard.pods import (
    DEFAULT_SCOPE,
    Pod,
    PodScope,
    running_blocking_pods,
    running_build_pods,
)
from drain_guard.protocol import (
    BLOCK_DRAINS_LABEL,
    DESIRED_IMAGE,
    HOLD_REQUEST,
    HoldRecord,
    Reason,
    format_rfc3339,
    parse_rfc3339,
    truncate_utf8,
)
from drain_guard.selectors import BuildPodSelector

__all__ = [
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


# --- what the guards look at --------------------------------------------------------------


@dataclass(frozen=True)
class BootedImage:
    """The image the host booted; ``digest`` None means unknown, ``error`` says why."""

    digest: str | None
    reference: str | None
    source: str
    error: str | None = None


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
    #: The Node's ``spec.unschedulable`` (cordoned): MCO's node controller gives a cordoned
    #: node no new target, so a ``noop-image`` hold there could not save its drain.
    unschedulable: bool = False


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
    """The guard blocks the drain."""

    reason: Reason
    detail: str
    evidence: Evidence | None = field(default=None, compare=False)


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

    def check(self, view: NodeView) -> Verdict: ...


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


class NoopImageGuard:
    """Blocks a drain for a layered update to the image the node already booted, while the
    node is schedulable: only then can the node controller send it the newer image."""

    reason = Reason.NOOP_IMAGE

    def check(self, view: NodeView) -> Verdict:
        desired = view.annotations.get(DESIRED_IMAGE)
        if not desired:
            return Clear(
                self.reason,
                "node is not layered (no desiredImage)",
                evidence=ImageCompared(None, False),
            )
        unknown = ImageCompared(None, None)
        try:
            digest = digest_of(desired)
        except ImageRefError as err:
            why = f"desiredImage unreadable: {err}"
            bad = InvalidInput.of("image_ref", DESIRED_IMAGE, desired, str(err))
            return Clear(self.reason, why, abstained=True, invalid=bad, evidence=unknown)
        if digest is None:
            why = f"desiredImage {desired} has no digest"
            return Clear(self.reason, why, abstained=True, evidence=unknown)
        if view.booted.digest is None:
            why = f"booted image unknown ({view.booted.source}: {view.booted.error or 'no digest'})"
            return Clear(self.reason, why, abstained=True, evidence=ImageCompared(digest, None))
        if digest == view.booted.digest:
            why = f"desiredImage is the booted image {_short(digest)}"
            if view.unschedulable:
                # MCO's node controller skips unschedulable nodes when it picks whom to give a
                # new target (every version, docs/mco-versions.md): no newer image can reach
                # this node while it is cordoned, so a hold would only delay the same drain
                # until max-hold, with the node cordoned and its pool waiting.
                why += "; not held: the node is cordoned, and a cordoned node gets no new image"
                return Clear(self.reason, why, evidence=ImageCompared(digest, True))
            return Block(self.reason, why, ImageCompared(digest, True))
        why = f"desiredImage {_short(digest)} differs from booted {_short(view.booted.digest)}"
        return Clear(self.reason, why, evidence=ImageCompared(digest, False))


def _short(digest: str) -> str:
    return digest[: len("sha256:") + 12]


#: A hold request's reason: one line for `oc describe node` and `drain-guard status`.
MAX_HOLD_REASON_BYTES = 256


def format_hold_request(until: datetime, reason: str) -> str:
    """The ``drain-guard.io/hold-request`` value that :func:`parse_hold_request` reads back as
    ``(until, reason)`` (``drain-guard hold``); ValueError, one line, for a reason that is
    empty, holds a control character or is longer than ``MAX_HOLD_REASON_BYTES``."""
    if not reason.strip():
        raise ValueError("the reason is empty: say why (it shows in drain-guard status)")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in reason):
        raise ValueError("the reason holds a control character (a newline?): one line please")
    if len(reason.encode()) > MAX_HOLD_REASON_BYTES:
        raise ValueError(f"the reason is longer than {MAX_HOLD_REASON_BYTES} bytes")
    return f"{format_rfc3339(until)};{' '.join(reason.split())}"


def parse_hold_request(text: str) -> tuple[datetime, str]:
    """Parse ``<RFC 3339 expiry>[;<reason text>]`` → (expiry, reason); ValueError if bad."""
    expiry_text, _, reason = text.partition(";")
    return parse_rfc3339(expiry_text), " ".join(reason.split())


class BlockingPodGuard:
    """Blocks while a pod the operator declared blocking (``--blocking-pod-selector``) runs on
    the node, in a namespace opted in with ``--blocking-pod-namespace``: a drain would evict
    it. Separate from the build-pod guard: no shield budget follows these pods (a budget
    the agent keeps on any pod an opted-in tenant labels would outlive the agent's bounds)."""

    reason = Reason.BLOCKING_POD

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


class NodeLabelGuard:
    """Blocks while the Node carries the label ``drain-guard.io/block-drains`` (any value: an
    operator's note), set with ``oc label node``; the agent only reads it."""

    reason = Reason.NODE_LABEL

    def check(self, view: NodeView) -> Verdict:
        value = view.labels.get(BLOCK_DRAINS_LABEL)
        if value is None:
            return Clear(self.reason, f"no {BLOCK_DRAINS_LABEL} label")
        return Block(self.reason, f"node label {BLOCK_DRAINS_LABEL}={value}")


class ManualGuard:
    """Blocks while an operator's ``drain-guard.io/hold-request`` has not expired."""

    reason = Reason.MANUAL

    def check(self, view: NodeView) -> Verdict:
        text = view.annotations.get(HOLD_REQUEST)
        if text is None:
            return Clear(self.reason, "no hold-request")
        try:
            expiry, why = parse_hold_request(text)
        except ValueError as err:
            why = f"{err}; expected <RFC 3339 expiry>[;<reason>]"
            bad = InvalidInput.of("hold_request", HOLD_REQUEST, text, why)
            return Clear(self.reason, f"{HOLD_REQUEST} ignored: {why}", invalid=bad)
        if expiry <= view.now:
            return Clear(self.reason, f"hold-request expired at {format_rfc3339(expiry)}")
        detail = f"hold-request until {format_rfc3339(expiry)}"
        return Block(self.reason, f"{detail}: {why}" if why else detail)


class AlertGuard:
    """Blocks while alerts matching the operator's filter fire (``--alert-url``); while the
    query goes unanswered, blocks or not as ``--alert-unreachable`` says, and says so."""

    reason = Reason.ALERT

    def __init__(self, on_unreachable: OnUnreachable) -> None:
        self.on_unreachable = on_unreachable

    def check(self, view: NodeView) -> Verdict:
        seen = view.alerts
        if seen is None or seen.checked_at is None:
            return Unknown(self.reason, "the alerts have not been queried yet")
        if seen.error is not None:
            since = format_rfc3339(seen.since) if seen.since else "now"
            why = f"alert query unanswered since {since} ({seen.error})"
            if self.on_unreachable is OnUnreachable.HOLD:
                return Block(self.reason, f"{why}; --alert-unreachable=hold")
            return Clear(self.reason, f"{why}; --alert-unreachable=pass", abstained=True)
        if seen.firing:
            return Block(self.reason, f"firing: {seen.named()}")
        return Clear(self.reason, "no matching alert fires")


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
