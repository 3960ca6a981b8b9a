"""Several agents in one process, for the fleet and API-load benchmarks.

Each agent is assembled from the same parts as ``drain_guard.programs.runner`` (``_Agent.start``):
its own ``Metrics`` registry, its own ``Kube`` (kubernetes_asyncio ``ApiClient``, so its own
connection pool and identity), its own ``EventRecorder`` and ``Controller``, and the node and pod
list-watches. They share only the interpreter and the event loop, which a real deployment does not
share; nothing they send to the API depends on it. Left out: the HTTP server (not an API client) and
the life-cycle (drain_guard.runtime.lifecycle: signals, the exit-time release).

``watch_timeout`` is the ``timeoutSeconds`` the agent asks for on its watches (the agent's
default is 300 s); the API-load benchmark shortens it together with the simulator's bookmark
interval to compress time.

Run as a host process (``python -m benchmarks.inproc SPEC.json``): starts the agents listed
in the spec, prints ``ready <n>`` on stdout once every agent's watches have listed, and runs
until its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drain_guard.cli import build_parser
from drain_guard.config.values import LogFormat
from drain_guard.kube.client import Kube
from drain_guard.kube.listwatch import WATCH_TIMEOUT, WatchCache
from drain_guard.node.controller import Controller, pod_watch_namespace
from drain_guard.node.events import EventQueue, EventRecorder
from drain_guard.programs.runner import make_shield
from drain_guard.runtime.health import Health
from drain_guard.runtime.logs import configure_logging
from drain_guard.runtime.metrics import Metrics
from drain_guard.settings.agent import settings_from

REPO_ROOT = Path(__file__).resolve().parent.parent
AGENT_WATCH_TIMEOUT = WATCH_TIMEOUT  # seconds: the timeoutSeconds the agent asks for


@dataclass(frozen=True)
class AgentSpec:
    node: str
    kubeconfig: str
    host_root: str
    cmdline_file: str

    def argv(self) -> list[str]:
        return [
            "run",
            "--node-name",
            self.node,
            "--kubeconfig",
            self.kubeconfig,
            "--host-root",
            self.host_root,
            "--cmdline-file",
            self.cmdline_file,
        ]


class InProcessAgent:
    """One agent's components and tasks, sharing nothing with the others but the loop."""

    def __init__(self, spec: AgentSpec, watch_timeout: int) -> None:
        self.spec = spec
        self.watch_timeout = watch_timeout
        self.settings = settings_from(build_parser().parse_args(spec.argv()), {})
        self.controller: Controller | None = None
        self.kube: Kube | None = None
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        metrics = Metrics()
        counters = Health(metrics)
        self.kube = kube = await Kube.connect(self.settings.kubeconfig, counters)
        events = EventQueue(EventRecorder(kube, self.settings.node_name, metrics=metrics))
        node = self.settings.node_name
        # The shield as ``drain-guard run`` starts it (on by default): its watches are load too.
        cache = WatchCache()
        shield = make_shield(self.settings, kube, metrics, cache, self.watch_timeout)
        self.controller = c = Controller(
            self.settings, kube, metrics, counters, events, cache, shield
        )
        namespace = pod_watch_namespace(self.settings)
        self.tasks = [
            asyncio.create_task(kube.watch_node(node, cache, self.watch_timeout)),
            asyncio.create_task(kube.watch_pods(node, cache, namespace, self.watch_timeout)),
            asyncio.create_task(c.run()),
            asyncio.create_task(events.run()),
        ]
        if shield is not None:
            self.tasks.append(asyncio.create_task(shield.run()))

    def ready(self) -> bool:
        return self.controller is not None and self.controller.ready()[0]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.kube is not None:
            await self.kube.close()


async def run_host(specs: Sequence[AgentSpec], watch_timeout: int) -> None:
    """Start the agents, report readiness on stdout, run until stdin closes."""
    agents = [InProcessAgent(s, watch_timeout) for s in specs]
    await asyncio.gather(*(a.start() for a in agents))
    loop = asyncio.get_running_loop()
    # Readiness is the controllers' state, with no event of its own to wait on (the watch
    # cache's event belongs to each controller's loop, which clears it).
    while not all(a.ready() for a in agents):  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    print(f"ready {len(agents)}", flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    with contextlib.suppress(ConnectionError):
        await reader.read()  # EOF: the benchmark is done with us
    await asyncio.gather(*(a.stop() for a in agents))


def write_spec(path: Path, specs: Sequence[AgentSpec], watch_timeout: int) -> Path:
    doc: dict[str, Any] = {
        "watch_timeout": watch_timeout,
        "agents": [s.__dict__ for s in specs],
    }
    path.write_text(json.dumps(doc))
    return path


@dataclass
class AgentHost:
    """A ``python -m benchmarks.inproc`` process seen from the benchmark."""

    proc: asyncio.subprocess.Process
    agents: int

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            async with asyncio.timeout(60):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def start_hosts(
    groups: Sequence[Sequence[AgentSpec]],
    workdir: Path,
    watch_timeout: int = AGENT_WATCH_TIMEOUT,
    timeout: float = 300.0,  # noqa: ASYNC109
) -> list[AgentHost]:
    """One host process per group of agents; returns once every agent is ready."""
    hosts = []
    for n, group in enumerate(groups):
        spec = write_spec(workdir / f"agents-{n}.json", group, watch_timeout)
        with (workdir / f"agents-{n}.log").open("wb") as log_file:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "benchmarks.inproc",
                str(spec),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_file,
                cwd=REPO_ROOT,  # benchmarks/ is not installed; -m finds it from here
            )
        hosts.append(AgentHost(proc, len(group)))
    async with asyncio.timeout(timeout):
        for host in hosts:
            assert host.proc.stdout is not None
            line = (await host.proc.stdout.readline()).decode().strip()
            if line != f"ready {host.agents}":
                raise RuntimeError(f"agent host {host.pid} did not get ready: {line!r}")
    return hosts


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.inproc", description=__doc__
    )
    p.add_argument("spec", type=Path)
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args(argv)
    doc = json.loads(a.spec.read_text())
    configure_logging(LogFormat.JSON, a.log_level)
    logging.getLogger("aiohttp").setLevel(logging.ERROR)
    specs = [AgentSpec(**s) for s in doc["agents"]]
    asyncio.run(run_host(specs, int(doc["watch_timeout"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
