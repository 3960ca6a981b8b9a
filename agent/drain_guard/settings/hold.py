"""``drain-guard run``'s hold group: how long a hold may last, and whether the agent writes it
at all (``--observe-only``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from drain_guard.config.options import Option, SettingsGroup, env_name
from drain_guard.config.values import SettingsError, named, parse_duration

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


@dataclass(frozen=True)
class HoldSettings:
    """The longest hold (below :data:`MCD_DRAIN_TIMEOUT`), and whether holds are only decided
    and reported, never written (``--observe-only``)."""

    max_hold: timedelta
    observe_only: bool = False


def hold_settings(raw: Mapping[str, object]) -> HoldSettings:
    max_hold = named("--max-hold", parse_duration, str(raw["max_hold"]))
    if max_hold <= timedelta(0):
        raise SettingsError("--max-hold must be greater than 0")
    if max_hold >= MCD_DRAIN_TIMEOUT:
        raise SettingsError(
            f"--max-hold {raw['max_hold']} is not below 1h: the MCD marks the node Degraded"
            " after waiting 1h for a drain"
        )
    return HoldSettings(max_hold, bool(raw["observe_only"]))


def default_max_hold() -> timedelta:
    """``--max-hold``'s default, defined once in :data:`HOLD_OPTIONS`; ``drain-guard demo``
    hands it to the simulator's demo, which cannot import the agent."""
    default = next(opt.default for opt in HOLD_OPTIONS if opt.flag == "--max-hold")
    assert default is not None
    return parse_duration(default)


HOLD = SettingsGroup("hold", HOLD_OPTIONS, hold_settings)
