"""Soak: the agent's resident memory over many holds, run as the image runs it.

``drain_guard_sim.harness.chaos.run_soak`` feeds one agent ten events per hold (pod churn, Node
label updates, a build pod and a drain request it must hold, the pod's deletion and the release it
must write; each hold and release waited for), and samples its RSS and open descriptors. Here
the agent is ``--variant`` (``deployed``: the image's tree and ``ENV``, ``benchmarks/deployed.py``),
with ``--env NAME=VALUE`` added to its environment for experiments (``PYTHONMALLOC=malloc``,
``MALLOC_ARENA_MAX=2``). Reported: RSS after the first ``--warmup-holds`` holds, at the end,
and the growth between, in all and per 1,000 holds.

``python -m benchmarks.soak [--holds 10000] [--samples 40] [--variant V] [--env NAME=VALUE]``
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import deployed
from benchmarks.common import write_result
from drain_guard_sim.harness.chaos import run_soak

MIB = 2**20
EVENTS_PER_HOLD = 10


async def measure(
    holds: int, samples: int, warmup: int, how: deployed.Agent, extra_env: dict[str, str]
) -> dict[str, Any]:
    report = await run_soak(
        holds * EVENTS_PER_HOLD, samples, program=how.program, env={**how.env, **extra_env}
    )
    rows = [
        {"holds": n // EVENTS_PER_HOLD, "rss_mib": round(rss / MIB, 2), "fds": fds}
        for n, rss, fds in report.samples
    ]
    after = [r for r in rows if r["holds"] >= warmup]
    base = after[0] if after else rows[0]
    end = rows[-1]
    span = max(1, end["holds"] - base["holds"])
    return {
        "variant": how.variant,
        "extra_env": extra_env,
        "holds": holds,
        "seconds": round(report.seconds, 1),
        "agent_writes": report.agent_writes,
        "rss_mib_first": rows[0]["rss_mib"],
        "rss_mib_after_warmup": base["rss_mib"],
        "rss_mib_end": end["rss_mib"],
        "rss_mib_peak": max(r["rss_mib"] for r in rows),
        "growth_after_warmup_mib": round(end["rss_mib"] - base["rss_mib"], 2),
        "growth_kib_per_1000_holds": round(
            (end["rss_mib"] - base["rss_mib"]) * 1024 * 1000 / span, 1
        ),
        "fds_max": max(r["fds"] for r in rows),
        "samples": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.soak", description=__doc__
    )
    p.add_argument("--holds", type=int, default=10_000)
    p.add_argument("--samples", type=int, default=40)
    p.add_argument("--warmup-holds", type=int, default=1000)
    p.add_argument("--variant", choices=deployed.VARIANTS, default="deployed")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    extra = dict(item.split("=", 1) for item in a.env)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        how = deployed.agent(a.variant, deployed.tree_for([a.variant], Path(tmp)))
        result = asyncio.run(measure(a.holds, a.samples, a.warmup_holds, how, extra))
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(summary, flush=True)
    print(f"wrote {write_result('soak', result, a.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
