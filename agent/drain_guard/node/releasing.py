"""A release that fails is escalated: a hold must not outlive max-hold for want of it.

The pass that writes a release and fails is retried with the pass; from the first failure on,
``/status`` (``releaseFailing``) and ``drain_guard_release_failing_since_timestamp_seconds``
say so (``DrainGuardReleaseFailing`` fires after 2 minutes), until a pass succeeds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from drain_guard import protocol
from drain_guard.decision import decisions, holds
from drain_guard.kube.call import KubeError
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.status.parts import ReleaseFailingStatus

#: The controller's log: the escalation is the loop's to tell.
log = logging.getLogger("drain_guard.node.controller")


class ReleaseEscalation:
    """The release this pass is writing, and the one that has failed since."""

    def __init__(self, metrics: Metrics, node_name: str, now: Callable[[], datetime]) -> None:
        self.metrics = metrics
        self.node_name = node_name
        self.now = now
        #: The release the current pass writes (None: it writes none).
        self.releasing: decisions.Release | None = None
        #: The release that has failed since, as /status shows it.
        self.failing: ReleaseFailingStatus | None = None

    def failed(self, exc: Exception, memory: holds.Memory) -> holds.Memory:
        """The pass failed while writing a release: it is retried with the pass, and from the
        first failure on, /status and ``drain_guard_release_failing_since_timestamp_seconds``
        say so (``DrainGuardReleaseFailing`` fires after 2 minutes). Returns ``memory``, with
        the release attempted when it may have committed."""
        release = self.releasing
        if release is None:
            return memory
        if isinstance(exc, KubeError) and (exc.status == 0 or exc.status >= 500):
            # No answer, or the server's own failure (an etcd freeze's 504): the release may
            # still be committed; if the hold then ends just so, it ended by this release.
            memory = holds.attempted(memory, release)
        failing = self.failing
        if failing is None or failing.request != release.original:
            failing = ReleaseFailingStatus(
                release.original, release.outcome.value, self.now(), 0, ""
            )
            self.metrics.set_release_failing(failing.since)
            log.warning(
                "release of %s (%s) failed; retried until it lands: %s",
                release.original,
                release.outcome.value,
                exc,
                extra={"fields": {"node": self.node_name, "request": release.original}},
            )
        self.failing = replace(
            failing,
            outcome=release.outcome.value,
            attempts=failing.attempts + 1,
            error=str(exc) or type(exc).__name__,
        )
        return memory

    def landed(self) -> None:
        """A pass succeeded: the failing release landed, or is no longer needed."""
        failing = self.failing
        if failing is None:
            return
        self.failing = None
        self.metrics.set_release_failing(None)
        log.warning(
            "release of %s no longer failing after %d failed attempts since %s",
            failing.request,
            failing.attempts,
            protocol.format_rfc3339(failing.since),
            extra={"fields": {"node": self.node_name, "request": failing.request}},
        )
