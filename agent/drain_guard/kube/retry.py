"""Retrying: backoff with jitter, and how a run of failures is logged and counted."""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from drain_guard.core.durations import format_duration
from drain_guard.kube.call import API_FAILURES, KubeError, StreamError, describe
from drain_guard.protocol import format_rfc3339


@dataclass
class Backoff:
    """Exponential backoff with full jitter; reset after any success."""

    base: float = 0.5
    cap: float = 30.0
    attempt: int = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        self.attempt += 1
        if retry_after is not None:
            return min(max(retry_after, 0.0), 120.0)
        # Equal jitter: spread out, yet never an immediate retry ("retrying in 0.0s").
        step = min(self.cap, self.base * 2 ** (self.attempt - 1))
        return float(step / 2 + random.uniform(0, step / 2))

    def reset(self) -> None:
        self.attempt = 0


#: While a run of failures lasts, a WARNING says so again this often (seconds).
OUTAGE_REMINDER = 300.0
_ERROR_TYPE = re.compile(r"\b(\w*(?:Error|Exception|Timeout)\w*):")
#: How kube-apiserver names an admission webhook that failed or denied a request.
_WEBHOOK = re.compile(r'(?:failed calling|admission) webhook \\?"([^"\\]+)\\?"')


def webhook_of(why: str) -> str | None:
    """The admission webhook the API server blames for a failed request, if it names one."""
    found = _WEBHOOK.search(why)
    return found.group(1) if found else None


def failure_kind(exc: BaseException) -> str:
    """What kind of failure ``exc`` is: its HTTP status, else the transport error's type (a
    refused connection and a refused certificate are different problems for the operator)."""
    status = getattr(exc, "status", 0)
    if status:
        return f"HTTP {status}"
    if isinstance(exc, KubeError):
        found = _ERROR_TYPE.search(exc.reason)
        return found.group(1) if found else exc.reason
    return type(exc).__name__


class Outage:
    """A run of failures of one part of the agent (a watch, the controller's pass, the
    shield's pass), logged when it begins, when the kind of failure changes (the API came back
    with another CA: unreachable becomes a certificate error), every ``OUTAGE_REMINDER``
    seconds while it lasts, and when it ends; other retries are DEBUG lines, and each is a count
    in the metrics (``count``).

    A failure that is not the API's (an ``OSError`` out of descriptors, a bug) is retried the
    same way: one failed step never ends the agent. Its first line carries the traceback.
    """

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        count: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.logger = logger
        self.count = count
        self.clock = clock
        #: When the run began (wall clock, monotonic), None while the calls work.
        self._since: tuple[datetime, float] | None = None
        #: The kind of the latest failure (failure_kind) and when a WARNING last said so.
        self._kind = ""
        self._said_at = 0.0
        #: How the log names the current run: ("API unreachable", "API reachable again").
        self._words = ("", "")
        self._retries = 0
        #: The latest failure, while failing.
        self.error: str | None = None

    @property
    def since(self) -> datetime | None:
        """When the current run of failures began; None while the calls work."""
        return None if self._since is None else self._since[0]

    def failed(self, action: str, exc: BaseException, delay: float) -> None:
        """``action`` failed with ``exc``; the caller retries in ``delay`` seconds."""
        why = str(exc) if isinstance(exc, KubeError | StreamError) else describe(exc)
        status = getattr(exc, "status", 0)
        ours = not isinstance(exc, (*API_FAILURES, StreamError, ValueError))
        self.error = why
        if self.count is not None:
            self.count()
        kind, at = failure_kind(exc), self.clock()
        webhook = webhook_of(why)
        if ours:
            words = ("failing", "working again")
        elif webhook is not None:
            # Admission is what fails, not the API server: say which webhook (issue 35).
            named = f"admission webhook {webhook}"
            if 400 <= status < 500:
                words = (f"{named} refusing it", f"{named} accepting it again")
            else:
                words = (f"{named} failing", f"{named} answering again")
        elif status == 0 or status >= 500:
            words = ("API unreachable", "API reachable again")
        else:
            words = ("API refusing it", "API accepting it again")
        if self._since is not None:
            self._retries += 1
            since, start = self._since
            changed, self._kind = kind != self._kind, kind
            if changed:
                self._words = words
            if not changed and at - self._said_at < OUTAGE_REMINDER:
                self.logger.debug(
                    "%s: %s failed again (%s); retry in %.1fs", self.what, action, why, delay
                )
                return
            self._said_at = at
            self.logger.warning(
                "%s: %s since %s (%s, %d retries); %s %s failed: %s",
                self.what,
                self._words[0],
                format_rfc3339(since),
                format_duration(timedelta(seconds=at - start)),
                self._retries,
                "now" if changed else "still:",
                action,
                why,
            )
            return
        now = datetime.now(UTC)
        self._since, self._retries = (now, at), 1
        self._kind, self._said_at, self._words = kind, at, words
        self.logger.warning(
            "%s: %s since %s (%s failed: %s); retrying in %.1fs, then with backoff",
            self.what,
            self._words[0],
            format_rfc3339(now),
            action,
            why,
            delay,
            exc_info=exc if ours else None,
        )

    def ended(self) -> None:
        """The API answered: log the end of a run of failures, once."""
        if self._since is None:
            return
        since, start = self._since
        self._since, self.error = None, None
        self.logger.warning(
            "%s: %s after %s (failing since %s, %d retries)",
            self.what,
            self._words[1],
            format_duration(timedelta(seconds=self.clock() - start)),
            format_rfc3339(since),
            self._retries,
        )
