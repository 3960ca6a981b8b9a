"""The guard registry: every reason has one guard, each says what releases its hold, and the
agent's settings turn on the guards they name (docs/architecture.md, "Where a change goes")."""

from __future__ import annotations

import pkgutil
import re
from datetime import UTC, datetime
from pathlib import Path

from drain_guard import guards
from drain_guard.guards import registry
from drain_guard.protocol import Reason
from tests.helpers import agent_guards

PROTOCOL_MD = Path(__file__).parents[2] / "docs" / "protocol.md"
UNTIL = datetime(2026, 3, 1, 14, 0, 0, tzinfo=UTC)


def test_every_reason_has_one_guard_in_the_registry() -> None:
    reasons = [kind.reason for kind in registry.KINDS]
    assert sorted(reasons) == sorted(Reason)


def test_every_guard_module_is_registered() -> None:
    """A guard module left out of the registry would never run: each module of ``guards/``
    but the shared ones declares a ``KIND`` that the registry lists."""
    shared = {"base", "registry"}
    names = {m.name for m in pkgutil.iter_modules(guards.__path__)} - shared
    modules = [__import__(f"drain_guard.guards.{name}", fromlist=["KIND"]) for name in names]
    assert {m.KIND for m in modules} == set(registry.KINDS)


def test_every_guard_says_what_releases_its_hold() -> None:
    for kind in registry.KINDS:
        for detail in ("", "some detail"):
            line = kind.releases_when(detail, UNTIL)
            assert line.startswith(f"{kind.reason}: when "), line
            assert len(line) > len(f"{kind.reason}: when ") + 10, line


def test_every_guard_has_a_row_in_the_protocols_guards_table() -> None:
    text = PROTOCOL_MD.read_text()
    table = text[text.index("## Guards") :].split("\n\n")[1]
    rows = set(re.findall(r"^\| `([a-z-]+)`", table, re.MULTILINE))
    assert rows == {kind.reason.value for kind in registry.KINDS}


def test_a_reason_this_agent_does_not_know_says_so() -> None:
    line = registry.releases_when("disk-pressure", "whatever", None)
    assert line.startswith("disk-pressure: a reason this agent does not know")


def test_the_default_agent_runs_the_guards_that_need_no_flag_in_registry_order() -> None:
    reasons = [g.reason for g in agent_guards()]
    assert reasons == [Reason.BUILD_POD, Reason.NOOP_IMAGE, Reason.MANUAL, Reason.NODE_LABEL]


def test_flags_turn_on_the_optional_guards_in_registry_order() -> None:
    flags = (
        "--alert-url=https://q:9091",
        "--alert-filter=X",
        "--blocking-pod-selector=app=db",
        "--blocking-pod-namespace=db",
    )
    reasons = [g.reason for g in agent_guards(*flags)]
    order = [kind.reason for kind in registry.KINDS]
    assert reasons == sorted(reasons, key=order.index)
    assert Reason.ALERT in reasons
    assert Reason.BLOCKING_POD in reasons
