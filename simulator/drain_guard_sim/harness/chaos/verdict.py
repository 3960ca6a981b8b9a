"""A chaos run's verdict: the checker over the simulator's write log, given when each agent
was up and unimpaired, and what a failure prints (the pool's state, a node's timeline)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from drain_guard_sim.actors.build import is_build_pod
from drain_guard_sim.actors.machineos import build_state, built_config
from drain_guard_sim.actors.mco import (
    DESIRED_DRAIN,
    GROUP_MCO,
    LAST_APPLIED_DRAIN,
    MCC_USER,
    MCD_USER,
    MCO_NAMESPACE,
    JsonObj,
    annotations_of,
    condition_true,
)
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess, agent_user
from drain_guard_sim.harness.chaos.faults import RECOVERY
from drain_guard_sim.harness.chaos.schedule import ChaosConfig
from drain_guard_sim.harness.checker import check
from drain_guard_sim.harness.checkresult import Checked, CheckerConfig, Violation
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.intervals import Interval

#: The run's own notes: (time.monotonic(), node or None, text).
Events = Sequence[tuple[float, str | None, str]]


def check_run(
    cluster: SimCluster,
    config: ChaosConfig,
    history: Sequence[AgentProcess],
    impaired: dict[str, list[Interval]],
    end: float,
    settled: bool,
) -> Checked:
    checker = CheckerConfig(
        agent_users={agent_user(n): n for n in cluster.node_names},
        mcd_user=MCD_USER,
        mcc_user=MCC_USER,
        max_hold=config.max_hold,
        reconcile_interval=config.reconcile_interval,
        grace=config.grace,
        clean=clean(cluster, history, impaired, end),
        is_build_pod=is_build_pod,
        end=end,
        settled=settled,
    )
    return check(cluster.api.write_log, checker)


def clean(
    cluster: SimCluster,
    history: Sequence[AgentProcess],
    impaired: dict[str, list[Interval]],
    end: float,
) -> dict[str, list[Interval]]:
    """Per node: when its agent was up and synced, minus the impaired windows."""
    out: dict[str, list[Interval]] = {}
    for node in cluster.node_names:
        up = sorted(
            (a.synced_at, a.ended if a.ended is not None else end)
            for a in history
            if a.node == node and a.synced_at is not None
        )
        bad = sorted(impaired.get(node, []))
        for user_time, _status in _failed_requests(cluster, agent_user(node)):
            bad.append((user_time, user_time + RECOVERY))
        out[node] = _subtract(up, sorted(bad))
    return out


def _failed_requests(cluster: SimCluster, user: str) -> list[tuple[float, int]]:
    return [
        (t, status)
        for t, who, _verb, _res, _path, status in cluster.api.request_log
        if who == user and (status >= 500 or status == 429)
    ]


def pool_state(cluster: SimCluster) -> str:
    """The worker pool and the builds, for a run that did not come to rest."""
    pool = cluster.api.get("machineconfigpools", "worker")
    status = pool.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    builds = [
        (b["metadata"]["name"][-12:], (b.get("status") or {}).get("phase") or build_state(b))
        for b in _builds(cluster.api)
    ]
    return (
        f"pool spec {pool['spec']['configuration']['name'][-12:]} "
        f"status {(status.get('configuration') or {}).get('name', '')[-12:]} "
        f"conditions {conditions} builds {builds}"
    )


def mco_stall(api: SimApiServer, nodes: Sequence[str], config: str) -> str | None:
    """Why MCO itself ends the final rollout of ``config`` short, as evidence; None when
    nothing MCO does explains the stall. MCO rolls no node out to a config without a
    succeeded build, and starts none by itself (docs/mco-versions.md, "What ends a noop-image
    hold") when the build of ``config`` failed, or when no build of it exists and the pool
    refuses one: degraded (every version), or, on 4.15, still Building or BuildPending for a
    config created during an earlier build. It is MCO's only when no node's drain request is
    pending or held: nothing the agents do could move it then."""
    pool = api.get("machineconfigpools", "worker")
    if pool["spec"]["configuration"]["name"] != config:
        return None
    builds = [b for b in _builds(api) if _builds_config(b) == config]
    if condition_true(pool, "BuildFailed") or any(build_state(b) == "Failed" for b in builds):
        why = f"the pool's target {config} has BuildFailed (MCO starts no new build by itself)"
    else:
        refusing = [
            c
            for c in ("Degraded", "NodeDegraded", "Building", "BuildPending")
            if condition_true(pool, c)
        ]
        built = bool(builds)
        if built or not refusing:
            return None
        why = (
            f"the pool's target {config} has no build and the pool says {', '.join(refusing)} "
            "(canPoolBuild starts none)"
        )
    drains = {}
    for node in nodes:
        ann = annotations_of(api.get("nodes", node))
        if ann.get(DESIRED_DRAIN) != ann.get(LAST_APPLIED_DRAIN):
            return None
        drains[node] = ann.get(DESIRED_DRAIN)
    return f"{why} and every drain request is answered: {drains}"


def _builds(api: SimApiServer) -> list[JsonObj]:
    """4.15's Builds, or 4.16+'s MachineOSBuilds where they are served."""
    if api.store.index.by_gvr(GROUP_MCO, "v1", "machineosbuilds") or api.store.index.by_gvr(
        GROUP_MCO, "v1alpha1", "machineosbuilds"
    ):
        return api.list("machineosbuilds")
    return api.list("builds", MCO_NAMESPACE)


def _builds_config(build: JsonObj) -> str:
    return built_config(build) or build["metadata"]["name"].removeprefix("build-")


def node_timeline(
    cluster: SimCluster, events: Events, node: str, violations: Sequence[Violation]
) -> str:
    """The node's drain-relevant writes and the harness's actions before the violation."""
    last = max((v.t for v in violations if v.node == node), default=time.monotonic())
    entries: list[tuple[float, str]] = []
    for t, who, text in events:
        if who in (node, None):
            entries.append((t, f"harness   {text}"))
    for w in cluster.api.write_log:
        if w.resource != "nodes" or w.name != node:
            evicted = w.resource == "pods" and w.subresource == "eviction"
            pod_node = ((w.before or {}).get("spec") or {}).get("nodeName")
            if evicted and w.user == MCC_USER and pod_node == node:
                entries.append((w.time, f"{_who(w.user):<9} evicted {w.name}"))
            continue
        before, after = annotations_of(w.before or {}), annotations_of(w.after or {})
        changes = [
            f"{k.rsplit('/', 1)[1]}={after.get(k)!r}"
            for k in (DESIRED_DRAIN, LAST_APPLIED_DRAIN)
            if before.get(k) != after.get(k)
        ]
        cordon = (
            ((w.before or {}).get("spec") or {}).get("unschedulable"),
            ((w.after or {}).get("spec") or {}).get("unschedulable"),
        )
        if cordon[0] != cordon[1]:
            changes.append("cordon" if cordon[1] else "uncordon")
        if changes:
            entries.append((w.time, f"{_who(w.user):<9} rv={w.rv} " + " ".join(changes)))
    entries.sort()
    window = [e for e in entries if e[0] <= last + 0.001][-30:]
    since = cluster.timeline.since_start
    lines = [f"  {since(t):8.3f}s {text}" for t, text in window]
    state = annotations_of(cluster.api.get("nodes", node))
    shown = {k.rsplit("/", 1)[1]: v for k, v in sorted(state.items()) if "Image" not in k}
    lines.append(f"  at the end: {shown}")
    return "\n".join(lines)


def _who(user: str) -> str:
    if user == MCD_USER:
        return "MCD"
    if user == MCC_USER:
        return "MCC"
    if user.startswith("system:serviceaccount:drain-guard:"):
        return "agent"
    return user.rsplit(":", 1)[-1]


def _subtract(intervals: Sequence[Interval], holes: Sequence[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for lo, hi in intervals:
        pieces = [(lo, hi)]
        for hlo, hhi in holes:
            nxt: list[Interval] = []
            for plo, phi in pieces:
                if hhi <= plo or hlo >= phi:
                    nxt.append((plo, phi))
                    continue
                if plo < hlo:
                    nxt.append((plo, hlo))
                if hhi < phi:
                    nxt.append((hhi, phi))
            pieces = nxt
        out.extend(pieces)
    return out
