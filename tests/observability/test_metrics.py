"""Metrics: one registry per agent, bounded labels, pre-created series, docs in sync."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from drain_guard import __version__
from drain_guard.core.operations import Operation, Watched
from drain_guard.runtime.agent_metrics import (
    EVENT_REASONS,
    INVALID_INPUT_KINDS,
    OUTCOMES,
    REASONS,
    VERBS,
    Metrics,
)
from drain_guard.runtime.metrics import (
    API_OPERATIONS,
    SYNCED_RESOURCES,
    WATCH_RESOURCES,
    WATCH_RESTART_REASONS,
    BaseMetrics,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
SINCE = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_each_metrics_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()
    a.race_lost()
    assert value(a, "drain_guard_race_lost_total") == 1
    assert value(b, "drain_guard_race_lost_total") == 0


def test_shared_registry_is_used() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    assert m.registry is registry
    assert registry.get_sample_value("drain_guard_image_match") == -1


def test_bounded_series_exist_from_start_at_zero() -> None:
    m = Metrics()
    for reason in REASONS:
        assert value(m, "drain_guard_hold_active", reason=reason) == 0
        assert value(m, "drain_guard_holds_total", reason=reason) == 0
    for outcome in OUTCOMES:
        assert value(m, "drain_guard_releases_total", outcome=outcome) == 0
    for verb in VERBS:
        assert value(m, "drain_guard_drain_requests_total", verb=verb) == 0
    for op in API_OPERATIONS:
        assert value(m, "drain_guard_api_errors_total", operation=op) == 0
    for resource in WATCH_RESOURCES:
        synced = value(m, "drain_guard_synced", resource=resource)
        assert synced == (0 if resource in SYNCED_RESOURCES else None)
        for why in WATCH_RESTART_REASONS:
            assert value(m, "drain_guard_watch_restarts_total", resource=resource, reason=why) == 0
    for kind in INVALID_INPUT_KINDS:
        assert value(m, "drain_guard_invalid_input_total", kind=kind) == 0
    for reason in EVENT_REASONS:
        assert value(m, "drain_guard_events_emitted_total", reason=reason) == 0
    assert value(m, "drain_guard_hold_started_timestamp_seconds") == 0
    assert value(m, "drain_guard_last_api_contact_timestamp_seconds") == 0
    assert value(m, "drain_guard_image_match") == -1
    assert value(m, "process_start_time_seconds") is not None


def test_build_info() -> None:
    m = Metrics()
    samples = [s for f in m.registry.collect() for s in f.samples if s.name.endswith("build_info")]
    assert len(samples) == 1
    assert samples[0].name == "drain_guard_build_info"
    assert samples[0].value == 1
    assert samples[0].labels["version"] == __version__
    assert re.fullmatch(r"3\.\d+\.\d+.*", samples[0].labels["python_version"])


def test_hold_lifecycle() -> None:
    m = Metrics()
    m.count_drain_request("drain")
    m.hold_committed(["build-pod", "noop-image"], SINCE, reaction_seconds=0.03)
    assert value(m, "drain_guard_drain_requests_total", verb="drain") == 1
    assert value(m, "drain_guard_holds_total", reason="build-pod") == 1
    assert value(m, "drain_guard_holds_total", reason="noop-image") == 1
    assert value(m, "drain_guard_holds_total", reason="manual") == 0
    assert value(m, "drain_guard_hold_active", reason="build-pod") == 1
    assert value(m, "drain_guard_hold_active", reason="noop-image") == 1
    assert value(m, "drain_guard_hold_active", reason="manual") == 0
    assert value(m, "drain_guard_hold_started_timestamp_seconds") == SINCE.timestamp()
    assert value(m, "drain_guard_reaction_seconds_count") == 1
    assert value(m, "drain_guard_reaction_seconds_bucket", le="0.025") == 0
    assert value(m, "drain_guard_reaction_seconds_bucket", le="0.05") == 1

    # The build finished; only the no-op guard still blocks: gauges change, counters do not.
    m.set_hold(["noop-image"], SINCE)
    assert value(m, "drain_guard_hold_active", reason="build-pod") == 0
    assert value(m, "drain_guard_hold_active", reason="noop-image") == 1
    assert value(m, "drain_guard_holds_total", reason="noop-image") == 1

    m.hold_released("safe", held_for_seconds=1900)
    assert value(m, "drain_guard_releases_total", outcome="safe") == 1
    assert value(m, "drain_guard_hold_duration_seconds_bucket", le="1800.0") == 0
    assert value(m, "drain_guard_hold_duration_seconds_bucket", le="2700.0") == 1
    assert value(m, "drain_guard_hold_duration_seconds_sum") == 1900
    for reason in REASONS:
        assert value(m, "drain_guard_hold_active", reason=reason) == 0
    assert value(m, "drain_guard_hold_started_timestamp_seconds") == 0


def test_hold_found_at_start_up_is_not_a_reaction() -> None:
    m = Metrics()
    m.hold_committed(["manual"], SINCE, reaction_seconds=None)
    assert value(m, "drain_guard_reaction_seconds_count") == 0
    assert value(m, "drain_guard_holds_total", reason="manual") == 1


def test_hold_duration_buckets_reach_beyond_an_hour() -> None:
    m = Metrics()
    m.hold_released("expired", held_for_seconds=4000)
    assert value(m, "drain_guard_hold_duration_seconds_bucket", le="3600.0") == 0
    assert value(m, "drain_guard_hold_duration_seconds_bucket", le="5400.0") == 1


def test_gauges_and_counters() -> None:
    m = Metrics()
    m.set_build_pods(2)
    m.set_image_match(True)
    assert value(m, "drain_guard_image_match") == 1
    m.set_image_match(False)
    assert value(m, "drain_guard_image_match") == 0
    m.set_image_match(None)
    assert value(m, "drain_guard_image_match") == -1
    m.set_synced(Watched.POD, True)
    m.count_watch_restart(Watched.NODE, "expired")
    m.count_api_error(Operation.NODE_PATCH)
    m.count_invalid_input("image_ref")
    m.count_event("DrainHeld")
    m.api_contact(SINCE)
    assert value(m, "drain_guard_build_pods") == 2
    assert value(m, "drain_guard_synced", resource="pod") == 1
    assert value(m, "drain_guard_synced", resource="node") == 0
    assert value(m, "drain_guard_watch_restarts_total", resource="node", reason="expired") == 1
    assert value(m, "drain_guard_api_errors_total", operation="node_patch") == 1
    assert value(m, "drain_guard_invalid_input_total", kind="image_ref") == 1
    assert value(m, "drain_guard_events_emitted_total", reason="DrainHeld") == 1
    assert value(m, "drain_guard_last_api_contact_timestamp_seconds") == SINCE.timestamp()


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.count_drain_request("drain-rendered-worker-1"),
        lambda m: m.hold_committed(["pod/build-1"], SINCE, None),
        lambda m: m.set_hold([], SINCE),
        lambda m: m.hold_committed([], SINCE, 0.1),
        lambda m: m.hold_committed(["build-pod", "sha256:abc"], SINCE, 0.1),
        lambda m: m.hold_released("timeout", 1.0),
        lambda m: m.count_watch_restart(Watched.NODE, "sha256:abc"),
        lambda m: m.count_invalid_input("worker-0"),
        lambda m: m.count_event("Rebooted"),
    ],
)
def test_unbounded_label_values_are_rejected(call: Callable[[Metrics], object]) -> None:
    m = Metrics()
    before = drain_guard_samples(m)
    with pytest.raises(ValueError):  # noqa: PT011 - the message names the bad value
        call(m)
    assert drain_guard_samples(m) == before  # no new series, no partial update


def drain_guard_samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in m.registry.collect()
        for s in f.samples
        if s.name.startswith("drain_guard_")
    }


@pytest.mark.parametrize(
    ("metric", "values"),
    [
        ("drain_guard_hold_active", REASONS),
        ("drain_guard_holds_total", REASONS),
        ("drain_guard_releases_total", OUTCOMES),
        ("drain_guard_drain_requests_total", VERBS),
        ("drain_guard_api_errors_total", API_OPERATIONS),
        ("drain_guard_watch_restarts_total", WATCH_RESOURCES + WATCH_RESTART_REASONS),
        ("drain_guard_synced", SYNCED_RESOURCES),
        ("drain_guard_invalid_input_total", INVALID_INPUT_KINDS),
        ("drain_guard_events_emitted_total", EVENT_REASONS),
    ],
)
def test_docs_explain_every_label_value(metric: str, values: tuple[str, ...]) -> None:
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith(f"| `{metric}` |")]
    assert len(rows) == 1
    if values == REASONS:
        # A reason label's row points at the Guards table, which names every reason
        # (tests/unit/test_guard_registry.py), rather than keep a second list.
        assert "(protocol.md#guards)" in rows[0]
        return
    missing = [v for v in values if f"`{v}`" not in rows[0]]
    assert not missing


def exposed_families(m: BaseMetrics) -> dict[str, tuple[str, frozenset[str]]]:
    """Exposed name → (type, label names) as the text format shows them."""
    out = {}
    for family in m.registry.collect():
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        labels = {k for s in family.samples for k in s.labels} - {"le"}
        out[family.name + suffix] = (family.type, frozenset(labels))
    return out


def documented_families() -> dict[str, tuple[str, frozenset[str]]]:
    row = re.compile(r"^\| `([a-z_]+)` \| (\w+) \| ([^|]*) \|")
    out = {}
    for line in DOCS.read_text().splitlines():
        if match := row.match(line):
            name, kind, labels = match.groups()
            out[name] = (kind, frozenset(re.findall(r"`(\w+)`", labels)))
    return out


def test_docs_list_every_metric_with_type_and_labels() -> None:
    metrics = Metrics()
    metrics.set_pool_held("worker", False)  # its label values are pools: none until one is known
    assert documented_families() == exposed_families(metrics)


def test_the_central_shield_serves_the_documented_subset_and_no_agent_metric() -> None:
    section = DOCS.read_text().split("## The central shield's metrics")[1].split("\n## ")[0]
    documented = set(re.findall(r"`(drain_guard_\w+)`", section))
    documented.discard("drain_guard_shield_blocked_drains_total")  # named as absent
    exposed = {n for n in exposed_families(BaseMetrics()) if n.startswith("drain_guard_")}
    assert exposed == documented
    agent, shield = exposed_families(Metrics()), exposed_families(BaseMetrics())
    for name in exposed:  # the same type; the agent's labels cover the shield's
        assert agent[name][0] == shield[name][0]
        assert agent[name][1] >= shield[name][1]


def test_no_created_series() -> None:
    """Issue 25: /metrics carried 84 _created series in 260 lines."""
    metrics = Metrics()
    metrics.count_drain_request("drain")
    names = [s.name for f in metrics.registry.collect() for s in f.samples]
    assert names
    assert [n for n in names if n.endswith("_created")] == []
