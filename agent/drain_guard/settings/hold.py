"""``drain-guard run``'s hold group: how long a hold may last, and whether the agent writes it
at all (``--observe-only``)."""

from __future__ import annotations

from datetime import timedelta

from drain_guard.config.options import Option, env_name

# The MCD gives up waiting for a drain after one hour (Degraded, FailedToDrain). A hold that
# long would turn "drain later" into "node degraded", and the drain itself needs time after
# the release, so holds of an hour or more are refused outright rather than merely warned.
MCD_DRAIN_TIMEOUT = timedelta(hours=1)

HOLD_OPTIONS: tuple[Option, ...] = (
    Option(
        "--max-hold",
        env_name("--max-hold"),
        "45m",
        "longest hold, e.g. 90s, 30m, 50m; must be below 1h (the MCD's drain timeout)",
    ),
    Option(
        "--observe-only",
        env_name("--observe-only"),
        None,
        "decide as usual but write nothing (no Node patch, no budget, no Event): report what"
        " would have been done in the log, /status and metrics, for a first rollout",
        boolean=True,
    ),
)
