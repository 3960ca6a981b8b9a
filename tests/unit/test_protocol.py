"""The hold protocol: request parsing, the hold record, times, and the JSON Patches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from drain_guard.protocol import (
    DESIRED_DRAIN,
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_DETAIL,
    HOLD_EXPIRES,
    HOLD_REASONS,
    LAST_APPLIED_DRAIN,
    LATEST,
    MAX_DETAIL_BYTES,
    MAX_RELEASED_BY_BYTES,
    OWNED_KEYS,
    RELEASED,
    RELEASED_BY,
    RELEASED_KEYS,
    HoldRecord,
    MalformedHold,
    ProtocolError,
    Reason,
    Verb,
    annotation_path,
    check_released_by,
    cleanup_patch,
    format_rfc3339,
    hold_patch,
    later,
    parse_drain_request,
    parse_rfc3339,
    read_hold,
    read_released_by,
    release_patch,
    truncate_utf8,
    update_hold_patch,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
REQ = "drain-rendered-worker-5620288caa936354c33583d4d2a896dc"


def node(annotations: dict[str, str], rv: str = "42") -> dict[str, Any]:
    return {"metadata": {"name": "n", "resourceVersion": rv, "annotations": dict(annotations)}}


def apply(obj: dict[str, Any], patch: list[dict[str, str]]) -> dict[str, str]:
    result: dict[str, Any] = jsonpatch.apply_patch(obj, patch)
    annotations: dict[str, str] = result["metadata"]["annotations"]
    return annotations


# --- requests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "verb", "target"),
    [
        (REQ, Verb.DRAIN, REQ.removeprefix("drain-")),
        ("uncordon-rendered-worker-1", Verb.UNCORDON, "rendered-worker-1"),
        ("hold-drain-rendered-worker-1", Verb.HOLD, "drain-rendered-worker-1"),
        ("drain", Verb.DRAIN, ""),
        ("Drain-x", Verb.UNKNOWN, "x"),
        ("pause-x", Verb.UNKNOWN, "x"),
        ("none-x", Verb.UNKNOWN, "x"),
        ("", Verb.NONE, ""),
        (None, Verb.NONE, ""),
    ],
)
def test_parse_drain_request(raw: str | None, verb: Verb, target: str) -> None:
    request = parse_drain_request(raw)
    assert (request.verb, request.target) == (verb, target)


@given(st.text(max_size=40))
def test_verb_is_the_text_before_the_first_dash(raw: str) -> None:
    request = parse_drain_request(raw)
    if not raw:
        assert request.verb is Verb.NONE
        return
    head = raw.split("-", 1)[0]
    expected = head if head in ("drain", "uncordon", "hold") else "unknown"
    assert request.verb.value == expected
    assert request.raw == raw
    if "-" in raw:
        assert f"{head}-{request.target}" == raw


# --- times and detail -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", T0),
        ("2026-01-02t03:04:05z", T0),
        ("2026-01-02T05:04:05+02:00", T0),
        ("2026-01-02T00:04:05-03:00", T0),
        ("2026-01-02T03:04:05.123456789Z", T0.replace(microsecond=123456)),
        ("2026-01-02T03:04:05.5Z", T0.replace(microsecond=500000)),
    ],
)
def test_parse_rfc3339(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9999-12-31T23:59:59Z", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("9999-12-31T23:59:59+05:00", datetime(9999, 12, 31, 18, 59, 59, tzinfo=UTC)),
        ("0001-01-01T00:00:00Z", datetime(1, 1, 1, tzinfo=UTC)),
        ("0001-01-01T00:00:00-01:00", datetime(1, 1, 1, 1, tzinfo=UTC)),
        ("2026-01-02T03:04:05+23:59", T0 - timedelta(hours=23, minutes=59)),
        ("2016-12-31T23:59:60Z", datetime(2016, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ("2016-12-31T15:59:60-08:00", datetime(2016, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ],
)
def test_parse_rfc3339_at_the_edges(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        # The examples: each raised OverflowError and crashed the agent.
        ("9999-12-31T23:59:59-05:00", "outside years 1-9999"),
        ("0001-01-01T00:00:00+01:00", "outside years 1-9999"),
        ("9999-12-31T00:01:00-23:59", "outside years 1-9999"),
        ("2026-01-02T03:04:05+25:00", "beyond -23:59 to \\+23:59"),
        ("2026-01-02T03:04:05-00:60", "beyond -23:59 to \\+23:59"),
        ("2026-01-02T03:04:60Z", "a leap second ends a UTC day"),
        ("0000-01-01T00:00:00Z", "not a valid time"),
        ("2026-01-02T03:04:61Z", "not a valid time"),
        ("\u0662\u0660\u0662\u0666-01-02T03:04:05Z", "not an RFC 3339 time"),  # Arabic digits
        ("2026-01-02T03:04:05Z\nx", "not an RFC 3339 time"),
    ],
)
def test_parse_rfc3339_edges_are_invalid_input_not_a_crash(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_rfc3339(text)


@pytest.mark.parametrize(
    "text",
    ["2026-01-02", "2026-01-02T03:04:05", "2026-13-02T03:04:05Z", "yesterday", "", "1700000000"],
)
def test_parse_rfc3339_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"RFC 3339|not a valid time"):
        parse_rfc3339(text)


@given(st.datetimes(timezones=st.just(UTC)))
def test_rfc3339_round_trip_to_the_second(moment: datetime) -> None:
    assert parse_rfc3339(format_rfc3339(moment)) == moment.replace(microsecond=0)


def test_format_rfc3339_writes_four_digit_years() -> None:
    assert format_rfc3339(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00Z"
    assert parse_rfc3339(format_rfc3339(datetime(999, 2, 3, tzinfo=UTC))).year == 999


def test_later_saturates_at_the_latest_time() -> None:
    assert later(T0, timedelta(hours=1)) == T0 + timedelta(hours=1)
    assert later(datetime(9999, 12, 31, 23, tzinfo=UTC), timedelta(hours=2)) == LATEST
    assert later(LATEST, timedelta(0)) == LATEST


def test_format_rfc3339_is_utc_and_rejects_naive() -> None:
    assert format_rfc3339(T0.astimezone(timezone(timedelta(hours=5)))) == "2026-01-02T03:04:05Z"
    with pytest.raises(ValueError, match="naive"):
        format_rfc3339(datetime(2026, 1, 1))


@given(st.text(max_size=700))
def test_truncate_utf8_fits_and_keeps_a_prefix(text: str) -> None:
    cut = truncate_utf8(text)
    assert len(cut.encode()) <= MAX_DETAIL_BYTES
    if len(text.encode()) <= MAX_DETAIL_BYTES:
        assert cut == text
    else:
        assert cut.endswith("…")
        assert text.startswith(cut[:-1])


def test_truncate_utf8_on_a_character_boundary() -> None:
    text = "é" * 600  # 1200 bytes, two bytes a character
    cut = truncate_utf8(text)
    assert len(cut.encode()) <= MAX_DETAIL_BYTES
    assert cut == "é" * ((MAX_DETAIL_BYTES - 3) // 2) + "…"


# --- the hold record ----------------------------------------------------------------------------


def record_annotations(**overrides: str) -> dict[str, str]:
    annotations = {
        DESIRED_DRAIN: "hold-" + REQ,
        HELD_DRAIN: REQ,
        HOLD_REASONS: "build-pod,noop-image",
        HELD_SINCE: "2026-01-02T03:04:05Z",
        HOLD_DETAIL: "build-pod: x",
    }
    annotations.update(overrides)
    return annotations


def test_read_hold() -> None:
    assert read_hold(record_annotations()) == HoldRecord(
        REQ, (Reason.BUILD_POD, Reason.NOOP_IMAGE), T0, "build-pod: x"
    )
    assert read_hold({DESIRED_DRAIN: REQ}) is None


def test_read_hold_detail_is_optional_and_reasons_deduplicated() -> None:
    annotations = record_annotations(**{HOLD_REASONS: "manual, manual"})
    del annotations[HOLD_DETAIL]
    record = read_hold(annotations)
    assert record is not None
    assert (record.reasons, record.detail) == ((Reason.MANUAL,), "")


def test_read_hold_keeps_a_reason_it_does_not_know_apart() -> None:
    """A newer agent's reason is read, not refused (docs/protocol.md, "Reasons an agent does
    not know"): the known ones as ``Reason``, the rest as the names they are."""
    record = read_hold(record_annotations(**{HOLD_REASONS: "disk-pressure,manual,disk-pressure"}))
    assert record is not None
    assert record.reasons == (Reason.MANUAL,)
    assert record.unknown_reasons == ("disk-pressure",)
    assert record.reason_names == ("manual", "disk-pressure")


def test_read_hold_keeps_a_future_since_for_decide_to_judge() -> None:
    record = read_hold(record_annotations(**{HELD_SINCE: "2099-01-01T00:00:00Z"}))
    assert record is not None
    assert record.age(T0) < timedelta(0)


@pytest.mark.parametrize(
    ("overrides", "drop", "fragment"),
    [
        ({HELD_SINCE: "soon"}, None, "held-since"),
        ({HOLD_REASONS: "build-pod,tea time"}, None, "'tea time' is not a reason's name"),
        ({HOLD_REASONS: ""}, None, "expected comma-separated reasons"),
        ({HOLD_REASONS: "build-pod,,manual"}, None, "expected comma-separated reasons"),
        ({HELD_DRAIN: ""}, None, "held-drain is empty"),
        ({}, HELD_SINCE, "missing drain-guard.io/held-since"),
        ({}, HELD_DRAIN, "missing drain-guard.io/held-drain"),
    ],
)
def test_read_hold_malformed(overrides: dict[str, str], drop: str | None, fragment: str) -> None:
    annotations = record_annotations(**overrides)
    if drop is not None:
        del annotations[drop]
    with pytest.raises(MalformedHold) as info:
        read_hold(annotations)
    assert fragment in str(info.value)


def test_only_detail_left_is_malformed() -> None:
    with pytest.raises(MalformedHold, match="incomplete"):
        read_hold({HOLD_DETAIL: "x"})


# --- patches ----------------------------------------------------------------------------------


def test_annotation_path_escapes_json_pointer() -> None:
    assert annotation_path("a/b~c") == "/metadata/annotations/a~1b~0c"
    assert annotation_path(DESIRED_DRAIN).endswith(
        "machineconfiguration.openshift.io~1desiredDrain"
    )


def test_hold_patch_applies_and_starts_with_tests() -> None:
    before = {DESIRED_DRAIN: REQ, LAST_APPLIED_DRAIN: "uncordon-rendered-worker-0"}
    patch = hold_patch(
        REQ,
        "uncordon-rendered-worker-0",
        "42",
        [Reason.BUILD_POD],
        T0,
        "build pod b",
        expires=T0 + timedelta(minutes=45),
    )
    assert [op["op"] for op in patch[:2]] == ["test", "test"]
    after = apply(node(before), patch)
    assert after == {
        DESIRED_DRAIN: "hold-" + REQ,
        LAST_APPLIED_DRAIN: "uncordon-rendered-worker-0",
        HELD_DRAIN: REQ,
        HOLD_REASONS: "build-pod",
        HELD_SINCE: "2026-01-02T03:04:05Z",
        HOLD_DETAIL: "build pod b",
        HOLD_EXPIRES: "2026-01-02T03:49:05Z",
    }


def test_hold_patch_fails_when_the_mcd_wrote_a_newer_request() -> None:
    patch = hold_patch(
        REQ, None, "42", [Reason.BUILD_POD], T0, "", expires=T0 + timedelta(minutes=45)
    )
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node({DESIRED_DRAIN: "drain-rendered-worker-2"}), patch)


def test_hold_patch_pins_resource_version_when_last_applied_is_absent() -> None:
    patch = hold_patch(
        REQ, None, "42", [Reason.BUILD_POD], T0, "", expires=T0 + timedelta(minutes=45)
    )
    assert {"op": "test", "path": "/metadata/resourceVersion", "value": "42"} in patch
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node({DESIRED_DRAIN: REQ}, rv="43"), patch)
    assert apply(node({DESIRED_DRAIN: REQ}), patch)[DESIRED_DRAIN] == "hold-" + REQ


def test_hold_patch_fails_when_the_drain_completed_meanwhile() -> None:
    patch = hold_patch(
        REQ, "uncordon-old", "42", [Reason.BUILD_POD], T0, "", expires=T0 + timedelta(minutes=45)
    )
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node({DESIRED_DRAIN: REQ, LAST_APPLIED_DRAIN: REQ}), patch)


def test_hold_patch_overwrites_stale_keys_and_removes_released() -> None:
    stale = {
        DESIRED_DRAIN: REQ,
        HELD_DRAIN: "drain-old",
        HOLD_REASONS: "manual",
        HELD_SINCE: "2020-01-01T00:00:00Z",
        HOLD_DETAIL: "old",
        RELEASED: "drain-old",
    }
    patch = hold_patch(
        REQ,
        None,
        "42",
        [Reason.NOOP_IMAGE],
        T0,
        "same image",
        remove=[RELEASED],
        expires=T0 + timedelta(minutes=45),
    )
    after = apply(node(stale), patch)
    assert after[HELD_DRAIN] == REQ
    assert after[HOLD_REASONS] == "noop-image"
    assert after[HELD_SINCE] == "2026-01-02T03:04:05Z"
    assert RELEASED not in after


@pytest.mark.parametrize(
    ("desired", "last", "reasons", "fragment"),
    [
        ("uncordon-x", None, [Reason.MANUAL], "only drain requests"),
        ("hold-drain-x", None, [Reason.MANUAL], "only drain requests"),
        ("drain-x", "drain-x", [Reason.MANUAL], "already applied"),
        ("drain-x", None, [], "at least one reason"),
    ],
)
def test_hold_patch_refuses(
    desired: str, last: str | None, reasons: list[Reason], fragment: str
) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        hold_patch(desired, last, "1", reasons, T0, "", expires=T0 + timedelta(minutes=45))


def test_hold_patch_truncates_detail() -> None:
    patch = hold_patch(
        REQ, None, "1", [Reason.BUILD_POD], T0, "x" * 5000, expires=T0 + timedelta(minutes=45)
    )
    detail = next(op["value"] for op in patch if op["path"] == annotation_path(HOLD_DETAIL))
    assert len(detail.encode()) == MAX_DETAIL_BYTES


def test_update_hold_patch_keeps_since() -> None:
    before = record_annotations()
    record = read_hold(before)
    assert record is not None
    expires = record.since + timedelta(minutes=45)
    patch = update_hold_patch(
        record, [Reason.MANUAL], "operator", expires, seen=before, resource_version="42"
    )
    after = apply(node(before), patch)
    assert after[HOLD_REASONS] == "manual"
    assert after[HOLD_DETAIL] == "operator"
    assert after[HELD_SINCE] == before[HELD_SINCE]
    superseded = {**before, DESIRED_DRAIN: "drain-new"}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node(superseded), patch)


@pytest.mark.parametrize(
    "written", [{HOLD_REASONS: ""}, {HOLD_DETAIL: "disk-pressure: full"}, {HELD_SINCE: "x"}]
)
def test_update_hold_patch_fails_on_an_admins_write_since_it_was_decided(
    written: dict[str, str],
) -> None:
    """Invariant 4: the update was decided on the record as it was; an admin's write of one
    of its keys since (an unreadable hold-reasons, say) is never overwritten from that view."""
    before = record_annotations(**{HOLD_EXPIRES: "2026-01-02T03:49:05Z"})
    record = read_hold(before)
    assert record is not None
    patch = update_hold_patch(
        record,
        [Reason.MANUAL],
        "operator",
        record.since + timedelta(minutes=45),
        seen=before,
        resource_version="42",
    )
    assert apply(node(before), patch)[HOLD_REASONS] == "manual"
    # The same resourceVersion: only the tests of the values written fail it.
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node({**before, **written}), patch)


def test_update_hold_patch_pins_the_object_when_a_key_it_writes_was_absent() -> None:
    """An older agent's record, without hold-expires: absence cannot be tested, so the
    resourceVersion it was decided at is."""
    before = record_annotations()
    assert HOLD_EXPIRES not in before
    record = read_hold(before)
    assert record is not None
    patch = update_hold_patch(
        record, [Reason.MANUAL], "x", record.since, seen=before, resource_version="42"
    )
    assert apply(node(before, rv="42"), patch)[HOLD_EXPIRES]
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node({**before, HOLD_EXPIRES: "2026-01-02T03:09:05Z"}, rv="43"), patch)


def test_release_patch_restores_and_removes_only_present_keys() -> None:
    before = record_annotations(**{LAST_APPLIED_DRAIN: "uncordon-old"})
    del before[HOLD_DETAIL]
    patch = release_patch(REQ, "uncordon-old", "42", before.keys())
    after = apply(node(before), patch)
    assert after == {DESIRED_DRAIN: REQ, LAST_APPLIED_DRAIN: "uncordon-old"}


def test_release_patch_marks_released() -> None:
    before = record_annotations(**{LAST_APPLIED_DRAIN: "uncordon-old"})
    after = apply(
        node(before), release_patch(REQ, "uncordon-old", "42", before, mark_released=True)
    )
    assert after[RELEASED] == REQ
    assert not set(OWNED_KEYS) & set(after)


def test_release_patch_records_who_released_and_drops_an_older_one() -> None:
    before = record_annotations(**{LAST_APPLIED_DRAIN: "uncordon-old", RELEASED_BY: "bob"})
    by_alice = release_patch(
        REQ, "uncordon-old", "42", before, mark_released=True, released_by="alice"
    )
    after = apply(node(before), by_alice)
    assert (after[RELEASED], after[RELEASED_BY]) == (REQ, "alice")
    unknown = apply(
        node(before), release_patch(REQ, "uncordon-old", "42", before, mark_released=True)
    )
    assert after.keys() - unknown.keys() == {RELEASED_BY}
    safe = apply(node(before), release_patch(REQ, "uncordon-old", "42", before))
    assert not set(RELEASED_KEYS) & set(safe)
    with pytest.raises(ProtocolError, match="released marker only"):
        release_patch(REQ, "uncordon-old", "42", before, released_by="alice")
    with pytest.raises(ProtocolError, match="control character"):
        release_patch(REQ, None, "42", before, mark_released=True, released_by="a\nb")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "empty"),
        (" ", "empty"),
        ("x" * (MAX_RELEASED_BY_BYTES + 1), "longer than 512 bytes"),
        ("é" * 257, "longer than 512 bytes"),
        ("alice\nkube:admin", "control character"),
        ("alice\x1b[2J", "control character"),
        ("a\u2028b", "control character"),
    ],
)
def test_a_malformed_released_by_is_unreadable(value: str, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        check_released_by(value)
    with pytest.raises(MalformedHold, match=f"released-by: .*{why}"):
        read_released_by({RELEASED: REQ, RELEASED_BY: value})


def test_released_by_is_read_beside_released_only() -> None:
    longest = "é" * (MAX_RELEASED_BY_BYTES // 2)
    assert read_released_by({RELEASED: REQ, RELEASED_BY: longest}) == longest
    assert read_released_by({RELEASED: REQ, RELEASED_BY: "system:serviceaccount:a:b"}) == (
        "system:serviceaccount:a:b"
    )
    assert read_released_by({RELEASED: REQ}) is None
    assert read_released_by({RELEASED_BY: "alice"}) is None  # stale: no marker


def test_release_patch_fails_if_the_mcc_completed_the_drain_meanwhile() -> None:
    """Invariant 1: the restore must not land on a lastAppliedDrain equal to the request."""
    before = record_annotations(**{LAST_APPLIED_DRAIN: "uncordon-old"})
    patch = release_patch(REQ, "uncordon-old", "42", before)
    raced = {**before, LAST_APPLIED_DRAIN: REQ}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node(raced), patch)


def test_release_patch_with_absent_last_applied_pins_resource_version() -> None:
    before = record_annotations()
    patch = release_patch(REQ, None, "42", before)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node({**before, LAST_APPLIED_DRAIN: REQ}, rv="43"), patch)
    assert apply(node(before), patch) == {DESIRED_DRAIN: REQ}


def test_release_patch_refuses_to_write_last_applied_unless_completed() -> None:
    before = record_annotations(**{LAST_APPLIED_DRAIN: REQ})
    with pytest.raises(ProtocolError, match="equal lastAppliedDrain"):
        release_patch(REQ, REQ, "42", before)
    after = apply(node(before), release_patch(REQ, REQ, "42", before, allow_completed=True))
    assert after == {DESIRED_DRAIN: REQ, LAST_APPLIED_DRAIN: REQ}


def test_release_patch_fails_when_superseded() -> None:
    before = record_annotations(**{LAST_APPLIED_DRAIN: "uncordon-old"})
    patch = release_patch(REQ, "uncordon-old", "42", before)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node({**before, DESIRED_DRAIN: "drain-newer"}), patch)


def test_release_patch_fails_when_a_key_vanished() -> None:
    """A remove of an absent key fails the patch: the controller re-reads and decides again."""
    before = record_annotations(**{LAST_APPLIED_DRAIN: "uncordon-old"})
    patch = release_patch(REQ, "uncordon-old", "42", before)
    gone = dict(before)
    del gone[HOLD_DETAIL]
    with pytest.raises(jsonpatch.JsonPatchConflict):
        apply(node(gone), patch)


def test_cleanup_patch() -> None:
    before = {DESIRED_DRAIN: "drain-new", HELD_DRAIN: REQ, HOLD_DETAIL: "x", RELEASED: "drain-a"}
    patch = cleanup_patch("drain-new", before, (HELD_DRAIN, HOLD_DETAIL, HELD_SINCE, RELEASED))
    assert apply(node(before), patch) == {DESIRED_DRAIN: "drain-new"}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(node({**before, HELD_DRAIN: "drain-other"}), patch)
    marked = cleanup_patch("drain-new", before, (HELD_DRAIN,), mark_released="drain-new")
    assert apply(node(before), marked)[RELEASED] == "drain-new"
    with pytest.raises(ProtocolError, match="nothing to clean up"):
        cleanup_patch("drain-new", {DESIRED_DRAIN: "drain-new"}, OWNED_KEYS)
