"""The registry: every guard the agent knows, one line each, in the order the agent checks them
and lists their reasons (pure: no I/O).

A new guard is a module of ``guards/`` that declares its ``KIND`` (``base.GuardKind``) and one
line here; ``tests/unit/test_guard_registry.py`` fails until every ``Reason`` has a guard that
says what releases it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from drain_guard.config.options import Option
from drain_guard.guards import (
    alert,
    blocking_pod,
    build_pod,
    disruption_budget,
    manual,
    node_label,
    noop_image,
)
from drain_guard.guards.base import Guard, GuardKind, GuardSettings

KINDS: tuple[GuardKind, ...] = (
    build_pod.KIND,
    noop_image.KIND,
    manual.KIND,
    alert.KIND,
    blocking_pod.KIND,
    node_label.KIND,
    disruption_budget.KIND,
)

_BY_REASON: dict[str, GuardKind] = {kind.reason.value: kind for kind in KINDS}


def options() -> tuple[Option, ...]:
    """The flags the guards own, in the registry's order (``drain-guard run`` lists them)."""
    return tuple(option for kind in KINDS for option in kind.options)


def build(settings: GuardSettings, raw: Mapping[str, object]) -> tuple[Guard, ...]:
    """The guards ``settings`` (the groups they read) turn on; ``raw``: the merged values of
    the guards' options."""
    built = (kind.build(settings, raw) for kind in KINDS)
    return tuple(guard for guard in built if guard is not None)


def releases_when(reason: str, detail: str, until: datetime | None) -> str:
    """What clears ``reason`` of a hold; a reason this agent does not know (a newer agent wrote
    it, docs/protocol.md "Reasons an agent does not know") holds nothing here."""
    kind = _BY_REASON.get(reason)
    if kind is None:
        return (
            f"{reason}: a reason this agent does not know, so it holds nothing here: the hold"
            " ends once this agent's own guards clear"
        )
    return kind.releases_when(detail, until)
