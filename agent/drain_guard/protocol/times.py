"""The protocol's times (pure): RFC 3339 as the annotations carry it (``held-since``, a hold
request's expiry), total parsing of anyone's input, second-precision UTC formatting."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_RFC3339_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,  # \d alone also matches other scripts' digits, which int() would accept
)
#: The latest time the protocol can carry (RFC 3339's four-digit years; Python's too).
LATEST = datetime.max.replace(tzinfo=UTC)


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 date-time (with ``Z`` or an offset) to an aware UTC datetime.

    Total: any text either parses or raises ValueError with a one-line reason, never another
    exception (an annotation is anyone's input, and the agent reads it on every pass). Offsets
    run from -23:59 to +23:59; a time whose UTC value falls outside the years 1-9999 is
    invalid; a leap second (``:60``, at the end of a UTC day) is read as the last microsecond
    of its minute.
    """
    match = _RFC3339_RE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not an RFC 3339 time such as 2024-01-31T12:00:00Z")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    if zone in ("Z", "z"):
        offset = timedelta(0)
    else:
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise ValueError(f"{text!r} has the offset {zone}, beyond -23:59 to +23:59")
        sign = -1 if zone[0] == "-" else 1
        offset = sign * timedelta(hours=hours, minutes=minutes)
    leap = second == "60"
    if leap:
        second, micros = "59", 999_999
    try:
        local = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tzinfo=UTC
        )
    except ValueError as err:
        raise ValueError(f"{text!r} is not a valid time: {err}") from None
    try:
        utc = local - offset
    except OverflowError:
        why = "in UTC it is outside years 1-9999"
        raise ValueError(f"{text!r} is not a valid time: {why}") from None
    if leap and (utc.hour, utc.minute) != (23, 59):
        raise ValueError(f"{text!r} is not a valid time: a leap second ends a UTC day")
    return utc


def format_rfc3339(moment: datetime) -> str:
    """Format as RFC 3339 UTC with second precision (``2024-01-31T12:00:00Z``); years before
    1000 with four digits too (``strftime`` writes ``1-01-01``, which nothing parses)."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: the protocol's times are UTC")
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}Z"


def format_rfc3339_or_none(moment: datetime | None) -> str | None:
    """``format_rfc3339``, with None for a time not there (a JSON ``null``)."""
    return None if moment is None else format_rfc3339(moment)


def parse_rfc3339_or_none(text: str | None) -> datetime | None:
    """``parse_rfc3339``, with None for a time not there (a JSON ``null``)."""
    return None if text is None else parse_rfc3339(text)


def later(moment: datetime, delta: timedelta) -> datetime:
    """``moment + delta``, or the latest representable time when that is beyond it: a hold's
    end or a recheck after a date near the year 9999 saturates instead of raising."""
    if LATEST - moment < delta:
        return LATEST
    return moment + delta
