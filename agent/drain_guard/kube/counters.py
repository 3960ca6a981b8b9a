"""Where the API client reports what it sees: health.Health in every program."""

from __future__ import annotations

from typing import Protocol

from drain_guard.core.operations import Operation, Watched
from drain_guard.core.watchstatus import WatchStatus


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


class Relay:
    """Counters that pass every report on to ``counters``: a subclass changes only what it
    must (a watch group's member its watch state, the shield's namespace watch its 403s)."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters

    def api_error(self, operation: Operation, status: int) -> None:
        self.counters.api_error(operation, status)

    def api_contact(self) -> None:
        self.counters.api_contact()

    def watch_restart(self, resource: Watched, reason: str) -> None:
        self.counters.watch_restart(resource, reason)

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        self.counters.watch_state(resource, state)

    def credentials_read(self, identity: str) -> None:
        self.counters.credentials_read(identity)

    def credentials_refused(self, identity: str, refused: bool) -> None:
        self.counters.credentials_refused(identity, refused)


class WatchGroup:
    """Several watches of one resource seen as one in ``/status``, ``/readyz`` and the
    metrics (the agent's pod watch and those of its blocking-pod namespaces; the central
    shield's pod watches, one per selector): listed and watching only when each is, failing
    since the earliest. Without it the last watch to report would hide another's failure."""

    def __init__(self, counters: Counters, size: int) -> None:
        self.counters = counters
        self.states = [WatchStatus() for _ in range(size)]

    def member(self, index: int) -> Counters:
        """The Counters that the ``index``-th watch of the group reports to."""
        return _GroupMember(self, index)


class _GroupMember(Relay):
    def __init__(self, group: WatchGroup, index: int) -> None:
        super().__init__(group.counters)
        self.group = group
        self.index = index

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        self.group.states[self.index] = state
        self.counters.watch_state(resource, WatchStatus.of_all(self.group.states))
