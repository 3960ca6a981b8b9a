"""The ``/status`` snapshot of a decision: ``decided()`` renders the controller's decision as an
``AgentStatus`` (what the guards saw travels in its verdicts; nothing is checked again here).

Pure: ``now`` is given, nothing here reads a clock.

API::

    decided(base, decision, annotations=..., hold=..., booted=..., max_hold=..., now=...)
    nothing_decided(base, explanation, now)  # no Node to decide on
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from drain_guard import guards
from drain_guard.decision import decisions
from drain_guard.protocol import (
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    HOLD_REQUEST,
    LAST_APPLIED_DRAIN,
    HoldRecord,
    later,
    pool_of,
    releaser_of,
)
from drain_guard.status.agent import AgentStatus
from drain_guard.status.hold import HoldReasonStatus
from drain_guard.status.holdrequest import HoldRequestStatus, releases_when
from drain_guard.status.parts import BootedImageStatus, InvalidInputStatus, PodStatus


def nothing_decided(base: AgentStatus, explanation: str, now: datetime) -> AgentStatus:
    """An ``idle`` snapshot with no decision behind it (the Node is not there): only the
    agent's identity is kept from ``base``."""
    return AgentStatus(
        node=base.node,
        decision="idle",
        explanation=explanation,
        version=base.version,
        started_at=base.started_at,
        generated_at=now,
        observe_only=base.observe_only,
        last_would_hold=base.last_would_hold,
    )


def decided(
    base: AgentStatus,
    decision: decisions.Decision,
    *,
    annotations: Mapping[str, str],
    hold: HoldRecord | None,
    booted: guards.BootedImage,
    max_hold: timedelta,
    now: datetime,
) -> AgentStatus:
    """The snapshot of a decision on a Node with these annotations; ``hold`` is the hold the
    agent knows on the Node (an observe-only agent's would-be hold is not one), ``base``
    gives the agent's identity. An observe-only decision that would write says so."""
    explanation = decision.explain()
    if base.observe_only and decision.patch:
        explanation = f"observe-only, not written: would {explanation}"
    blocks = decision.blocks
    pods = guards.evidence(decision.verdicts, guards.BuildPodsSeen)
    image = guards.evidence(decision.verdicts, guards.ImageCompared)
    replacement = image.replacement if image else None
    request_text = annotations.get(HOLD_REQUEST)
    request = None if request_text is None else HoldRequestStatus.read(request_text, now)
    return AgentStatus(
        node=base.node,
        decision=decision.name,
        explanation=explanation,
        version=base.version,
        started_at=base.started_at,
        generated_at=now,
        desired_drain=annotations.get(DESIRED_DRAIN),
        last_applied_drain=annotations.get(LAST_APPLIED_DRAIN),
        held_request=hold.held_drain if hold else None,
        hold_reasons=tuple(HoldReasonStatus(b.reason.value, b.detail) for b in blocks),
        since=hold.since if hold else None,
        expires_at=later(hold.since, max_hold) if hold else None,
        build_pods=None
        if pods is None
        else tuple(PodStatus(p.namespace, p.name, p.phase) for p in pods.pods),
        desired_image=annotations.get(DESIRED_IMAGE),
        desired_digest=image.desired_digest if image else None,
        replacement=replacement.foresight.value if replacement else None,
        replacement_why=replacement.why if replacement else None,
        booted=BootedImageStatus(
            booted.digest, booted.reference, booted.source, booted.error, booted.failing_since
        ),
        observe_only=base.observe_only,
        invalid_inputs=tuple(
            InvalidInputStatus(i.kind, i.what, i.why) for i in decisions.invalid_inputs(decision)
        ),
        hold_request=request,
        releases_when=releases_when([(b.reason.value, b.detail) for b in blocks], request),
        max_hold=max_hold,
        last_would_hold=base.last_would_hold,
        pool=pool_of(annotations),
        released_by=releaser_of(annotations, annotations.get(DESIRED_DRAIN)),
    )
