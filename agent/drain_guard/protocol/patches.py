"""The protocol's JSON Patches (pure): hold, update, repair, release, clean-up; each starts with
``test`` operations on the values it was decided on (invariant 4)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from drain_guard.protocol.keys import (
    DESIRED_DRAIN,
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_DETAIL,
    HOLD_EXPIRES,
    HOLD_PREFIX,
    HOLD_REASONS,
    LAST_APPLIED_DRAIN,
    OWNED_KEYS,
    RELEASED,
    RELEASED_BY,
    RELEASED_KEYS,
    JsonPatchOp,
    Reason,
    Verb,
    parse_drain_request,
    truncate_utf8,
)
from drain_guard.protocol.record import HoldRecord, ProtocolError, check_released_by
from drain_guard.protocol.times import format_rfc3339


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
    expires: datetime,
    remove: Iterable[str] = (),
) -> list[JsonPatchOp]:
    """Rewrite ``desiredDrain`` to ``hold-<desired>`` and write the hold record, in one patch
    (``expires``: when the hold ends at the latest).

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
        _set(HOLD_EXPIRES, format_rfc3339(expires)),
        *(_remove(key) for key in remove),
    ]


def _guard_written(
    keys: Iterable[str], seen: Mapping[str, str], resource_version: str
) -> list[JsonPatchOp]:
    """Test each of ``keys`` (what a patch writes or removes, and what it was decided on) as
    seen, so that another writer's value since is never overwritten (invariant 4); JSON Patch
    cannot test absence, so a key that was absent pins the object instead."""
    keys = tuple(dict.fromkeys(keys))
    ops = [_test(key, seen[key]) for key in keys if key in seen]
    if any(key not in seen for key in keys):
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
    return ops


def update_hold_patch(
    record: HoldRecord,
    reasons: Iterable[Reason],
    detail: str,
    expires: datetime,
    *,
    seen: Mapping[str, str],
    resource_version: str,
    repair_since: bool = False,
    remove: Iterable[str] = (),
) -> list[JsonPatchOp]:
    """Change the reasons, detail and expiry of a hold in place; ``held-since`` is kept, unless
    ``repair_since`` rewrites it to ``record.since`` (it was unreadable or in the future);
    the keys in ``remove`` (present, stale) go. ``seen`` (the annotations the update was
    decided on, at ``resource_version``): the record's keys are tested as they were, so an
    admin's write since (an unreadable ``hold-reasons``, say) fails the patch and is decided
    on, not overwritten."""
    remove = tuple(remove)
    ops = [
        _test(DESIRED_DRAIN, HOLD_PREFIX + record.held_drain),
        _test(HELD_DRAIN, record.held_drain),
        *_guard_written(
            (HOLD_REASONS, HOLD_DETAIL, HOLD_EXPIRES, HELD_SINCE, *remove), seen, resource_version
        ),
        _set(HOLD_REASONS, _reasons_text(reasons)),
        _set(HOLD_DETAIL, truncate_utf8(detail)),
        _set(HOLD_EXPIRES, format_rfc3339(expires)),
    ]
    if repair_since:
        ops.append(_set(HELD_SINCE, format_rfc3339(record.since)))
    ops.extend(_remove(key) for key in remove)
    return ops


def repair_since_patch(
    record: HoldRecord, expires: datetime, *, seen: Mapping[str, str], resource_version: str
) -> list[JsonPatchOp]:
    """Rewrite ``held-since`` to ``record.since`` (it was unreadable or in the future) and the
    expiry that counts from it, and leave the rest of the record as it is (a reason this agent
    does not know included); both tested as ``seen`` at ``resource_version`` first."""
    return [
        _test(DESIRED_DRAIN, HOLD_PREFIX + record.held_drain),
        _test(HELD_DRAIN, record.held_drain),
        *_guard_written((HELD_SINCE, HOLD_EXPIRES), seen, resource_version),
        _set(HELD_SINCE, format_rfc3339(record.since)),
        _set(HOLD_EXPIRES, format_rfc3339(expires)),
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
