"""Where the API client reports what it sees: health.Health in every program."""

from __future__ import annotations

from typing import Protocol

from drain_guard.health import WatchStatus
from drain_guard.kube.operations import Operation, Watched


class Counters(Protocol):
    """Where the API client reports errors, contact, watch restarts and watch states."""

    def api_error(self, operation: Operation, status: int) -> None: ...

    def api_contact(self) -> None: ...

    def watch_restart(self, resource: Watched, reason: str) -> None: ...

    def watch_state(self, resource: Watched, state: WatchStatus) -> None: ...

    def credentials_read(self, identity: str) -> None: ...

    def credentials_refused(self, identity: str, refused: bool) -> None: ...


class NullCounters:
    """Counters for callers without metrics (the CLI)."""

    def api_error(self, operation: Operation, status: int) -> None:
        return None

    def api_contact(self) -> None:
        return None

    def watch_restart(self, resource: Watched, reason: str) -> None:
        return None

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        return None

    def credentials_read(self, identity: str) -> None:
        return None

    def credentials_refused(self, identity: str, refused: bool) -> None:
        return None
