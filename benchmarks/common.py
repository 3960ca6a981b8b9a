"""Shared pieces of the benchmarks: the simulated node, the agent process, statistics, results.

Every benchmark drives the real agent (``python -m drain_guard run``, or the same components in
process for the fleet) through the real kubernetes_asyncio client over loopback HTTP against
``SimApiServer``. Timings come from the simulator's write log (``WriteRecord.time``, monotonic
in the simulator's process), so the client, the network stack and the agent's own loop are all
inside what is measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from benchmarks import deployed
from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.writelog import WriteRecord
from drain_guard_sim.harness.agentproc import AgentProcess, agent_user, spawn_agent
from drain_guard_sim.harness.seedobjects import worker_node

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MCD_USER = "system:serviceaccount:openshift-machine-config-operator:machine-config-daemon"
MCO_NS = "openshift-machine-config-operator"
REGISTRY = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator"
IMAGE_A = f"{REGISTRY}/ocb-image@sha256:{'a' * 64}"
IMAGE_B = f"{REGISTRY}/ocb-image@sha256:{'b' * 64}"
CONFIG_A = "rendered-worker-" + "a" * 32
WAIT = 30.0  # seconds: upper bound of one event-driven wait on a loaded machine
#: The 1-minute load average when this benchmark began (``mark_start``; first at import).
_START_LOAD = {"1m": os.getloadavg()[0]}


def config_name(i: int) -> str:
    """A rendered config name unique to request ``i`` (as MCO's hash-suffixed names are)."""
    return f"rendered-worker-{i:032x}"


def seed_api(api: SimApiServer, nodes: Sequence[str]) -> None:
    """Namespaces and the given Nodes, created in process (no HTTP)."""
    for ns in (MCO_NS, "drain-guard", "default"):
        if api.try_get("namespaces", ns) is None:
            api.create("namespaces", {"metadata": {"name": ns}})
    for name in nodes:
        api.create("nodes", worker_node(name, CONFIG_A, IMAGE_A))


def mcd_request_patch(value: str, **extra: str) -> dict[str, Any]:
    """The MCD's strategic-merge patch of ``desiredDrain`` (no resourceVersion)."""
    return {"metadata": {"annotations": {protocol.DESIRED_DRAIN: value, **extra}}}


def reset_patch(config: str) -> dict[str, Any]:
    """What the node looks like after the update finished: uncordoned, no hold, idle.

    A merge patch by an administrator identity; the benchmarks use it between trials so that
    every drain request meets an idle node, as a first request in a real rollout does.
    """
    annotations: dict[str, str | None] = {
        protocol.DESIRED_DRAIN: f"uncordon-{config}",
        protocol.LAST_APPLIED_DRAIN: f"uncordon-{config}",
    }
    for key in (*protocol.OWNED_KEYS, protocol.RELEASED):
        annotations[key] = None
    return {"metadata": {"annotations": annotations}, "spec": {"unschedulable": None}}


def is_hold_of(request: str) -> Callable[[WriteRecord], bool]:
    """Matches the write that committed a hold of ``request`` (desiredDrain = hold-<request>)."""
    held = protocol.HOLD_PREFIX + request

    def match(rec: WriteRecord) -> bool:
        if rec.resource != "nodes" or rec.after is None:
            return False
        ann = rec.after["metadata"].get("annotations") or {}
        before = ((rec.before or {}).get("metadata") or {}).get("annotations") or {}
        return bool(ann.get(protocol.DESIRED_DRAIN) == held != before.get(protocol.DESIRED_DRAIN))

    return match


# --- statistics -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): an observed value, never an interpolation."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(values: Sequence[float]) -> dict[str, float | int]:
    """median, p90, p99, max in milliseconds of durations given in seconds."""
    return {
        "n": len(values),
        "median_ms": round(statistics.median(values) * 1000, 3) if values else math.nan,
        "p90_ms": round(percentile(values, 90) * 1000, 3),
        "p99_ms": round(percentile(values, 99) * 1000, 3),
        "max_ms": round(max(values) * 1000, 3) if values else math.nan,
    }


def median_of(runs: Sequence[Mapping[str, Any]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in runs))


# --- the machine and the results ----------------------------------------------------------


def mark_start() -> None:
    """Note the machine's load now as the start of the next benchmark: ``python -m benchmarks``
    runs several in one process, after this module was imported."""
    _START_LOAD["1m"] = os.getloadavg()[0]


def machine() -> dict[str, Any]:
    """What the figures were measured on, and the load when the benchmark began and ended."""
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_avg_1m_at_start": round(_START_LOAD["1m"], 2),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    }


def write_result(name: str, result: Mapping[str, Any], out_dir: Path | None = None) -> Path:
    """``benchmarks/results/<name>.json``: the figures, the parameters and the machine."""
    directory = out_dir or RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": name,
        "finished_at": protocol.format_rfc3339(datetime.now(UTC)),
        "machine": machine(),
        **result,
    }
    path = directory / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


# --- the agent as a process ------------------------------------------------------------------


async def start_agent(
    api: SimApiServer,
    node: str,
    workdir: Path,
    *extra: str,
    image: str = IMAGE_A,
    agent: deployed.Agent | None = None,
) -> AgentProcess:
    """Spawn the agent for ``node`` with its own identity and a host tree booted into ``image``,
    as ``agent`` says (by default ``python -m drain_guard`` in this environment)."""
    host = HostFS(workdir / "hosts" / node, image)
    kubeconfig = api.kubeconfig(agent_user(node), workdir / "kubeconfigs" / node)
    if agent is None:
        return await spawn_agent(node, kubeconfig, host, *extra)
    return await spawn_agent(
        node, kubeconfig, host, *extra, program=agent.program, env=agent.env, boot_id=agent.boot_id
    )


async def seconds_to_ready(agent: AgentProcess, timeout: float = WAIT) -> float:  # noqa: ASYNC109
    """Seconds from the spawn to the first ``/readyz`` 200 (both watches listed)."""
    async with asyncio.timeout(timeout):
        await agent.wait_log(lambda r: str(r.get("message", "")).startswith("listening on"))
        url = f"http://127.0.0.1:{agent.port}/readyz"
        async with aiohttp.ClientSession() as session:
            while True:
                # The agent's own endpoint, polled only until it first says ready.
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return time.monotonic() - agent.started
                await asyncio.sleep(0.005)


async def stop_agent(agent: AgentProcess) -> int:
    """SIGTERM, and SIGKILL if it does not exit within WAIT (a benchmark reports, not asserts)."""
    return await agent.stop(timeout=WAIT, kill_after=True)


def requests_by_verb(api: SimApiServer, user: str) -> dict[str, int]:
    """The simulator's request counters of one user as ``{"verb resource": n}``."""
    out: dict[str, int] = {}
    for (u, verb, resource), n in sorted(api.requests.items()):
        if u == user:
            out[f"{verb} {resource}"] = n
    return out


def diff_counts(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    keys = sorted(set(after) | set(before))
    return {
        k: after.get(k, 0) - before.get(k, 0) for k in keys if after.get(k, 0) != before.get(k, 0)
    }


async def wait_write(
    api: SimApiServer,
    match: Callable[[WriteRecord], bool],
    start: int,
    timeout: float = WAIT,  # noqa: ASYNC109
) -> WriteRecord:
    """The first write-log record at index ``start`` or later that matches; woken by writes.

    ``SimApiServer.wait_for_write`` scans the whole log on every wake; a benchmark making
    thousands of writes needs the scan to start where the previous one ended.
    """
    log = api.write_log

    def find() -> WriteRecord | None:
        for i in range(start, len(log)):
            if match(log[i]):
                return log[i]
        return None

    found = await api.wait_for(find, timeout)
    assert found is not None
    return found
