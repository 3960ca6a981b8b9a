"""Every decision type carries the facts its readers need (status, logs, holds, controller)."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime
from typing import get_args

import pytest

from drain_guard.decision import decisions
from drain_guard.decision.decisions import (
    FACTS,
    CleanUp,
    Decision,
    Foreign,
    Hold,
    Idle,
    Keep,
    Release,
    UpdateHold,
    Wait,
)
from drain_guard.guards import Block, Unknown
from drain_guard.protocol import HoldRecord, Outcome, Reason
from drain_guard.status.agent import DECISIONS

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
REQUEST = "drain-rendered-worker-aaa"
RECORD = HoldRecord(REQUEST, (Reason.BUILD_POD,), NOW, "build pod x")
BLOCKS = (Block(Reason.BUILD_POD, "build pod x"),)

#: Every status name each decision class can give: one decision per name.
EVERY_NAME: dict[type, tuple[Decision, ...]] = {
    Idle: (Idle("nothing asked"), Idle("asked", request=REQUEST, passes=True)),
    Hold: (Hold(REQUEST, BLOCKS, NOW, ()),),
    UpdateHold: (UpdateHold(RECORD, BLOCKS, ()),),
    Keep: (Keep(RECORD, BLOCKS),),
    Wait: (Wait((Unknown(Reason.BUILD_POD, "pods not synced"),), None, REQUEST),),
    Release: (Release(REQUEST, Outcome.SAFE, "no guard blocks", (), RECORD),),
    CleanUp: (CleanUp((), "stale", ()), CleanUp((), "stale", (), request=REQUEST, passes=True)),
    Foreign: (Foreign("hold-" + REQUEST, "not written by drain-guard"),),
}


def _decision_classes() -> set[type]:
    """The concrete classes the module defines that explain themselves (decisions), whether
    or not ``Decision`` names them."""
    return {
        c
        for c in vars(decisions).values()
        if isinstance(c, type)
        and c.__module__ == decisions.__name__
        and hasattr(c, "explain")
        and not inspect.isabstract(c)
    }


def test_the_decision_union_names_every_decision_class() -> None:
    assert _decision_classes() == set(get_args(Decision))


def test_every_decision_type_has_every_fact() -> None:
    missing = {
        cls.__name__: [
            fact
            for fact in FACTS
            if fact not in {f.name for f in dataclasses.fields(cls)} and not hasattr(cls, fact)
        ]
        for cls in get_args(Decision)
    }
    assert {name: facts for name, facts in missing.items() if facts} == {}
    assert [c.__name__ for c in get_args(Decision) if inspect.isabstract(c)] == []


def test_every_decision_class_has_its_status_names_listed() -> None:
    assert set(EVERY_NAME) == set(get_args(Decision))


@pytest.mark.parametrize("cls", get_args(Decision), ids=lambda c: c.__name__)
def test_every_status_name_a_decision_class_gives_is_one_of_decisions(cls: type) -> None:
    """``/status`` refuses a name not in ``DECISIONS``: each class's names, checked directly
    (not only those a random Node happens to reach)."""
    examples = EVERY_NAME[cls]
    assert all(isinstance(d, cls) for d in examples)
    assert [d.name for d in examples if d.name not in DECISIONS] == []
