"""Every decision type carries the facts its readers need (status, logs, holds, controller)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import get_args

from drain_guard import decisions
from drain_guard.decisions import FACTS, Decision


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
