"""Time intervals, as the checker and the chaos harness count an agent's up, synced and
unimpaired time: sorted lists of disjoint (start, end) pairs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Interval = tuple[float, float]


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Intersection of two sorted lists of disjoint intervals."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def longest(intervals: Iterable[Interval]) -> float:
    return max((hi - lo for lo, hi in intervals), default=0.0)


def normalise(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for lo, hi in sorted(intervals):
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
