"""What the controller talks to, as protocols a test can stand in for: the Node's reads and
compare-and-swap writes (``kube.Kube``), and the clock.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from drain_guard.core.nodes import NodeObj
from drain_guard.kube.client import PatchResult


class NodeApi(Protocol):
    """The Node reads and compare-and-swap writes of the loop (``kube.Kube``)."""

    async def get_node(self, name: str) -> NodeObj | None: ...

    async def patch_node_json(self, name: str, ops: Sequence[Mapping[str, Any]]) -> PatchResult: ...


class Clock(Protocol):
    """The time, as the loop reads it: tests inject their own."""

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The wall clock (aware UTC) and the monotonic clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()
