"""Where the agent's start-up time goes: imports (``-X importtime``) and cProfile to ready.

Runs ``python -X importtime -m cProfile -o PROFILE -m drain_guard run ...`` against the simulator,
with the interpreter and ``ENV`` of ``--variant`` (``deployed``: the image's tree and flags,
``benchmarks/deployed.py``), waits for the first ``/readyz`` 200, stops the agent with SIGTERM (a
clean exit writes the profile), and reports the slowest top-level imports (and the agent's own
modules, ``drain_guard.*``) and the functions with the largest cumulative time.

``python -m benchmarks.startup_profile [--top N] [--variant V]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pstats
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import deployed
from benchmarks.common import IMAGE_A, seconds_to_ready, seed_api, stop_agent, write_result
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess, agent_user, clean_environment, run_args

NODE = "worker-0"


def agent_import_ms(lines: Sequence[str]) -> float:
    """The agent's whole import in ms: its top-level imports (``drain_guard``, its ``cli``, and
    what the command imports when it runs, ``drain_guard.programs.runner``), each with what it
    imported."""
    total = 0.0
    for line in lines:
        parts = line.removeprefix("import time:").split("|")
        if not line.startswith("import time:") or len(parts) != 3:
            continue
        name = parts[2].rstrip()
        top_level = len(name) - len(name.lstrip()) <= 1  # nested imports are indented by two
        if top_level and name.strip().startswith("drain_guard") and parts[1].strip().isdigit():
            total += int(parts[1]) / 1000.0
    return total


def parse_importtime(lines: Sequence[str]) -> dict[str, float]:
    """Cumulative import time in ms of each package, where it was first imported.

    A package's figure includes what it imported first itself (kubernetes_asyncio's includes
    its models), so the figures overlap; see :func:`agent_import_ms` for the agent's whole.
    """
    out: dict[str, float] = {}
    for line in lines:
        if not line.startswith("import time:"):
            continue
        parts = line.removeprefix("import time:").split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue  # the header line
        name = parts[2].strip()
        if ("." not in name or name.startswith("drain_guard.")) and name not in out:
            out[name] = int(parts[1]) / 1000.0
    return out


async def measure(top: int, how: deployed.Agent, workdir: Path) -> dict[str, Any]:
    profile = workdir / "agent.prof"
    async with SimApiServer() as api:
        seed_api(api, [NODE])
        host = HostFS(workdir / "host", IMAGE_A)
        kubeconfig = api.kubeconfig(agent_user(NODE), workdir / "kubeconfig")
        proc = await asyncio.create_subprocess_exec(
            how.python,
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
            env={**clean_environment(), **how.env},
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
        "variant": how.variant,
        "start_to_ready_s_under_profiler": round(ready, 3),
        "top_imports_ms": dict(sorted(imports.items(), key=lambda kv: -kv[1])[:top]),
        "agent_import_ms": round(agent_import_ms(agent.lines), 1),
        "agent_import_share_of_start": round(agent_import_ms(agent.lines) / 1000.0 / ready, 3),
        "top_cumulative_outside_imports": [
            {"function": name, "cumulative_s": round(ct, 3), "calls": n}
            for ct, name, n in rows[:top]
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.startup_profile", description=__doc__
    )
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--variant", choices=deployed.VARIANTS, default="deployed")
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        tree = deployed.tree_for([a.variant], Path(tmp))
        result = asyncio.run(measure(a.top, deployed.agent(a.variant, tree), Path(tmp)))
    with contextlib.suppress(BrokenPipeError):
        print(result)
    print(f"wrote {write_result('startup_profile', result, a.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
