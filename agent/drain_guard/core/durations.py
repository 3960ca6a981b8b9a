"""Durations for humans (pure): ``1h02m``, ``12m05s``, in logs, ``/status`` and the CLI.

Not the flags' spelling (``config.values.format_duration``).
"""

from __future__ import annotations

from datetime import timedelta


def format_duration(delta: timedelta) -> str:
    """``3d04h`` (from 48 hours), ``1h02m``, ``12m05s``, ``7s``: short, for humans."""
    seconds = max(0, int(delta.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 48:
        return f"{hours // 24}d{hours % 24:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
