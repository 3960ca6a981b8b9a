"""The noop-image guard: a drain for the image the node already booted is pointless (pure:
no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from drain_guard.config.options import Option, env_name
from drain_guard.config.values import SettingsError, format_duration, named, parse_duration
from drain_guard.core.imageref import ImageRefError, digest_of
from drain_guard.core.replacement import EXPECTED_WITHIN, Foresight, Replacement, foresee
from drain_guard.guards.base import (
    Block,
    Clear,
    Guard,
    GuardKind,
    GuardSettings,
    ImageCompared,
    InvalidInput,
    NodeView,
    ObjectRef,
    Verdict,
)
from drain_guard.protocol import (
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    LAST_APPLIED_DRAIN,
    Reason,
    Verb,
    parse_drain_request,
)


class NoopImageGuard:
    """Blocks a drain for a layered update to the image the node already booted, while the
    node is schedulable (only then can the node controller send it the newer image) and MCO's
    objects say a newer image will come (``guards.replacement``)."""

    reason = Reason.NOOP_IMAGE
    reads: tuple[ObjectRef, ...] = ()

    def __init__(self, expected_within: timedelta = EXPECTED_WITHIN) -> None:
        #: How long a build or an image MCO is about to give is waited for (``expected``).
        self.expected_within = expected_within

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
            if not _drain_waits(view.annotations):
                # Whether MCO will replace the image answers one question: may a waiting drain
                # go? With none waiting there is no wait for ``expected`` to count from (it
                # would count from each pass and never run out), and /status must not show the
                # last request's view of MCO's objects as today's.
                return Clear(
                    self.reason, f"{why}; no drain waits", evidence=ImageCompared(digest, True)
                )
            if view.unschedulable:
                # MCO's node controller skips unschedulable nodes when it picks whom to give a
                # new target (every version, docs/mco-versions.md): no newer image can reach
                # this node while it is cordoned, so a hold would only delay the same drain
                # until max-hold, with the node cordoned and its pool waiting.
                # Said as a replacement foreseen: /status, the metric, the decision's log line
                # and a held drain's release Event say why it was let go.
                none = Replacement(
                    Foresight.NONE, "the node is cordoned, and a cordoned node gets no new image"
                )
                seen = ImageCompared(digest, True, none)
                return Clear(self.reason, f"{why}; not held: {none.why}", evidence=seen)
            replacement = foresee(
                view.annotations, view.mco, view.now, _waiting_since(view), self.expected_within
            )
            seen = ImageCompared(digest, True, replacement)
            if not replacement.holds:
                # A hold nothing will end would end only at --max-hold, and the same drain
                # would follow: let it go now, and say why (docs/protocol.md).
                return Clear(self.reason, f"{why}; not held: {replacement.why}", evidence=seen)
            return Block(self.reason, f"{why}; {replacement.why}", seen, replacement.until)
        why = f"desiredImage {_short(digest)} differs from booted {_short(view.booted.digest)}"
        return Clear(self.reason, why, evidence=ImageCompared(digest, False))


def _drain_waits(annotations: Mapping[str, str]) -> bool:
    """A drain request MCO has not applied is in desiredDrain, or held there by drain-guard."""
    desired = annotations.get(DESIRED_DRAIN)
    verb = parse_drain_request(desired).verb
    if verb is Verb.HOLD:
        return True
    return verb is Verb.DRAIN and desired != annotations.get(LAST_APPLIED_DRAIN)


def _waiting_since(view: NodeView) -> datetime:
    """Since when a same-image drain has waited: the earliest start of its request's holds,
    the one in force and one that ended while the request still pends (a release MCO has not
    acted on yet must not open a new ``expected`` wait: the window would restart with every
    release, and the drain wait forever); now for a request not held before."""
    known = view.known_hold
    request = known.held_drain if known is not None else view.annotations.get(DESIRED_DRAIN)
    starts = [] if known is None else [known.since]
    ended = view.ended_hold
    if ended is not None and ended.held_drain == request:
        starts.append(ended.since)
    return min(starts, default=view.now)


def _short(digest: str) -> str:
    return digest[: len("sha256:") + 12]


def _releases_when(_detail: str, _until: datetime | None) -> str:
    return (
        f"{Reason.NOOP_IMAGE}: when desiredImage changes to an image the node does not run"
        " (the build's new image), when MCO's pool and builds say none will come, or the node"
        " is cordoned (no new image comes then)"
    )


OPTIONS: tuple[Option, ...] = (
    Option(
        "--noop-expect-within",
        env_name("--noop-expect-within"),
        format_duration(EXPECTED_WITHIN),
        "how long a same-image drain waits for a build MCO is about to start, or an image it"
        " is about to name (noop-image's 'expected', docs/protocol.md); then it goes",
    ),
)


def _build(_settings: GuardSettings, raw: Mapping[str, object]) -> Guard:
    within = named("--noop-expect-within", parse_duration, str(raw["noop_expect_within"]))
    if within <= timedelta(0):
        raise SettingsError("--noop-expect-within must be positive")
    return NoopImageGuard(within)


KIND = GuardKind(Reason.NOOP_IMAGE, _releases_when, _build, OPTIONS)
