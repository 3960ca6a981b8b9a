"""Where a hold's time goes: the agent under pyinstrument over ``--requests`` drain requests.

Runs ``python -m pyinstrument -m drain_guard run ...`` (this environment: pyinstrument, in
the ``bench`` extra, is not in the image) against the simulator,
makes ``--requests`` reaction cycles as ``benchmarks.reaction`` does (request on an idle node,
hold, back to idle), stops it with SIGTERM (a clean exit writes the profile) and keeps
pyinstrument's text report of the agent's process (``benchmarks/results/holdprofile.txt``) and
the reactions measured meanwhile (under the profiler: slower than without it).

``python -m benchmarks.holdprofile [--requests N] [--interval S]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import deployed
from benchmarks.common import (
    RESULTS_DIR,
    seconds_to_ready,
    seed_api,
    start_agent,
    stop_agent,
    summary_ms,
    write_result,
)
from benchmarks.reaction import AGENT_NODE, Mcd, cycle
from drain_guard_sim.apiserver.server import SimApiServer


async def measure(requests: int, interval: float, report: Path, workdir: Path) -> dict[str, Any]:
    # Not the image's ENV: this environment has no bytecode compiled ahead at -O2, and
    # compiling every module at start would keep it from ready for minutes on a loaded machine.
    env = {"PYTHONUNBUFFERED": "1"}
    program = (
        *(sys.executable, "-m", "pyinstrument", "--interval", str(interval)),
        *("-r", "text", "-o", str(report), "-m", "drain_guard"),
    )
    how = deployed.Agent("development+pyinstrument", sys.executable, program, env)
    async with SimApiServer() as api:
        seed_api(api, [AGENT_NODE])
        agent = await start_agent(api, AGENT_NODE, workdir, agent=how)
        mcd = Mcd(api)
        try:
            await seconds_to_ready(agent, timeout=120.0)
            samples = [await cycle(api, mcd, AGENT_NODE, i) for i in range(requests)]
        finally:
            await mcd.close()
            await stop_agent(agent)
    return {
        "requests": requests,
        "interval_s": interval,
        "reaction_under_profiler": summary_ms(samples),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.holdprofile", description=__doc__
    )
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--interval", type=float, default=0.0005, help="sampling interval, seconds")
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    out = a.out or RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    report = out / "holdprofile.txt"
    with tempfile.TemporaryDirectory(prefix="bench-holdprofile-") as tmp:
        result = asyncio.run(measure(a.requests, a.interval, report, Path(tmp)))
    print(result)
    print(f"wrote {write_result('holdprofile', result, a.out)} and {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
