"""``python -m drain_guard_sim.harness.chaos run | soak``: many seeds' summary, one seed with
its schedule, or the soak's figures."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from drain_guard_sim.harness.chaos.run import ChaosReport, run_chaos
from drain_guard_sim.harness.chaos.schedule import ChaosConfig
from drain_guard_sim.harness.chaos.soak import run_soak


def _summary(reports: Sequence[ChaosReport]) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    for r in reports:
        faults.update(r.faults)
    return {
        "seeds": len(reports),
        "failed_seeds": [r.seed for r in reports if not r.ok],
        "stalled_seeds": [r.seed for r in reports if r.stalled],
        "stalled_by_mco": {r.seed: r.stalled_by_mco for r in reports if r.stalled_by_mco},
        "violations": sum(len(r.checked.violations) for r in reports),
        "actions_by_kind": dict(sorted(faults.items())),
        "requests_hit_by_kind": dict(
            sorted(sum((r.fired for r in reports), Counter[str]()).items())
        ),
        "mcd_requests": sum(r.checked.requests for r in reports),
        "holds": sum(r.checked.holds for r in reports),
        "releases": sum(r.checked.releases for r in reports),
        "race_lost_releases": sum(r.checked.race_lost_releases for r in reports),
        "superseded_by_mcd": sum(r.checked.supersedes for r in reports),
        "build_pod_evictions": sum(r.checked.build_pod_evictions for r in reports),
        "evictions_excused": dict(
            sum((r.checked.evictions_excused for r in reports), Counter[str]())
        ),
        "agent_starts": sum(r.agent_starts for r in reports),
        "writes": sum(r.writes for r in reports),
        "seconds": round(sum(r.seconds for r in reports), 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m drain_guard_sim.harness.chaos"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", allow_abbrev=False, help="chaos runs; prints a JSON summary")
    run.add_argument("--seeds", type=int, default=1)
    run.add_argument("--first", type=int, default=1)
    run.add_argument("--seed", type=int, default=None, help="one seed, schedule printed")
    soak = sub.add_parser("soak", allow_abbrev=False, help="agent RSS and fds over many events")
    soak.add_argument("--events", type=int, default=5000)
    soak.add_argument("--samples", type=int, default=20)
    args = parser.parse_args(argv)
    # The simulator's server logs every watch a cut or a stop breaks; that is the chaos.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    if args.command == "soak":
        soaked = asyncio.run(run_soak(args.events, args.samples))
        print(soaked.summary())
        for n, rss, fds in soaked.samples:
            print(f"  {n:6d} events  rss {rss / 2**20:6.1f} MiB  fds {fds}")
        return 0
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    reports = []
    for seed in seeds:
        report = asyncio.run(run_chaos(ChaosConfig(seed=seed)))
        reports.append(report)
        state = "ok" if report.ok else "FAILED"
        print(f"seed {seed}: {state} ({report.seconds:.1f}s)", file=sys.stderr, flush=True)
        if state != "ok":
            print(report.failure_text(), flush=True)
        elif args.seed is not None:
            print("\n".join(map(str, report.schedule)))
    print(json.dumps(_summary(reports), indent=2))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        sys.exit(main())
