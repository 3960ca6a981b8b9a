"""The central shield at fleet scale: its memory and CPU per event at 1,000, 2,000 and 5,000 nodes.

Each size builds MCO's namespace as a real cluster has it, in the simulator (this process): a
machine-config-daemon pod per node (about 9 KiB of JSON, as the API returns one), a small
kube-rbac-proxy-crio pod per node, MCO's singletons (``fleet.place_pods``, without tenants),
and ``--builds`` running 4.15 build pods spread over the nodes. ``drain-guard shield`` runs as
the image runs it (``--variant``, ``benchmarks/deployed.py``), with its own identity. Measured:

- start: seconds from the spawn until every build pod has its budget; the requests it made and
  the pods it was sent until then (``SimApiServer.requests``, ``served``);
- peak memory: ``VmHWM`` of the process (``/proc/PID/status``) after the start, and again at
  the end (the whole run's peak);
- steady memory: ``VmRSS`` ``--settle-seconds`` after the start;
- CPU per event: the process's CPU seconds (psutil) over an MCD DaemonSet rollout (every daemon
  pod replaced: delete, create, status; three pod events per node in the namespace), divided by
  those events; and over ``--build-cycles`` build pods each started and finished (the shield
  creates and deletes a budget for each), divided by their pod events.

``--baseline REF`` runs the same sizes against the shield of git revision ``REF`` too (built
the same way), for ratios measured in the same run.

``python -m benchmarks.shieldscale [--sizes 1000 2000 5000] [--builds 20] [--baseline REF]``
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks import deployed
from benchmarks.common import MCO_NS, WAIT, requests_by_verb, seed_api, write_result
from benchmarks.fleet import READY, mcd_rollout, place_pods, pod_object
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_shield

SHIELD_USER = "system:serviceaccount:drain-guard:drain-guard-shield"
OURS = "app.kubernetes.io/managed-by=drain-guard"
KIB = 1024
MIB = 2**20


@dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...] = (1000, 2000, 5000)
    builds: int = 20
    build_cycles: int = 20
    settle_seconds: float = 5.0
    wave_fraction: float = 0.1
    baseline: str | None = None
    variant: str = "deployed"


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise ValueError(f"no {field} in /proc/{pid}/status")


def _mib(pid: int, field: str) -> float:
    return round(_status_kib(pid, field) * KIB / MIB, 1)


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _build_pod(name: str, node: str, phase: str = "Running") -> dict[str, Any]:
    pod = pod_object(name, MCO_NS, node, {"openshift.io/build.name": name.removesuffix("-build")})
    pod["status"] = {"phase": phase, "conditions": READY if phase == "Running" else []}
    return pod


def _budgets(api: SimApiServer) -> int:
    return len(api.list("poddisruptionbudgets", MCO_NS, label_selector=OURS))


async def _budgets_are(api: SimApiServer, count: int, timeout: float = 300.0) -> None:  # noqa: ASYNC109
    found = await api.wait_for(lambda: _budgets(api) == count or None, timeout=timeout)
    if found is None:
        raise TimeoutError(f"{_budgets(api)} budgets, not {count}, after {timeout:.0f} s")


async def _build_cycles(api: SimApiServer, nodes: Sequence[str], cycles: int) -> int:
    """Start and finish ``cycles`` build pods one at a time; the pod events they make."""
    base = _budgets(api)
    for c in range(cycles):
        name = f"build-cycle-{c}-build"
        api.create("pods", _build_pod(name, nodes[c * len(nodes) // cycles]), MCO_NS)
        await _budgets_are(api, base + 1, WAIT)
        pod = api.get("pods", name, MCO_NS)
        pod["status"] = {"phase": "Succeeded", "conditions": []}
        api.update("pods", pod, MCO_NS, subresource="status")
        await _budgets_are(api, base, WAIT)
    return 2 * cycles


async def _one_size(
    size: int, params: Params, shield_of: deployed.Agent, workdir: Path
) -> dict[str, Any]:
    nodes = [f"worker-{i:04d}" for i in range(size)]
    async with SimApiServer(bookmark_interval=60.0, history=100_000) as api:
        # The simulator's disruption controller recomputes every budget of the namespace over
        # all its pods on each pod write: at thousands of nodes the rollout would measure it.
        # The shield never reads a budget's status, so it sees the same events without it.
        api.store.pdb_controller = False
        seed_api(api, [])
        pods = place_pods(api, nodes, tenants=False)
        for i in range(params.builds):
            api.create(
                "pods", _build_pod(f"build-{i}-build", nodes[i * size // params.builds]), MCO_NS
            )
        kubeconfig = api.kubeconfig(SHIELD_USER, workdir / "kubeconfig")
        began = time.monotonic()
        shield: AgentProcess = await spawn_shield(
            kubeconfig, program=shield_of.program, env=shield_of.env
        )
        try:
            await _budgets_are(api, params.builds)
            start_s = time.monotonic() - began
            start_requests = requests_by_verb(api, SHIELD_USER)
            start_pods = sum(
                n for (u, r), n in api.served.items() if u == SHIELD_USER and r == "pods"
            )
            start_kib = (
                sum(b for (u, r), b in api.served_bytes.items() if u == SHIELD_USER and r == "pods")
                / KIB
            )
            proc = psutil.Process(shield.pid)
            peak_start = _mib(shield.pid, "VmHWM")
            await asyncio.sleep(params.settle_seconds)
            steady = _mib(shield.pid, "VmRSS")

            cpu0 = _cpu(proc)
            rollout_s = await mcd_rollout(api, nodes, max(1, round(size * params.wave_fraction)))
            await asyncio.sleep(params.settle_seconds)  # the last wave reaches the shield
            rollout_cpu = _cpu(proc) - cpu0
            rollout_events = 3 * size

            cpu1 = _cpu(proc)
            try:
                build_events = await _build_cycles(api, nodes, params.build_cycles)
                build_ms: float | None = round(1000 * (_cpu(proc) - cpu1) / build_events, 3)
                behind = None
            except TimeoutError as exc:  # a finding, not a failure of the benchmark
                build_ms, behind = None, f"fell behind: {exc}"
            out = {
                "variant": shield_of.variant,
                "nodes": size,
                "pods_in_namespace": pods + params.builds,
                "build_pods": params.builds,
                "start_to_budgets_s": round(start_s, 2),
                "start_requests": start_requests,
                "start_pods_sent": start_pods,
                "start_pods_sent_kib": round(start_kib, 1),
                "peak_rss_mib_after_start": peak_start,
                "steady_rss_mib": steady,
                "mcd_rollout_s": round(rollout_s, 2),
                "mcd_rollout_cpu_ms_per_event": round(1000 * rollout_cpu / rollout_events, 4),
                "build_cpu_ms_per_event": build_ms,
                "build_cycles_fell_behind": behind,
                "peak_rss_mib_whole_run": _mib(shield.pid, "VmHWM"),
                "rss_mib_at_end": _mib(shield.pid, "VmRSS"),
            }
        finally:
            await shield.stop(timeout=WAIT, kill_after=True)
    print(f"shieldscale {shield_of.variant} {size}: {out}", flush=True)
    return out


def _slope(sizes: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """``key`` at each size and its change per 1,000 nodes from the smallest to the largest."""
    values = [s[key] for s in sizes]
    span = (sizes[-1]["nodes"] - sizes[0]["nodes"]) / 1000 or 1
    if values[0] is None or values[-1] is None:
        return {"values": values, "per_1000_nodes": None}
    return {"values": values, "per_1000_nodes": round((values[-1] - values[0]) / span, 4)}


SLOPE_KEYS = (
    "peak_rss_mib_whole_run",
    "steady_rss_mib",
    "mcd_rollout_cpu_ms_per_event",
    "build_cpu_ms_per_event",
    "start_pods_sent",
)


async def measure(params: Params, workdir: Path) -> dict[str, Any]:
    tree = deployed.tree_for([params.variant], workdir)
    shields = [deployed.agent(params.variant, tree)]
    if params.baseline is not None:
        base = deployed.baseline(params.baseline, workdir)
        shields.append(
            deployed.Agent(f"baseline {params.baseline}", base.python, base.program, base.env)
        )
    runs: dict[str, Any] = {}
    for shield_of in shields:
        sizes = [
            await _one_size(n, params, shield_of, workdir / f"{len(runs)}-{n}")
            for n in params.sizes
        ]
        runs[shield_of.variant] = {
            "sizes": sizes,
            "slopes": {key: _slope(sizes, key) for key in SLOPE_KEYS},
        }
    return {"params": asdict(params), "runs": runs}


def parse_args(argv: Sequence[str] | None) -> tuple[Params, Path | None]:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.shieldscale", description=__doc__
    )
    d = Params()
    p.add_argument("--sizes", type=int, nargs="+", default=list(d.sizes))
    p.add_argument("--builds", type=int, default=d.builds, help="running build pods at start")
    p.add_argument("--build-cycles", type=int, default=d.build_cycles)
    p.add_argument("--settle-seconds", type=float, default=d.settle_seconds)
    p.add_argument("--wave-fraction", type=float, default=d.wave_fraction)
    p.add_argument("--baseline", default=None, help="a git revision to measure alike, for ratios")
    p.add_argument("--variant", choices=deployed.VARIANTS, default=d.variant)
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    params = Params(
        tuple(a.sizes),
        a.builds,
        a.build_cycles,
        a.settle_seconds,
        a.wave_fraction,
        a.baseline,
        a.variant,
    )
    return params, a.out


def main(argv: Sequence[str] | None = None) -> int:
    params, out = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-shieldscale-") as tmp:
        result = asyncio.run(measure(params, Path(tmp)))
    print(f"wrote {write_result('shieldscale', result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
