"""What ``drain-guard status`` shows of one Node from its annotations alone: a typed
:class:`NodeState`, whose hold is the same :class:`~drain_guard.status.hold.HoldView` the
agent's ``/status`` shows.

Pure: ``now`` is given, nothing here reads a clock; ``drain_guard.commands.status`` reads the
Node and the agent's ``/status`` and prints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from drain_guard import protocol
from drain_guard.core.nodes import NodeObj
from drain_guard.decision.decide import NothingHeldError, force_release, stale_keys
from drain_guard.status.hold import HoldReasonStatus, HoldView
from drain_guard.status.holdrequest import (
    HoldRequestStatus,
    printable,
    releases_when,
    split_hold_detail,
)


@dataclass(frozen=True)
class NodeState:
    """One Node's hold state at ``now``. ``hold`` is set exactly when ``drain-guard release``
    can release (:func:`force_release`), so the two commands never disagree; its ``since`` is
    None when the record is unreadable (``error`` says why). A ``hold-`` value drain-guard did
    not write is ``foreign``."""

    node: str
    now: datetime
    desired_drain: str | None
    last_applied_drain: str | None
    unschedulable: bool
    pool: str | None
    hold_request: HoldRequestStatus | None
    stale_keys: tuple[str, ...]
    hold: HoldView | None = None
    error: str | None = None
    foreign: str | None = None
    released: str | None = None
    released_by: str | None = None
    released_by_invalid: str | None = None

    @property
    def listed(self) -> bool:
        """Whether ``status`` without ``--node-name`` lists the node: something to look at."""
        return bool(
            self.hold or self.stale_keys or self.foreign or self.hold_request or self.released
        )

    def to_json(self) -> dict[str, Any]:
        """``drain-guard status -o json``; a hold's keys are ``/status``'s (docs/status.md)."""
        ends_by = None if self.hold is None else self.hold.expires_at
        doc: dict[str, Any] = {
            "node": self.node,
            "now": protocol.format_rfc3339(self.now),
            "desiredDrain": self.desired_drain,
            "lastAppliedDrain": self.last_applied_drain,
            "unschedulable": self.unschedulable,
            "pool": self.pool,
            "held": self.hold is not None,
            "holdRequest": None
            if self.hold_request is None
            else self.hold_request.to_json(ends_by),
            "staleKeys": list(self.stale_keys),
            "released": self.released,
            "releasedBy": self.released_by,
        }
        if self.hold is not None:
            doc.update(self.hold.to_json(self.now))
        optional = {
            "error": self.error,
            "foreign": self.foreign,
            "releasedByInvalid": self.released_by_invalid,
        }
        doc.update({key: value for key, value in optional.items() if value is not None})
        return doc

    def text_lines(self) -> list[str]:
        """The text view; every annotation's text with control characters escaped (an
        annotation is anyone's input)."""
        lines = [f"node {self.node}:"]
        if self.error is not None:
            lines.append(f"  {printable(self.error)}")
        if self.hold is not None:
            lines += self.hold.text_lines(self.now)
        elif self.foreign is not None:
            lines.append(f"  no drain-guard hold: {printable(self.foreign)}")
        elif self.released is not None:
            by = self.released_by
            who = f"by {printable(by)}" if by else "(by drain-guard, or by hand without a name)"
            lines.append(
                f"  no hold: {printable(self.released)} was released {who} and is not held again"
            )
        else:
            lines.append("  no hold")
        if self.released_by_invalid is not None:
            invalid = printable(self.released_by_invalid)
            lines.append(f"  released-by INVALID, not shown: {invalid}")
        if self.stale_keys:
            lines.append(
                f"  stale keys: {', '.join(self.stale_keys)}"
                " (left by a hold that ended; drain-guard release removes them)"
            )
        lines.append(f"  desiredDrain: {printable(self.desired_drain or '-')}")
        lines.append(f"  lastAppliedDrain: {printable(self.last_applied_drain or '-')}")
        if self.unschedulable:
            lines.append("  node is cordoned (SchedulingDisabled)")
        if self.hold_request is not None:
            ends_by = None if self.hold is None else self.hold.expires_at
            lines.append(f"  hold request: {self.hold_request.to_text(self.now, ends_by, None)}")
        return lines


def node_state(node: NodeObj, now: datetime) -> NodeState:
    """What ``status`` shows of ``node`` at ``now``, from its annotations alone: the hold ends
    by its ``hold-expires`` (an older agent's record without one says it does not know)."""
    ann = node.annotations
    text = ann.get(protocol.HOLD_REQUEST)
    request = None if text is None else HoldRequestStatus.read(text, now)
    desired = ann.get(protocol.DESIRED_DRAIN)
    state = NodeState(
        node=node.name,
        now=now,
        desired_drain=desired,
        last_applied_drain=ann.get(protocol.LAST_APPLIED_DRAIN),
        unschedulable=node.unschedulable,
        pool=protocol.pool_of(ann),
        hold_request=request,
        stale_keys=stale_keys(ann),
    )
    if desired is not None and ann.get(protocol.RELEASED) == desired:
        state = replace(state, released=desired)
        try:
            state = replace(state, released_by=protocol.read_released_by(ann))
        except protocol.MalformedHold as exc:
            state = replace(state, released_by_invalid=str(exc))
    try:
        release = force_release(ann, node.resource_version, protocol.Outcome.MANUAL)
    except NothingHeldError as exc:
        if protocol.parse_drain_request(desired).verb is protocol.Verb.HOLD:
            return replace(state, foreign=str(exc))
        return state
    hold = HoldView(node.name, release.original, pool=state.pool)
    try:
        record = protocol.read_hold(ann)
    except protocol.MalformedHold as exc:
        return replace(state, hold=hold, error=f"malformed hold annotations: {exc}")
    if record is None:
        return replace(state, hold=hold)
    details = split_hold_detail(record.detail)
    if not details and record.detail:
        # A detail not of the agent's form: each reason shows it whole, so nothing is hidden.
        details = dict.fromkeys(record.reason_names, record.detail)
    reasons = tuple(HoldReasonStatus(r, details.get(r, "")) for r in record.reason_names)
    hold = replace(
        hold,
        since=record.since,
        expires_at=record.expires,
        reasons=reasons,
        releases_when=releases_when([(r.reason, r.detail) for r in reasons], request),
    )
    return replace(state, hold=hold)
