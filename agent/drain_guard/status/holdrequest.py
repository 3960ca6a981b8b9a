"""An operator's hold request and what ends a hold, as ``/status`` and ``drain-guard status``
show them; ``printable()`` for every annotation text they print (anyone's input).

Pure, like ``drain_guard.status.agent``: ``now`` is given, nothing here reads a clock.

API::

    HoldRequestStatus.read(value, now)      # the hold-request annotation at ``now``
    releases_when(reasons, request)         # what clears each reason of a hold
    split_hold_detail(detail)               # the hold-detail annotation by reason
    stalled(pool, node)                     # the line that shows what a hold costs
    printable(text)                         # control characters escaped
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from drain_guard import guards
from drain_guard.core.durations import format_duration
from drain_guard.guards import registry
from drain_guard.protocol import (
    HOLD_REQUEST,
    Reason,
    format_rfc3339,
    format_rfc3339_or_none,
    parse_rfc3339_or_none,
    truncate_utf8,
)
from drain_guard.settings.hold import MCD_DRAIN_TIMEOUT


@dataclass(frozen=True)
class HoldRequestStatus:
    """An operator's ``drain-guard.io/hold-request`` as read at one instant: ``active`` (it
    holds drains until ``until``), ``expired`` or ``invalid`` (both hold nothing; ``why``
    says what is wrong with an invalid one)."""

    value: str
    state: str
    until: datetime | None = None
    reason: str = ""
    why: str = ""

    @classmethod
    def read(cls, value: str, now: datetime) -> HoldRequestStatus:
        """The request ``value`` at ``now``; its texts cut as invalid input's are (small)."""
        shown = truncate_utf8(value, guards.MAX_INVALID_BYTES)
        try:
            until, reason = guards.parse_hold_request(value)
        except ValueError as err:
            why = f"{err}; expected <RFC 3339 expiry>[;<reason>]"
            return cls(shown, "invalid", why=truncate_utf8(why, guards.MAX_INVALID_BYTES))
        reason = truncate_utf8(reason, guards.MAX_INVALID_BYTES)
        return cls(shown, "expired" if until <= now else "active", until, reason)

    def capped_at(self, ends_by: datetime | None) -> datetime | None:
        """When ``--max-hold`` ends a hold this request asks to last longer, else None."""
        if self.state != "active" or self.until is None or ends_by is None:
            return None
        return ends_by if self.until > ends_by else None

    def to_json(self, ends_by: datetime | None = None) -> dict[str, Any]:
        return {
            "value": self.value,
            "state": self.state,
            "until": format_rfc3339_or_none(self.until),
            "reason": self.reason,
            "why": self.why,
            "cappedAt": format_rfc3339_or_none(self.capped_at(ends_by)),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HoldRequestStatus:
        return cls(
            data["value"],
            data["state"],
            parse_rfc3339_or_none(data["until"]),
            data["reason"],
            data["why"],
        )

    def to_text(self, now: datetime, ends_by: datetime | None, max_hold: timedelta | None) -> str:
        """One line; INVALID and EXPIRED in capitals, since such a request holds nothing.
        ``ends_by`` is the hold in force's end, ``max_hold`` the agent's own (None when the
        reader has only the Node: ``drain-guard status``)."""
        value = printable(self.value)
        if self.state == "invalid":
            return f"INVALID, holds nothing: {printable(self.why)} (value {value})"
        assert self.until is not None
        said = f": {printable(self.reason)}" if self.reason else ""
        if self.state == "expired":
            ago = format_duration(now - self.until)
            return (
                f"EXPIRED at {format_rfc3339_or_none(self.until)} ({ago} ago), holds nothing{said};"
                f" remove it: oc annotate node NODE {HOLD_REQUEST}-"
            )
        line = f"until {format_rfc3339(self.until)} (in {format_duration(self.until - now)}){said}"
        capped = self.capped_at(ends_by)
        if capped is not None:
            line += f"; capped by --max-hold: the hold ends at {format_rfc3339_or_none(capped)}"
        elif ends_by is None and max_hold is not None and self.until - now > max_hold:
            line += (
                f"; capped by --max-hold: a drain is held at most {format_duration(max_hold)}"
                " from when it is requested"
            )
        elif ends_by is None and max_hold is None and self.until - now >= MCD_DRAIN_TIMEOUT:
            # Read from the Node alone, with no agent's setting: every --max-hold is below 1h.
            line += (
                "; capped by --max-hold: a drain is held at most the agent's --max-hold (below"
                " 1h, the MCD's drain timeout) from when it is requested"
            )
        return line


_DETAIL_SPLIT = re.compile("; (?=(?:" + "|".join(re.escape(r.value) for r in Reason) + "): )")


def split_hold_detail(detail: str) -> dict[str, str]:
    """The ``hold-detail`` annotation (``decisions.hold_detail``) by reason."""
    parts = (part.partition(": ") for part in _DETAIL_SPLIT.split(detail) if part)
    return {reason: text for reason, _, text in parts if reason in set(Reason)}


def releases_when(
    reasons: Sequence[tuple[str, str]], request: HoldRequestStatus | None
) -> tuple[str, ...]:
    """What clears each reason of a hold, given as (reason, detail): the hold is released once
    every one has cleared (or at its expiry, or by ``drain-guard release``); each guard says
    its own (``guards.registry``)."""
    until = request.until if request is not None else None
    return tuple(
        printable(registry.releases_when(reason, detail, until)) for reason, detail in reasons
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def stalled(pool: str, node: str) -> str:
    """The line that puts a hold's cost in view: the pool's rollout waits on the node."""
    return f"{pool} pool waiting: its rollout goes on past {node} only once the hold ends"


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): an annotation is anyone's
    input and must not move the terminal's cursor or forge a line of ``drain-guard status``."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
