"""The operation enum (drain_guard.core.operations): one list for the call wrapper, the
metrics and the rights, so a call cannot name an operation the others do not know."""

from __future__ import annotations

from drain_guard.confine import permissions
from drain_guard.core.operations import Operation, Watched
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.metrics import BaseMetrics


def test_every_operation_is_a_request_some_program_is_granted_or_expects_refused() -> None:
    every = (
        permissions.PERMISSIONS
        + permissions.SHIELD_PERMISSIONS
        + permissions.WEBHOOK_PERMISSIONS
        + permissions.REFUSED_PROBES
    )
    assert permissions.operations(every) == tuple(Operation)


def test_every_watched_resource_has_its_list_and_watch_operations() -> None:
    for resource in Watched:
        assert resource.list_operation.request[2] == "list"
        assert resource.watch_operation.request[2] == "watch"
        assert resource.list_operation.request[:2] == resource.watch_operation.request[:2]


def test_the_agent_shows_the_error_series_of_its_probe_and_the_central_shield_of_its_own() -> None:
    assert Operation.TOKEN_CREATE in Metrics().api_operations
    assert set(BaseMetrics().api_operations) == {
        Operation.DEPLOYMENT_GET,
        Operation.POD_LIST,
        Operation.POD_WATCH,
        Operation.PODDISRUPTIONBUDGET_LIST,
        Operation.PODDISRUPTIONBUDGET_WATCH,
        Operation.PODDISRUPTIONBUDGET_CREATE,
        Operation.PODDISRUPTIONBUDGET_DELETE,
    }


def test_an_operation_outside_a_programs_list_is_counted_not_raised() -> None:
    """Before the enum, a name missing from the metrics' list turned an ordinary API error into
    a ValueError that got past the loops (they catch API errors only)."""
    metrics = BaseMetrics()  # the central shield's: no Node calls
    metrics.count_api_error(Operation.NODE_GET)
    sample = metrics.registry.get_sample_value(
        "drain_guard_api_errors_total", {"operation": "node_get"}
    )
    assert sample == 1
