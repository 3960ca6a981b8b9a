"""``python -m benchmarks``: every benchmark in turn with its default parameters.

Each writes ``benchmarks/results/<name>.json``; ``docs/benchmarks.md`` summarises them.
``python -m benchmarks reaction fleet`` runs only those named.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

from benchmarks import apiload, fleet, footprint, mcofanout, reaction, scrapeflood, shieldscale
from benchmarks.common import mark_start

BENCHMARKS: dict[str, Callable[[Sequence[str] | None], int]] = {
    "reaction": reaction.main,
    "footprint": footprint.main,
    "apiload": apiload.main,
    "fleet": fleet.main,
    "mcofanout": mcofanout.main,
    "scrapeflood": scrapeflood.main,
    "shieldscale": shieldscale.main,
}


def main(argv: Sequence[str] | None = None) -> int:
    names = list(argv if argv is not None else sys.argv[1:]) or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    for name in names:
        began = time.monotonic()
        print(f"== {name}", flush=True)
        mark_start()
        code = BENCHMARKS[name]([])
        print(f"== {name}: exit {code} in {time.monotonic() - began:.0f} s", flush=True)
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
