"""The disruption-budget guard: what a named budget's status says, read from any shape, and
how ``--disruption-budget`` turns it on."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from drain_guard.config.values import SettingsError
from drain_guard.core.operations import Watched
from drain_guard.guards import Block, BootedImage, Clear, NodeView, Unknown
from drain_guard.guards.base import ObjectRef
from drain_guard.guards.disruption_budget import DisruptionBudgetGuard
from drain_guard.protocol import Reason
from tests.helpers import agent_guards

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
QUORUM = ObjectRef(Watched.PODDISRUPTIONBUDGET, "db", "quorum")
CEPH = ObjectRef(Watched.PODDISRUPTIONBUDGET, "storage", "osd")


def budget(allowed: object, generation: object = 2, observed: object = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "quorum", "namespace": "db", "generation": generation},
        "status": {"disruptionsAllowed": allowed, "observedGeneration": observed},
    }


def view(objects: Mapping[ObjectRef, Mapping[str, Any] | None]) -> NodeView:
    booted = BootedImage(None, None, "ostree", "unread")
    return NodeView("worker-0", {}, (), booted, NOW, "1", objects=objects)


def check(objects: Mapping[ObjectRef, Mapping[str, Any] | None]) -> object:
    return DisruptionBudgetGuard([QUORUM, CEPH]).check(view(objects))


def test_a_budget_at_zero_blocks_and_names_itself() -> None:
    verdict = check({QUORUM: budget(0), CEPH: budget(1)})
    assert verdict == Block(Reason.DISRUPTION_BUDGET, "budget db/quorum allows no disruption")


def test_budgets_that_allow_disruption_clear() -> None:
    assert isinstance(check({QUORUM: budget(1), CEPH: budget(3)}), Clear)


def test_a_budget_that_does_not_exist_refuses_nothing_so_holds_nothing() -> None:
    assert isinstance(check({QUORUM: None, CEPH: budget(2)}), Clear)


def test_a_budget_not_listed_yet_cannot_be_decided() -> None:
    verdict = check({CEPH: budget(2)})
    assert verdict == Unknown(Reason.DISRUPTION_BUDGET, "budget db/quorum not listed yet")


def test_a_block_wins_over_an_unknown() -> None:
    assert isinstance(check({CEPH: budget(0)}), Block)


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"generation": 1}},  # no status: the controller has not seen it
        {"status": "full"},
        budget(0, generation=3, observed=2),  # the spec changed since the status
        budget(0, generation=3, observed=None),
        budget(None),
        budget("0"),
        budget(True),
        budget(-1),
        {"metadata": [], "status": {"disruptionsAllowed": []}},
    ],
)
def test_a_status_that_cannot_be_read_is_unknown_not_a_crash(obj: dict[str, Any]) -> None:
    verdict = check({QUORUM: obj, CEPH: budget(1)})
    assert isinstance(verdict, Unknown)
    assert verdict.detail.startswith("budget db/quorum")


def test_the_flag_turns_it_on_reading_each_budget_once() -> None:
    flags = ("--disruption-budget=db/quorum", "--disruption-budget", "db/quorum")
    [guard] = [g for g in agent_guards(*flags) if g.reason is Reason.DISRUPTION_BUDGET]
    assert guard.reads == (QUORUM,)
    assert all(g.reads == () for g in agent_guards() if g.reason is not Reason.DISRUPTION_BUDGET)


@pytest.mark.parametrize("text", ["quorum", "db/", "/quorum", "db/a/b", "DB/quorum", "db/q_1"])
def test_a_malformed_budget_is_one_settings_error(text: str) -> None:
    with pytest.raises(SettingsError, match="invalid --disruption-budget"):
        agent_guards(f"--disruption-budget={text}")


def test_through_the_node_proxy_it_is_refused() -> None:
    with pytest.raises(SettingsError, match="needs the agent's own account"):
        agent_guards("--disruption-budget=db/quorum", "--api-socket=/run/proxy.sock")
