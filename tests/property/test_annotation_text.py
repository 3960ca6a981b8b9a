"""Every parser of annotation text is total: any value, however odd, is read or is invalid input
(a ValueError with one line), never another exception, and the agent's whole pure path (what
happened, the decision, its status, its log fields) runs on it.

Uniform dates almost never reach the calendar's edges, where Python's datetime overflows
(issue 27: an operator's ``9999-12-31T23:59:59-05:00`` crashed the agent on every restart), so
the generators here are weighted to the edges: years 1 and 9999, offsets up to ±23:59 and
beyond, leap seconds, ``Z``/``z``, long fractions, and malformed neighbours of each.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from drain_guard import protocol
from drain_guard.core.imageref import ImageRefError, digest_of
from drain_guard.core.pods import Pod
from drain_guard.decision import holds
from drain_guard.decision.decide import (
    decide,
)
from drain_guard.decision.decisions import (
    Decision,
    Hold,
    Release,
    UpdateHold,
    invalid_inputs,
)
from drain_guard.guards import (
    BootedImage,
    NodeView,
    parse_hold_request,
)
from drain_guard.protocol import (
    DESIRED_DRAIN,
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_REASONS,
    HOLD_REQUEST,
    LATEST,
    MalformedHold,
    Outcome,
    format_rfc3339,
    parse_rfc3339,
    read_hold,
)
from drain_guard.runtime import logs
from drain_guard.status.agent import AgentStatus
from drain_guard.status.snapshot import decided
from tests.helpers import agent_guards

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MAX_HOLD = timedelta(minutes=45)
GUARDS = agent_guards()
REQUEST = "drain-rendered-worker-aaa"
BUILD_POD = Pod(
    "openshift-machine-config-operator",
    "build-rendered-worker-x-build",
    "Running",
    {"openshift.io/build.name": "build-rendered-worker-x"},
)
BOOTED = BootedImage(None, None, "test", "not read in this test")


def _edge(edges: list[int], low: int, high: int) -> st.SearchStrategy[int]:
    """Half the draws from the edges, half anywhere in the field's (over-wide) range."""
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


@st.composite
def rfc3339_texts(draw: st.DrawFn) -> str:
    year = draw(_edge([0, 1, 2, 999, 1000, 1969, 1970, 2038, 9998, 9999], 0, 9999))
    month = draw(_edge([0, 1, 2, 12, 13], 0, 99))
    day = draw(_edge([0, 1, 28, 29, 30, 31, 32], 0, 99))
    hour = draw(_edge([0, 1, 23, 24], 0, 99))
    minute = draw(_edge([0, 1, 59, 60], 0, 99))
    second = draw(_edge([0, 59, 60, 61], 0, 99))
    fraction = draw(st.sampled_from(["", "", ".0", ".5", ".999999", ".9999999999", ".", ".x"]))
    separator = draw(st.sampled_from(["T", "T", "t", " ", ""]))
    offset_hours = draw(_edge([0, 1, 5, 14, 23, 24, 25, 99], 0, 99))
    offset_minutes = draw(_edge([0, 1, 30, 59, 60, 99], 0, 99))
    sign = draw(st.sampled_from("+-"))
    zone = draw(
        st.sampled_from(
            [
                "Z",
                "z",
                f"{sign}{offset_hours:02d}:{offset_minutes:02d}",
                f"{sign}{offset_hours:02d}:{offset_minutes:02d}",
                f"{sign}{offset_hours:02d}{offset_minutes:02d}",  # no colon: not RFC 3339
                "",
                "UTC",
            ]
        )
    )
    pad = draw(st.sampled_from(["", "", " ", "\n", "\t"]))
    date = f"{year:04d}-{month:02d}-{day:02d}"
    return f"{pad}{date}{separator}{hour:02d}:{minute:02d}:{second:02d}{fraction}{zone}{pad}"


#: Dates at the edges, and text that is not a date at all.
annotation_dates = st.one_of(rfc3339_texts(), rfc3339_texts(), st.text(max_size=40))


def _parsed(text: str) -> datetime | None:
    try:
        moment = parse_rfc3339(text)
    except ValueError as err:
        why = str(err)
    else:
        assert moment.tzinfo is UTC
        return moment
    assert "\n" not in why.replace(repr(text), "")  # one line, whatever the input
    return None


@settings(max_examples=600)
@given(annotation_dates)
def test_rfc3339_is_total_and_what_it_reads_round_trips(text: str) -> None:
    moment = _parsed(text)
    if moment is not None:
        assert parse_rfc3339(format_rfc3339(moment)) == moment.replace(microsecond=0)


@settings(max_examples=300)
@given(annotation_dates, st.text(max_size=20))
def test_hold_request_is_total(expiry: str, reason: str) -> None:
    text = f"{expiry};{reason}" if reason else expiry
    try:
        parsed, why = parse_hold_request(text)
    except ValueError:
        assert _parsed(expiry.partition(";")[0]) is None
    else:
        assert parsed == parse_rfc3339(text.partition(";")[0])
        assert "\n" not in why


@settings(max_examples=300)
@given(annotation_dates, st.text(max_size=20))
def test_hold_record_is_total(since: str, reasons: str) -> None:
    ann = {DESIRED_DRAIN: "hold-" + REQUEST, HELD_DRAIN: REQUEST, HOLD_REASONS: reasons}
    try:
        record = read_hold({**ann, HELD_SINCE: since})
    except MalformedHold:
        return
    assert record is not None
    assert record.since == parse_rfc3339(since)


@settings(max_examples=200)
@given(st.text(max_size=80))
def test_drain_request_and_image_parsers_are_total(text: str) -> None:
    assert protocol.parse_drain_request(text).raw == text
    with contextlib.suppress(ImageRefError):
        digest_of(text)


def _agent_pass(annotations: dict[str, str], pods: tuple[Pod, ...]) -> Decision:
    """What the controller does with one Node, minus I/O: observe, decide, report, log."""
    change = holds.observe(holds.Memory(), annotations, now=NOW, monotonic=0.0, seen_at=0.0)
    for t in change.transitions:
        if isinstance(t, holds.Found):
            logs.hold_fields("worker-0", t.record, MAX_HOLD)
    view = NodeView("worker-0", annotations, pods, BOOTED, NOW, "7")
    decision = decide(view, GUARDS, MAX_HOLD)
    assert decision.recheck_at is None or NOW < decision.recheck_at <= LATEST
    base = AgentStatus("worker-0", "starting", "", "test", NOW, NOW)
    status = decided(
        base,
        decision,
        annotations=annotations,
        hold=change.memory.hold,
        booted=BOOTED,
        max_hold=MAX_HOLD,
        now=NOW,
    )
    AgentStatus.from_json(status.to_json())  # what `drain-guard status` reads back
    status.to_text()
    return decision


@settings(max_examples=300, deadline=None)
@example(expiry="9999-12-31T23:59:59-05:00")
@example(expiry="9999-12-31T23:59:59Z")
@example(expiry="0001-01-01T00:00:00+01:00")
@example(expiry="2026-03-01T12:00:00+25:00")
@given(expiry=annotation_dates)
def test_any_hold_request_date_is_decided_and_reported(expiry: str) -> None:
    """A build pod holds the request whatever the hold-request says: an unreadable one is
    reported as invalid input, a readable one beyond max-hold says that it is capped."""
    annotations = {DESIRED_DRAIN: REQUEST, HOLD_REQUEST: f"{expiry};change freeze"}
    decision = _agent_pass(annotations, (BUILD_POD,))
    assert isinstance(decision, Hold), decision
    kinds = [bad.kind for bad in invalid_inputs(decision)]
    parsed = _parsed(expiry)
    assert kinds == ([] if parsed is not None else ["hold_request"])
    if parsed is not None and parsed > NOW + MAX_HOLD:
        assert "beyond max-hold" in decision.explain()


@settings(max_examples=300, deadline=None)
@example(since="9999-12-31T00:01:00-23:59")
@example(since="9999-12-31T23:59:59Z")
@example(since="0001-01-01T00:00:00Z")
@given(since=annotation_dates)
def test_any_held_since_is_decided_and_reported(since: str) -> None:
    """A hold whose held-since is unreadable or in the future is kept, its held-since
    rewritten to now and the value reported; one older than max-hold is released as
    expired; in range, it is kept: never an exception."""
    annotations = {
        DESIRED_DRAIN: "hold-" + REQUEST,
        HELD_DRAIN: REQUEST,
        HOLD_REASONS: "build-pod",
        HELD_SINCE: since,
    }
    decision = _agent_pass(annotations, (BUILD_POD,))
    parsed = _parsed(since)
    if parsed is None or parsed > NOW + timedelta(minutes=2):
        assert isinstance(decision, UpdateHold), decision
        assert decision.record.since == NOW
        assert [bad.kind for bad in invalid_inputs(decision)] == ["annotation"]
    elif NOW - MAX_HOLD < parsed <= NOW:
        assert not isinstance(decision, Release), decision
    elif parsed <= NOW - MAX_HOLD:
        assert isinstance(decision, Release)
        assert decision.outcome is Outcome.EXPIRED
