"""The disruption-budget guard: a PodDisruptionBudget the operator named allows no disruption
(pure: no I/O).

A drain evicts through the Eviction API, which refuses every eviction a budget at
``status.disruptionsAllowed == 0`` covers: the MCD then retries until its 1 h timeout and marks
the node Degraded. And a workload whose budget is at zero (a storage cluster rebalancing, a
quorum one member short) is one the operator wants no node drained under. So while a budget
named with ``--disruption-budget NAMESPACE/NAME`` allows no disruption, drains wait (within
``--max-hold``); the agent reads that one budget by name, with a Role in its namespace limited
to it (``daemonset/components/disruption-budgets``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from drain_guard.config.options import Option, env_name
from drain_guard.config.values import SettingsError
from drain_guard.core.operations import Watched
from drain_guard.core.selectors import is_namespace_name
from drain_guard.guards.base import (
    Block,
    Clear,
    Guard,
    GuardKind,
    GuardSettings,
    NodeView,
    ObjectRef,
    Unknown,
    Verdict,
)
from drain_guard.protocol import Reason


class DisruptionBudgetGuard:
    """Blocks while one of the named budgets allows no disruption; cannot decide while one is
    not listed yet or its status is older than its spec; a budget that does not exist holds
    nothing (it refuses no eviction)."""

    reason = Reason.DISRUPTION_BUDGET

    def __init__(self, budgets: Iterable[ObjectRef]) -> None:
        self.reads = tuple(budgets)
        if not self.reads:
            raise ValueError("the disruption-budget guard needs at least one budget")

    def check(self, view: NodeView) -> Verdict:
        blocked: list[str] = []
        unknown: list[str] = []
        for ref in self.reads:
            allowed = _disruptions_allowed(ref, view.objects)
            if isinstance(allowed, str):
                unknown.append(allowed)
            elif allowed == 0:
                blocked.append(f"budget {ref} allows no disruption")
        if blocked:
            return Block(self.reason, "; ".join(blocked))
        if unknown:
            return Unknown(self.reason, "; ".join(unknown))
        return Clear(self.reason, f"budget{'s' if len(self.reads) > 1 else ''} allow disruption")


def _disruptions_allowed(
    ref: ObjectRef, objects: Mapping[ObjectRef, Mapping[str, Any] | None]
) -> int | str | None:
    """The budget's ``status.disruptionsAllowed``; None: no such budget (nothing refused); a
    string: why it cannot be told yet. Any shape is read without an exception (the budget is
    written by whoever may write budgets in that namespace)."""
    if ref not in objects:
        return f"budget {ref} not listed yet"
    budget = objects[ref]
    if budget is None:
        return None
    metadata, status = budget.get("metadata"), budget.get("status")
    generation = metadata.get("generation") if isinstance(metadata, Mapping) else None
    if not isinstance(status, Mapping):
        return f"budget {ref} has no status yet (the disruption controller has not seen it)"
    observed, allowed = status.get("observedGeneration"), status.get("disruptionsAllowed")
    if isinstance(generation, int) and (not isinstance(observed, int) or observed < generation):
        return f"budget {ref}: its status is older than its spec (observed {observed})"
    if not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 0:
        return f"budget {ref} has no disruptionsAllowed in its status"
    return allowed


OPTIONS: tuple[Option, ...] = (
    Option(
        "--disruption-budget",
        env_name("--disruption-budget"),
        None,
        "NAMESPACE/NAME of a PodDisruptionBudget: drains wait while it allows no disruption"
        " (reason disruption-budget; repeatable; in the environment separate budgets with"
        " ';'). The agent reads that budget alone, with the Role of"
        " daemonset/components/disruption-budgets in its namespace (docs/install.md); not with"
        " --api-socket (the node's identity reads no budget)",
        repeatable=True,
    ),
)


def _budget(text: str) -> ObjectRef:
    namespace, sep, name = text.strip().partition("/")
    if not sep or not is_namespace_name(namespace) or not is_namespace_name(name):
        raise SettingsError(
            f"invalid --disruption-budget {text!r} (expected NAMESPACE/NAME, each a DNS label)"
        )
    return ObjectRef(Watched.PODDISRUPTIONBUDGET, namespace, name)


def _build(settings: GuardSettings, raw: Mapping[str, object]) -> Guard | None:
    """On with ``--disruption-budget``; refused through the node proxy (no account of its own
    to read a budget with)."""
    texts = raw["disruption_budget"]
    if texts is None:
        return None
    assert isinstance(texts, list)
    if settings.through_node_proxy:
        raise SettingsError(
            "--disruption-budget needs the agent's own account: through --api-socket it has"
            " the node's identity, which may read no PodDisruptionBudget"
        )
    return DisruptionBudgetGuard(dict.fromkeys(_budget(str(t)) for t in texts))


def _releases_when(detail: str, _until: datetime | None) -> str:
    now = f" (now: {detail})" if detail else ""
    return (
        f"{Reason.DISRUPTION_BUDGET}: when every budget named allows a disruption again (its"
        f" pods healthy above its minimum) or is deleted{now}"
    )


KIND = GuardKind(Reason.DISRUPTION_BUDGET, _releases_when, _build, OPTIONS)
