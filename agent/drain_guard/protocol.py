"""The hold protocol on the Node's annotations: keys, requests, the hold record, patches (pure).

docs/protocol.md is normative. Every patch built here starts with JSON Patch ``test``
operations on the values it was decided on (invariant 4), so a patch built from a stale view
fails with 422 instead of overwriting a newer MCD request.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

__all__ = [
    "CURRENT_CONFIG",
    "CURRENT_IMAGE",
    "DESIRED_CONFIG",
    "DESIRED_DRAIN",
    "DESIRED_IMAGE",
    "DG_PREFIX",
    "HELD_DRAIN",
    "HELD_SINCE",
    "HOLD_DETAIL",
    "HOLD_PREFIX",
    "HOLD_REASONS",
    "HOLD_REQUEST",
    "LAST_APPLIED_DRAIN",
    "LATEST",
    "MAX_DETAIL_BYTES",
    "MAX_RELEASED_BY_BYTES",
    "MCO_PREFIX",
    "OWNED_KEYS",
    "REASON",
    "RELEASED",
    "RELEASED_BY",
    "RELEASED_KEYS",
    "STATE",
    "DrainRequest",
    "HoldRecord",
    "JsonPatchOp",
    "MalformedHold",
    "Outcome",
    "ProtocolError",
    "Reason",
    "UnreadableSince",
    "Verb",
    "annotation_path",
    "check_released_by",
    "cleanup_patch",
    "format_rfc3339",
    "format_rfc3339_or_none",
    "hold_patch",
    "later",
    "parse_drain_request",
    "parse_rfc3339",
    "parse_rfc3339_or_none",
    "pool_of",
    "read_hold",
    "read_released_by",
    "release_patch",
    "releaser_of",
    "repair_since_patch",
    "truncate_utf8",
    "update_hold_patch",
]

MCO_PREFIX = "machineconfiguration.openshift.io/"
DESIRED_DRAIN = MCO_PREFIX + "desiredDrain"
LAST_APPLIED_DRAIN = MCO_PREFIX + "lastAppliedDrain"
DESIRED_CONFIG = MCO_PREFIX + "desiredConfig"
CURRENT_CONFIG = MCO_PREFIX + "currentConfig"
DESIRED_IMAGE = MCO_PREFIX + "desiredImage"
CURRENT_IMAGE = MCO_PREFIX + "currentImage"
STATE = MCO_PREFIX + "state"
REASON = MCO_PREFIX + "reason"

DG_PREFIX = "drain-guard.io/"
HELD_DRAIN = DG_PREFIX + "held-drain"
HOLD_REASONS = DG_PREFIX + "hold-reasons"
HELD_SINCE = DG_PREFIX + "held-since"
HOLD_DETAIL = DG_PREFIX + "hold-detail"
#: The hold record: written together by a hold, removed together by a release.
OWNED_KEYS: tuple[str, ...] = (HELD_DRAIN, HOLD_REASONS, HELD_SINCE, HOLD_DETAIL)
#: The request a release let through because the hold expired, was released by an operator
#: or was invalid: the agent does not hold that same request again (a hold must end, and an
#: operator's release must stick). Removed once ``desiredDrain`` moves on.
RELEASED = DG_PREFIX + "released"
#: Who released it by hand: the API server's name for the caller of ``drain-guard release``
#: (a SelfSubjectReview), written in the patch that writes ``released``. Only the releaser
#: writes it (on 4.17+ admission checks it is their own name); the agent only removes it.
RELEASED_BY = DG_PREFIX + "released-by"
#: The released marker: written together, removed together.
RELEASED_KEYS: tuple[str, ...] = (RELEASED, RELEASED_BY)
#: The longest ``released-by`` read (a ServiceAccount's name is up to 339 bytes).
MAX_RELEASED_BY_BYTES = 512
#: Written by operators: ``<RFC 3339 expiry>[;<reason text>]`` (see ``drain_guard.guards``).
HOLD_REQUEST = DG_PREFIX + "hold-request"
#: A Node label set by operators: while present (any value, say why in it), drains of the
#: node are held (within max-hold). A label, not an annotation, so that ``oc get nodes -l``
#: lists the blocked nodes; the agent only reads it.
BLOCK_DRAINS_LABEL = DG_PREFIX + "block-drains"

HOLD_PREFIX = "hold-"
MAX_DETAIL_BYTES = 1024

JsonPatchOp = dict[str, str]


class ProtocolError(ValueError):
    """A patch was asked for that would break an invariant of the protocol."""


class MalformedHold(ValueError):  # noqa: N818 - the name the architecture contract uses
    """The hold annotations on the Node cannot be read; the message says which and why."""


class UnreadableSince(MalformedHold):
    """The hold record is whole but for its ``held-since``: the hold itself is readable, only
    its age is unknown (``decide()`` keeps the hold and restarts its clock)."""

    def __init__(
        self,
        why: str,
        value: str,
        held_drain: str,
        reasons: tuple[Reason, ...],
        detail: str,
        unknown_reasons: tuple[str, ...] = (),
    ) -> None:
        super().__init__(why)
        self.value = value
        self.held_drain = held_drain
        self.reasons = reasons
        self.detail = detail
        self.unknown_reasons = unknown_reasons

    def record(self, since: datetime) -> HoldRecord:
        """The hold record with its age counted from ``since``."""
        return HoldRecord(self.held_drain, self.reasons, since, self.detail, self.unknown_reasons)


class Verb(StrEnum):
    """The MCC's reading of ``desiredDrain``: the text before the first ``-``."""

    DRAIN = "drain"
    UNCORDON = "uncordon"
    HOLD = "hold"
    UNKNOWN = "unknown"
    #: No request: the annotation is absent or empty.
    NONE = "none"


@dataclass(frozen=True)
class DrainRequest:
    """A ``desiredDrain`` value; ``target`` is the text after the verb's ``-``."""

    raw: str
    verb: Verb
    target: str


def parse_drain_request(raw: str | None) -> DrainRequest:
    """Split a ``desiredDrain`` value the way the MCC does (``strings.Split(v, "-")[0]``)."""
    if not raw:
        return DrainRequest("", Verb.NONE, "")
    head, _, target = raw.partition("-")
    try:
        verb = Verb(head)
    except ValueError:
        verb = Verb.UNKNOWN
    if verb is Verb.NONE:
        verb = Verb.UNKNOWN
    return DrainRequest(raw, verb, target)


class Reason(StrEnum):
    """Why a drain is held; one per guard."""

    BUILD_POD = "build-pod"
    NOOP_IMAGE = "noop-image"
    MANUAL = "manual"
    ALERT = "alert"
    BLOCKING_POD = "blocking-pod"
    NODE_LABEL = "node-label"


class Outcome(StrEnum):
    """How a hold ended."""

    #: No guard blocks any more.
    SAFE = "safe"
    #: ``max-hold`` reached (or ``held-since`` is in the future, so the age is unknown).
    EXPIRED = "expired"
    #: An operator released it (``drain-guard release``).
    MANUAL = "manual"
    #: The agent's DaemonSet is being deleted.
    UNINSTALL = "uninstall"
    #: The MCD wrote a newer request over the hold.
    SUPERSEDED = "superseded"
    #: The MCC finished draining for this request before the hold took effect.
    RACE_LOST = "race-lost"
    #: The hold record was unreadable; the request is restored rather than held blind.
    INVALID = "invalid"

    @property
    def marks_released(self) -> bool:
        """Whether a release with this outcome records the request in ``released`` (it is
        not held again): an expiry, an invalid record, an operator's release."""
        return self in (Outcome.EXPIRED, Outcome.INVALID, Outcome.MANUAL)


# --- time -------------------------------------------------------------------------------

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


def truncate_utf8(text: str, limit: int = MAX_DETAIL_BYTES) -> str:
    """Cut to ``limit`` UTF-8 bytes on a character boundary, marking a cut with ``…``: the
    API server limits annotations and Event messages in bytes, not characters."""
    data = text.encode()
    if len(data) <= limit:
        return text
    ellipsis = "…".encode()
    return data[: limit - len(ellipsis)].decode(errors="ignore") + "…"


#: MCO names a pool's rendered MachineConfigs ``rendered-<pool>-<hash>``.
_RENDERED = re.compile(r"rendered-(.+)-[0-9a-f]{8,}", re.ASCII)


def pool_of(annotations: Mapping[str, str]) -> str | None:
    """The MachineConfigPool whose rollout the node is in, from the name of the rendered
    config it is asked to run (or runs); None when that name is not MCO's form. Read from the
    Node alone (only the pool's Events need more: its uid, drain_guard.events)."""
    for key in (DESIRED_CONFIG, CURRENT_CONFIG):
        found = _RENDERED.fullmatch(annotations.get(key, ""))
        if found:
            return found.group(1)
    return None


#: Events about a pool (drain_guard.events): the one kind an agent writes about anything but
#: its own Node; every confinement admits them with these reasons, its Node as ``related``.
POOL_API_VERSION = "machineconfiguration.openshift.io/v1"
POOL_KIND = "MachineConfigPool"
POOL_ROLLOUT_HELD = "PoolRolloutHeld"
POOL_ROLLOUT_RELEASED = "PoolRolloutReleased"
POOL_EVENT_REASONS: tuple[str, ...] = (POOL_ROLLOUT_HELD, POOL_ROLLOUT_RELEASED)


# --- the hold record --------------------------------------------------------------------


@dataclass(frozen=True)
class HoldRecord:
    """What the agent wrote on the Node when it held a drain."""

    held_drain: str
    #: The reasons this agent knows (its guards'), in the record's order.
    reasons: tuple[Reason, ...]
    since: datetime
    detail: str
    #: The record's reasons this agent does not know (a newer agent's guards): kept and shown,
    #: never held on (docs/protocol.md, "Reasons an agent does not know").
    unknown_reasons: tuple[str, ...] = ()

    @property
    def reason_names(self) -> tuple[str, ...]:
        """Every reason of the record, known or not, as ``/status`` and the CLI show them."""
        return (*(r.value for r in self.reasons), *self.unknown_reasons)

    def age(self, now: datetime) -> timedelta:
        """How long the hold has lasted (negative if ``since`` is in the future)."""
        return now - self.since


#: A reason's name as ``hold-reasons`` carries it: what this agent's reasons look like, and
#: the only shape a reason it does not know may take (docs/protocol.md, "Reasons an agent
#: does not know").
_REASON_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")


def _parse_reasons(text: str) -> tuple[tuple[Reason, ...], tuple[str, ...]]:
    """The reasons this agent knows, and the well-formed names it does not (a newer agent's)."""
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(names):
        raise MalformedHold(f"{HOLD_REASONS}={text!r}: expected comma-separated reasons")
    known: dict[Reason, None] = {}
    unknown: dict[str, None] = {}
    for name in names:
        if name in Reason.__members__.values():
            known[Reason(name)] = None
        elif _REASON_NAME.fullmatch(name):
            unknown[name] = None
        else:
            raise MalformedHold(
                f"{HOLD_REASONS}={text!r}: {name!r} is not a reason's name (lower-case letters,"
                " digits and '-', at most 63)"
            )
    return tuple(known), tuple(unknown)


def read_hold(annotations: Mapping[str, str]) -> HoldRecord | None:
    """The hold record, or None when none of its keys is present.

    Raises MalformedHold when some keys are present but the record is incomplete or
    unparseable; UnreadableSince (a MalformedHold) when only ``held-since`` is. A
    ``held-since`` in the future is returned as is: ``decide()`` judges it.
    """
    present = [key for key in OWNED_KEYS if key in annotations]
    if not present:
        return None
    missing = [key for key in (HELD_DRAIN, HOLD_REASONS, HELD_SINCE) if key not in annotations]
    if missing:
        raise MalformedHold(f"hold record incomplete: missing {', '.join(missing)}")
    held = annotations[HELD_DRAIN]
    if not held:
        raise MalformedHold(f"{HELD_DRAIN} is empty")
    reasons, unknown = _parse_reasons(annotations[HOLD_REASONS])
    detail = annotations.get(HOLD_DETAIL, "")
    try:
        since = parse_rfc3339(annotations[HELD_SINCE])
    except ValueError as err:
        why = f"{HELD_SINCE}: {err}"
        raise UnreadableSince(
            why, annotations[HELD_SINCE], held, reasons, detail, unknown
        ) from None
    return HoldRecord(held, reasons, since, detail, unknown)


def check_released_by(value: str) -> str:
    """``value`` if it can be a ``released-by``: a user name as the API server gives it, not
    empty, at most ``MAX_RELEASED_BY_BYTES``, with no control character (it is printed in
    Events, logs and ``drain-guard status``). Raises ProtocolError saying why not."""
    if not value.strip():
        raise ProtocolError("empty")
    if len(value.encode()) > MAX_RELEASED_BY_BYTES:
        raise ProtocolError(f"longer than {MAX_RELEASED_BY_BYTES} bytes")
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in value):
        raise ProtocolError("it holds a control character")
    return value


def read_released_by(annotations: Mapping[str, str]) -> str | None:
    """Who released the request in ``released``, or None when no one is recorded (the agent
    released it, or the releaser's name was not known). A ``released-by`` without
    ``released`` is stale, not read. Raises MalformedHold for a value that cannot be one."""
    value = annotations.get(RELEASED_BY)
    if value is None or RELEASED not in annotations:
        return None
    try:
        return check_released_by(value)
    except ProtocolError as err:
        raise MalformedHold(f"{RELEASED_BY}: {err}") from None


def releaser_of(annotations: Mapping[str, str], request: str | None) -> str | None:
    """Who released ``request`` by hand, as the Node records it; None when ``released`` is
    not that request, no one is recorded, or the record is malformed (``decide()`` reports
    that as invalid input)."""
    if request is None or annotations.get(RELEASED) != request:
        return None
    try:
        return read_released_by(annotations)
    except MalformedHold:
        return None


# --- patches ----------------------------------------------------------------------------


def annotation_path(key: str) -> str:
    """JSON Pointer to an annotation (RFC 6901: ``~`` → ``~0``, ``/`` → ``~1``)."""
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


def _test(key: str, value: str) -> JsonPatchOp:
    return {"op": "test", "path": annotation_path(key), "value": value}


def _set(key: str, value: str) -> JsonPatchOp:
    # "add" replaces an existing member and creates a missing one (RFC 6902 4.1).
    return {"op": "add", "path": annotation_path(key), "value": value}


def _remove(key: str) -> JsonPatchOp:
    return {"op": "remove", "path": annotation_path(key)}


def _guard_last_applied(last_applied: str | None, resource_version: str) -> JsonPatchOp:
    """Pin ``lastAppliedDrain``; JSON Patch cannot test absence, so pin the object instead."""
    if last_applied is not None:
        return _test(LAST_APPLIED_DRAIN, last_applied)
    return {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}


def _reasons_text(reasons: Iterable[Reason]) -> str:
    text = ",".join(dict.fromkeys(Reason(r).value for r in reasons))
    if not text:
        raise ProtocolError("a hold needs at least one reason")
    return text


def hold_patch(
    desired: str,
    last_applied: str | None,
    resource_version: str,
    reasons: Iterable[Reason],
    since: datetime,
    detail: str,
    *,
    remove: Iterable[str] = (),
) -> list[JsonPatchOp]:
    """Rewrite ``desiredDrain`` to ``hold-<desired>`` and write the hold record, in one patch.

    Tests ``desiredDrain == desired`` and ``lastAppliedDrain`` as seen, so a newer MCD
    request or a finished drain makes the patch fail. Stale hold keys are overwritten;
    ``remove`` names other present keys to drop (a stale ``released`` marker).
    """
    request = parse_drain_request(desired)
    if request.verb is not Verb.DRAIN:
        raise ProtocolError(f"only drain requests are held, not {desired!r}")
    if desired == last_applied:
        raise ProtocolError(f"{desired!r} is already applied: there is nothing to hold")
    return [
        _test(DESIRED_DRAIN, desired),
        _guard_last_applied(last_applied, resource_version),
        _set(DESIRED_DRAIN, HOLD_PREFIX + desired),
        _set(HELD_DRAIN, desired),
        _set(HOLD_REASONS, _reasons_text(reasons)),
        _set(HELD_SINCE, format_rfc3339(since)),
        _set(HOLD_DETAIL, truncate_utf8(detail)),
        *(_remove(key) for key in remove),
    ]


def update_hold_patch(
    record: HoldRecord, reasons: Iterable[Reason], detail: str, *, repair_since: bool = False
) -> list[JsonPatchOp]:
    """Change the reasons and detail of a hold in place; ``held-since`` is kept, unless
    ``repair_since`` rewrites it to ``record.since`` (it was unreadable or in the future)."""
    ops = [
        _test(DESIRED_DRAIN, HOLD_PREFIX + record.held_drain),
        _test(HELD_DRAIN, record.held_drain),
        _set(HOLD_REASONS, _reasons_text(reasons)),
        _set(HOLD_DETAIL, truncate_utf8(detail)),
    ]
    if repair_since:
        ops.append(_set(HELD_SINCE, format_rfc3339(record.since)))
    return ops


def repair_since_patch(record: HoldRecord) -> list[JsonPatchOp]:
    """Rewrite ``held-since`` to ``record.since`` (it was unreadable or in the future) and leave
    the rest of the record as it is (a reason this agent does not know included)."""
    return [
        _test(DESIRED_DRAIN, HOLD_PREFIX + record.held_drain),
        _test(HELD_DRAIN, record.held_drain),
        _set(HELD_SINCE, format_rfc3339(record.since)),
    ]


def release_patch(
    held_drain: str,
    last_applied: str | None,
    resource_version: str,
    present_keys: Iterable[str],
    *,
    mark_released: bool = False,
    released_by: str | None = None,
    allow_completed: bool = False,
) -> list[JsonPatchOp]:
    """Restore ``desiredDrain = held_drain`` and remove the hold keys that are present.

    Tests ``desiredDrain == hold-<held_drain>``, ``held-drain`` (when present) and
    ``lastAppliedDrain`` as seen. Invariant 1: restoring a value equal to ``lastAppliedDrain``
    would tell the MCD its drain is done; that is refused unless ``allow_completed`` says the
    MCC really did finish that drain (the race-lost case). ``mark_released`` records the
    request in ``drain-guard.io/released`` so the agent does not hold it again, and
    ``released_by`` who released it (``drain-guard.io/released-by``; any older one goes).
    """
    if released_by is not None:
        if not mark_released:
            raise ProtocolError("released-by goes with the released marker only")
        check_released_by(released_by)
    if held_drain == last_applied and not allow_completed:
        raise ProtocolError(
            f"restoring {held_drain!r} would equal lastAppliedDrain and skip the drain"
        )
    present = set(present_keys)
    ops = [_test(DESIRED_DRAIN, HOLD_PREFIX + held_drain)]
    if HELD_DRAIN in present:
        ops.append(_test(HELD_DRAIN, held_drain))
    ops.append(_guard_last_applied(last_applied, resource_version))
    ops.append(_set(DESIRED_DRAIN, held_drain))
    ops.extend(_remove(key) for key in OWNED_KEYS if key in present)
    if mark_released:
        ops.append(_set(RELEASED, held_drain))
        if released_by is not None:
            ops.append(_set(RELEASED_BY, released_by))
        elif RELEASED_BY in present:
            ops.append(_remove(RELEASED_BY))
    else:
        ops.extend(_remove(key) for key in RELEASED_KEYS if key in present)
    return ops


def cleanup_patch(
    desired: str | None,
    annotations: Mapping[str, str],
    keys: Iterable[str],
    *,
    mark_released: str | None = None,
) -> list[JsonPatchOp]:
    """Remove stale agent keys; tests ``desiredDrain`` and each key's value as seen.

    ``mark_released`` records a request whose hold has run out as released (``keys`` then
    name a ``released-by`` present: it was not this release's).
    """
    ops: list[JsonPatchOp] = []
    if desired is not None:
        ops.append(_test(DESIRED_DRAIN, desired))
    stale = [key for key in keys if key in annotations]
    if not stale:
        raise ProtocolError("nothing to clean up")
    ops.extend(_test(key, annotations[key]) for key in stale)
    ops.extend(_remove(key) for key in stale)
    if mark_released is not None:
        ops.append(_set(RELEASED, mark_released))
    return ops
