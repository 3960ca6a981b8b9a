"""Fleet: per-agent cost at 10, 100, 500 and 2,000 nodes, with MCO's pods on every node.

A real cluster runs a machine-config-daemon pod (a DaemonSet) and a kube-rbac-proxy-crio
static pod on every node in ``openshift-machine-config-operator``, MCO's singletons there, and
tenants' pods everywhere. Each size builds such a cluster in the simulator (in this process)
and runs a sample of ``--agents`` real agents (``python -m drain_guard run``, each its own
process) on nodes spread over the fleet. The other nodes get no agent process (two cores
cannot run 2,000), but the simulator holds open, for each of them, the watches an agent opens
(its Node by name, its node's pods in MCO's namespace, the namespace's budgets), and drains
them: the server-side dispatch of the whole fleet is paid, and counted as the simulator's cost.

Per sampled agent, from the simulator's counters (``SimApiServer.served``, ``requests``) and
the agent's process (psutil): objects and bytes sent to it and API requests it made, at start
(until ready, plus ``--settle`` seconds) and during an MCD DaemonSet rollout (every daemon pod
replaced, in waves of ``--wave-fraction``); its CPU during the rollout and its RSS after. Then
``--holds`` no-op drain requests per sampled agent, one at a time: the reaction from the
write log (request landed → hold committed, the simulator's dispatch and HTTP included), and
the agent's own ``drain_guard_reaction_seconds`` (Node event received → hold committed).

``python -m benchmarks.fleet [--sizes 10 100 500 2000] [--agents 5] ...``
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from benchmarks import deployed
from benchmarks.common import (
    MCD_USER,
    config_name,
    is_hold_of,
    mcd_request_patch,
    reset_patch,
    seconds_to_ready,
    seed_api,
    start_agent,
    stop_agent,
    summary_ms,
    wait_write,
    write_result,
)
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer
from drain_guard_sim.apiserver.watchcache import Watcher
from drain_guard_sim.apiserver.writelog import WriteRecord
from drain_guard_sim.harness.agentproc import AgentProcess, agent_user

MIB = 2**20
MCO_NS = "openshift-machine-config-operator"
TENANT_NS = "tenant"
TENANT_PODS_PER_NODE = 5
DS_USER = "system:serviceaccount:kube-system:daemon-set-controller"
KUBELET = "system:node:{node}"
# A machine-config-daemon pod as the API returns it is about 9 KiB of JSON: its env, mounts,
# probes and the kube-rbac-proxy sidecar. The filler stands for them (bytes are measured).
POD_FILLER = "x" * 8600


@dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...] = (10, 100, 500, 2000)
    agents: int = 5
    wave_fraction: float = 0.1
    settle_seconds: float = 2.0
    holds: int = 20
    profile: bool = False  # profile this process (the simulator) during the MCD rollout
    variant: str = "deployed"
    agent: deployed.Agent | None = None  # how ``variant`` runs; set once its tree is built


def _profile_summary(profiler: Any, n: int) -> dict[str, Any]:
    """From a pyinstrument session: the functions with the most time of their own, and the
    simulator's own functions (``drain_guard_sim``) with the most time including their callees."""
    root = profiler.last_session.root_frame()
    total = float(root.time) if root is not None else 0.0
    own: dict[str, float] = {}
    inclusive: dict[str, float] = {}
    stack = [(root, frozenset[str]())] if root is not None else []
    while stack:
        frame, outer = stack.pop()
        key = f"{frame.file_path_short}:{frame.line_no}({frame.function})"
        if not frame.is_synthetic and frame.file_path_short:
            if frame.total_self_time > 0:
                own[key] = own.get(key, 0.0) + frame.total_self_time
            if "simulator/drain_guard_sim/" in frame.file_path_short and key not in outer:
                inclusive[key] = inclusive.get(key, 0.0) + frame.time  # recursion counted once
        stack.extend((child, outer | {key}) for child in frame.children)

    def rows(values: dict[str, float]) -> list[dict[str, Any]]:
        top = sorted(values.items(), key=lambda kv: -kv[1])[:n]
        return [
            {"function": k, "seconds": round(v, 3), "share": round(v / total, 3) if total else 0.0}
            for k, v in top
        ]

    return {
        "sampled_s": round(total, 2),
        "self_time": rows(own),
        "simulator_inclusive": rows(inclusive),
    }


READY = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]


def pod_object(
    name: str,
    namespace: str,
    node: str,
    labels: dict[str, str],
    *,
    daemonset: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if daemonset:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "machine-config-daemon",
             "uid": "ds-mcd", "controller": True}
        ]  # fmt: skip
        meta["annotations"] = {"bench.drain-guard.io/filler": POD_FILLER}
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": phase, "conditions": READY if phase == "Running" else []},
    }


def mcd_pod(node: str, revision: int, phase: str = "Running") -> dict[str, Any]:
    labels = {
        "k8s-app": "machine-config-daemon",
        "controller-revision-hash": f"rev{revision}",
        "pod-template-generation": str(revision),
    }
    return pod_object(f"machine-config-daemon-{revision}-{node}", MCO_NS, node, labels,
                daemonset=True, phase=phase)  # fmt: skip


def place_pods(api: SimApiServer, nodes: Sequence[str], *, tenants: bool = True) -> int:
    """MCO's pods and (with ``tenants``) tenants' pods, as a real cluster has them; returns
    how many."""
    if tenants:
        api.create("namespaces", {"metadata": {"name": TENANT_NS}})
    pods = []
    for node in nodes:
        pods.append(mcd_pod(node, 1))
        crio = {"k8s-app": "kube-rbac-proxy-crio"}
        pods.append(pod_object(f"kube-rbac-proxy-crio-{node}", MCO_NS, node, crio))
        pods += [
            pod_object(f"web-{node}-{i}", TENANT_NS, node, {"app": f"web-{i}"})
            for i in range(TENANT_PODS_PER_NODE if tenants else 0)
        ]
    first = nodes[0]
    for app in ("machine-config-operator", "machine-config-controller", "machine-os-builder"):
        pods.append(pod_object(f"{app}-7d9f8c-x2x{app[-1]}", MCO_NS, first, {"k8s-app": app}))
    for node in nodes[:3]:
        pods.append(pod_object(f"machine-config-server-{node}", MCO_NS, node,
                         {"k8s-app": "machine-config-server"}))  # fmt: skip
    for pod in pods:
        api.create("pods", pod, pod["metadata"]["namespace"])
    return len(pods)


def _phantom_watches(api: SimApiServer, nodes: Sequence[str]) -> list[Watcher]:
    """The watches an agent opens, for each node without an agent process (server side only)."""
    rv = str(api.resource_version)
    store = api.store
    out = []
    for node in nodes:
        user = agent_user(node)
        out.append(store.watch("nodes", name=node, resource_version=rv, user=user))
        out.append(store.watch("pods", MCO_NS, resource_version=rv, user=user,
                               field_selector=f"spec.nodeName={node}"))  # fmt: skip
        out.append(store.watch("poddisruptionbudgets", MCO_NS, resource_version=rv, user=user))
    return out


def _served(api: SimApiServer, user: str) -> tuple[int, int]:
    objects = sum(n for (u, _r), n in api.served.items() if u == user)
    size = sum(n for (u, _r), n in api.served_bytes.items() if u == user)
    return objects, size


def _served_pods(api: SimApiServer, user: str) -> int:
    return sum(n for (u, r), n in api.served.items() if u == user and r == "pods")


def _requests(api: SimApiServer, user: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for (u, verb, resource), n in api.requests.items():
        if u == user:
            out[f"{verb} {resource}"] += n
    return out


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


async def _agent_reaction(agent: AgentProcess) -> tuple[float, int]:
    """(sum, count) of the agent's drain_guard_reaction_seconds histogram."""
    name = "drain_guard_reaction_seconds"
    values: dict[str, float] = {}
    url = f"http://127.0.0.1:{agent.port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        for line in (await resp.text()).splitlines():
            key, _, value = line.partition(" ")
            if key in (f"{name}_sum", f"{name}_count"):
                values[key] = float(value)
    return values.get(f"{name}_sum", 0.0), int(values.get(f"{name}_count", 0))


async def mcd_rollout(api: SimApiServer, nodes: Sequence[str], batch: int) -> float:
    """Replace every machine-config-daemon pod, a wave at a time, as the DaemonSet controller
    and the kubelets do: delete the old pod, create the new one Pending, report it Running."""
    began = time.monotonic()
    for w in range(0, len(nodes), batch):
        for node in nodes[w : w + batch]:
            api.delete("pods", mcd_pod(node, 1)["metadata"]["name"], MCO_NS, user=DS_USER)
            new = api.create("pods", mcd_pod(node, 2, phase="Pending"), MCO_NS, user=DS_USER)
            new["status"] = {"phase": "Running", "conditions": READY}
            api.update("pods", new, MCO_NS, subresource="status", user=KUBELET.format(node=node))
        await asyncio.sleep(0)  # let the watch streams go out between waves
    return time.monotonic() - began


def _hold_on(node: str, request: str) -> Callable[[WriteRecord], bool]:
    is_hold = is_hold_of(request)
    return lambda rec: rec.name == node and is_hold(rec)


async def _holds(api: SimApiServer, nodes: Sequence[str], count: int) -> list[float]:
    """``count`` no-op drain requests per node, one at a time; request → hold, from the log."""
    out = []
    for i in range(count):
        for node in nodes:
            request = f"drain-{config_name(i)}"
            start = len(api.write_log)
            api.patch("nodes", node, mcd_request_patch(request), user=MCD_USER)
            landed = api.write_log[-1]
            held = await wait_write(api, _hold_on(node, request), start)
            out.append(held.time - landed.time)
            api.patch("nodes", node, reset_patch(config_name(i)), user=ADMIN)
    return out


async def _one_size(size: int, params: Params, workdir: Path) -> dict[str, Any]:
    nodes = [f"worker-{i:04d}" for i in range(size)]
    k = min(params.agents, size)
    sampled = [nodes[i * size // k] for i in range(k)]
    others = [n for n in nodes if n not in set(sampled)]
    me = psutil.Process()
    async with SimApiServer(bookmark_interval=60.0, history=100_000) as api:
        seed_api(api, nodes)
        pods = place_pods(api, nodes)
        phantoms = _phantom_watches(api, others)
        # What one agent was sent before it watched only its node's pods: the shield's watch
        # of every pod in MCO's namespace (a list of them at start, then every change).
        before_start = len(api.list("pods", MCO_NS))
        before = api.store.watch("pods", MCO_NS, resource_version=str(api.resource_version))
        agents: list[AgentProcess] = []
        try:
            for node in sampled:
                agents.append(await start_agent(api, node, workdir, agent=params.agent))
            ready = [await seconds_to_ready(a, timeout=120.0) for a in agents]
            await asyncio.sleep(params.settle_seconds)
            users = [agent_user(n) for n in sampled]
            procs = [psutil.Process(a.pid) for a in agents]
            start_served = [_served(api, u) for u in users]
            start_requests = [_requests(api, u) for u in users]
            start_pods = [_served_pods(api, u) for u in users]

            cpu0 = [_cpu(p) for p in procs]
            sim_cpu0 = _cpu(me)
            profiler: Any = None
            if params.profile:
                profiler = importlib.import_module("pyinstrument").Profiler(
                    interval=0.001, async_mode="disabled"
                )
                profiler.start()
            batch = max(1, round(size * params.wave_fraction))
            rollout_s = await mcd_rollout(api, nodes, batch)
            await asyncio.sleep(params.settle_seconds)  # the last wave's events reach the agents
            if profiler is not None:
                profiler.stop()
            sim_cpu = _cpu(me) - sim_cpu0
            rollout_cpu = [_cpu(p) - c for p, c in zip(procs, cpu0, strict=True)]
            rollout_served = [
                (o - o0, b - b0)
                for (o, b), (o0, b0) in zip(
                    (_served(api, u) for u in users), start_served, strict=True
                )
            ]
            rollout_requests = [
                _requests(api, u) - r0 for u, r0 in zip(users, start_requests, strict=True)
            ]
            rss = [p.memory_info().rss / MIB for p in procs]
            phantom_events = [w.queue.qsize() for w in phantoms]
            before_rollout = before.queue.qsize()

            holds = await _holds(api, sampled, params.holds)
            agent_side = [await _agent_reaction(a) for a in agents]
        finally:
            for a in agents:
                await stop_agent(a)
            for w in (*phantoms, before):
                api.store.unwatch(w)
    total_sum = sum(s for s, _ in agent_side)
    total_n = sum(n for _, n in agent_side)
    out: dict[str, Any] = {
        "nodes": size,
        "pods": pods,
        "sampled_agents": k,
        "phantom_watches": len(phantoms),
        "wave_size": batch,
        "start_to_ready_s_max": round(max(ready), 2),
        "per_agent": {
            "start_objects": [o for o, _ in start_served],
            "start_kib": [round(b / 1024, 1) for _, b in start_served],
            "start_pods": start_pods,
            "start_requests": [sum(r.values()) for r in start_requests],
            "rollout_objects": [o for o, _ in rollout_served],
            "rollout_kib": [round(b / 1024, 1) for _, b in rollout_served],
            "rollout_requests": [sum(r.values()) for r in rollout_requests],
            "rollout_cpu_ms": [round(1000 * c, 1) for c in rollout_cpu],
            "rss_mib": [round(r, 1) for r in rss],
        },
        "start_requests_detail": dict(start_requests[0]),
        "namespace_wide_pod_watch": {
            "start_objects": before_start,
            "rollout_objects": before_rollout,
        },
        "mcd_rollout_s": round(rollout_s, 2),
        "simulator_cpu_s_mcd_rollout": round(sim_cpu, 2),
        "phantom_events_per_node_max": max(phantom_events, default=0),
        "hold_reaction": summary_ms(holds),
        "agent_reaction_mean_ms": round(1000 * total_sum / total_n, 3) if total_n else None,
    }
    if profiler is not None:
        out["simulator_profile"] = _profile_summary(profiler, 12)
    print(f"fleet {size}: {out}", flush=True)
    return out


FLAT_KEYS = ("start_objects", "start_kib", "rollout_objects", "rollout_kib", "rollout_requests")


FLAT_KEYS = ("start_objects", "start_kib", "rollout_objects", "rollout_kib", "rollout_requests")


def _flat(sizes: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """Median over the sampled agents of ``key``, per size; flat when the largest is within
    10 % (and one object) of the smallest."""
    medians = [sorted(s["per_agent"][key])[len(s["per_agent"][key]) // 2] for s in sizes]
    low, high = min(medians), max(medians)
    return {"medians": medians, "met": high <= low * 1.1 + 1}


async def measure(params: Params, workdir: Path) -> dict[str, Any]:
    sizes = [await _one_size(n, params, workdir / f"fleet-{n}") for n in params.sizes]
    return {
        "params": asdict(params),
        "sizes": sizes,
        "targets": {key: _flat(sizes, key) for key in FLAT_KEYS},
    }


def parse_args(argv: Sequence[str] | None) -> tuple[Params, Path | None]:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.fleet", description=__doc__
    )
    d = Params()
    p.add_argument("--sizes", type=int, nargs="+", default=list(d.sizes))
    p.add_argument("--agents", type=int, default=d.agents, help="real agent processes per size")
    p.add_argument("--wave-fraction", type=float, default=d.wave_fraction)
    p.add_argument("--settle-seconds", type=float, default=d.settle_seconds)
    p.add_argument("--holds", type=int, default=d.holds, help="drain requests per agent")
    p.add_argument(
        "--profile",
        action="store_true",
        help="profile the simulator's process during the MCD rollout with pyinstrument (extra"
        " 'bench'; results: fleet_profile.json)",
    )
    p.add_argument("--variant", choices=deployed.VARIANTS, default=Params.variant)
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    params = Params(
        tuple(a.sizes), a.agents, a.wave_fraction, a.settle_seconds, a.holds, a.profile, a.variant
    )
    return params, a.out


def main(argv: Sequence[str] | None = None) -> int:
    params, out = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        tree = deployed.tree_for([params.variant], Path(tmp))
        params = replace(params, agent=deployed.agent(params.variant, tree))
        result = asyncio.run(measure(params, Path(tmp)))
    name = "fleet_profile" if params.profile else "fleet"
    print(f"wrote {write_result(name, result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
