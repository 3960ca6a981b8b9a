"""Where the agent's start-up time goes: imports (``-X importtime``) and cProfile to ready.

Runs ``python -X importtime -m cProfile -o PROFILE -m drain_guard run ...`` against the simulator,
waits for the first ``/readyz`` 200, stops the agent with SIGTERM (a clean exit writes the
profile), and reports the slowest top-level imports and the functions with the largest
cumulative time.

``python -m benchmarks.startup_profile [--top N]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pstats
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import IMAGE_A, seconds_to_ready, seed_api, stop_agent, write_result
from drain_guard_sim.agentproc import AgentProcess, agent_user, clean_environment, run_args
from drain_guard_sim.apiserver import SimApiServer
from drain_guard_sim.hostfs import HostFS

NODE = "worker-0"


def parse_importtime(lines: Sequence[str]) -> dict[str, float]:
    """Cumulative import time in ms of each package, where it was first imported.

    A package's figure includes what it imported first itself (kubernetes_asyncio's includes
    its models), so the figures overlap; ``drain_guard.cli`` is the agent's whole import.
    """
    out: dict[str, float] = {}
    for line in lines:
        if not line.startswith("import time:"):
            continue
        parts = line.removeprefix("import time:").split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue  # the header line
        name = parts[2].strip()
        if ("." not in name or name.startswith("agent.")) and name not in out:
            out[name] = int(parts[1]) / 1000.0
    return out


async def measure(top: int, workdir: Path) -> dict[str, Any]:
    profile = workdir / "agent.prof"
    async with SimApiServer() as api:
        seed_api(api, [NODE])
        host = HostFS(workdir / "host", IMAGE_A)
        kubeconfig = api.kubeconfig(agent_user(NODE), workdir / "kubeconfig")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "cProfile",
            "-o",
            str(profile),
            "-m",
            "drain_guard",
            *run_args(NODE, kubeconfig, host, "--log-format", "json"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=clean_environment(),
        )
        agent = AgentProcess.attach(NODE, proc)
        ready = await seconds_to_ready(agent)
        await stop_agent(agent)
    imports = parse_importtime(agent.lines)
    stats = pstats.Stats(str(profile))
    rows = []
    for (filename, lineno, func), (_, ncalls, _tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        # Past the imports: the import machinery and module bodies are in top_imports_ms.
        if filename.startswith("<") or filename == "~" or func == "<module>":
            continue
        rows.append(
            (ct, f"{Path(filename).parent.name}/{Path(filename).name}:{lineno}({func})", ncalls)
        )
    rows.sort(reverse=True)
    return {
        "start_to_ready_s_under_profiler": round(ready, 3),
        "top_imports_ms": dict(sorted(imports.items(), key=lambda kv: -kv[1])[:top]),
        # drain_guard.cli imports the whole agent: its cumulative import time against the total.
        "agent_import_share_of_start": round(
            imports.get("drain_guard.cli", 0.0) / 1000.0 / ready, 3
        ),
        "top_cumulative_outside_imports": [
            {"function": name, "cumulative_s": round(ct, 3), "calls": n}
            for ct, name, n in rows[:top]
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.startup_profile", description=__doc__)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        result = asyncio.run(measure(a.top, Path(tmp)))
    with contextlib.suppress(BrokenPipeError):
        print(result)
    print(f"wrote {write_result('startup_profile', result, a.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
