"""The shield against the simulator through the real client, with the MCC drain controller.

The shield runs in-process (``Shield.run`` as a task, with the agent's identity); "stopping"
or "killing" the agent is cancelling that task, which leaves the budgets on the server exactly
as a killed process would. The drain is the simulator's MCC drain controller (evictions through
the eviction API); the garbage collector is ``drain_guard_sim.actors.gc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from drain_guard import protocol
from drain_guard.core.pods import MANAGED_BY, MANAGED_BY_KEY
from drain_guard.core.selectors import MCO_NAMESPACE, default_build_pod_selectors
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube.client import Kube
from drain_guard.kube.counters import NullCounters
from drain_guard.kube.listwatch import WatchCache
from drain_guard.runtime.health import Health
from drain_guard.runtime.metrics import BaseMetrics
from drain_guard.shield.loop import Shield
from drain_guard.shield.plan import EVERY_NODE, REGISTRY_NAMESPACE, NodeScope
from drain_guard_sim.actors.drain import DrainController
from drain_guard_sim.actors.gc import GC_USER, GarbageCollector
from drain_guard_sim.actors.mco import MCC_USER, Timings
from drain_guard_sim.actors.timeline import Timeline, TimelineEntry
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import AGENT_USER, CONFIG_B, NODE, WAIT, mcd_request, node_annotations

BUILD = f"build-{CONFIG_B}"
POD = f"{BUILD}-build"
DRAIN_B = f"drain-{CONFIG_B}"
PDBS = "poddisruptionbudgets"
OURS = f"{MANAGED_BY_KEY}={MANAGED_BY}"
READY = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
# MCO seconds x 0.01: the eviction retry is 50 ms, a drain attempt 0.9 s.
TIMINGS = Timings().scaled(0.01)


@dataclass
class RecordingMetrics(NullCounters):
    budgets: list[int] = field(default_factory=list)
    conflicts: list[int] = field(default_factory=list)
    blocked: int = 0
    api_errors: list[str] = field(default_factory=list)
    synced: dict[str, bool] = field(default_factory=dict)
    restarts: list[tuple[str, str]] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)

    def set_shield_budgets(self, count: int) -> None:
        self.budgets.append(count)

    def set_shield_conflicts(self, count: int) -> None:
        self.conflicts.append(count)

    def count_shield_blocked_drain(self) -> None:
        self.blocked += 1

    def count_retry(self, part: str) -> None:
        self.retries.append(part)

    def watch_state(self, resource: str, state: WatchStatus) -> None:
        self.synced[resource] = state.synced

    # kube.Counters: the Kube's, which the shield's calls and watches and the agent's pod
    # watch share.

    def api_error(self, operation: str, status: int) -> None:
        self.api_errors.append(operation)

    def watch_restart(self, resource: str, reason: str) -> None:
        self.restarts.append((resource, reason))


@dataclass
class Running:
    shield: Shield
    task: asyncio.Task[None]
    metrics: RecordingMetrics
    pods: asyncio.Task[None]


def add_build_pod(api: SimApiServer, name: str = POD) -> dict[str, Any]:
    """The 4.15 build pod, Running and Ready on NODE (as the kubelet reports it)."""
    pod: dict[str, Any] = api.create(
        "pods",
        {
            "metadata": {
                "name": name,
                "namespace": MCO_NAMESPACE,
                "labels": {"openshift.io/build.name": BUILD},
            },
            "spec": {"nodeName": NODE, "containers": [{"name": "docker-build", "image": "b"}]},
            "status": {"phase": "Running", "conditions": READY},
        },
        MCO_NAMESPACE,
    )
    return pod


def finish_pod(api: SimApiServer, name: str = POD) -> None:
    pod = api.get("pods", name, MCO_NAMESPACE)
    pod["status"] = {"phase": "Succeeded", "conditions": []}
    api.update("pods", pod, MCO_NAMESPACE, subresource="status")


def our_budgets(api: SimApiServer) -> list[dict[str, Any]]:
    return api.list(PDBS, MCO_NAMESPACE, label_selector=OURS)


def protecting_budget(api: SimApiServer) -> dict[str, Any] | None:
    """Our budget once the disruption controller has computed it (a 429 for the pod)."""
    for pdb in our_budgets(api):
        status = pdb.get("status") or {}
        if status.get("observedGeneration") == pdb["metadata"]["generation"]:
            return pdb
    return None


async def protected(api: SimApiServer) -> dict[str, Any]:
    pdb = await api.wait_for(lambda: protecting_budget(api), timeout=WAIT)
    assert pdb is not None
    return pdb


@pytest.fixture
async def start_shield(api: SimApiServer) -> AsyncIterator[Callable[..., Any]]:
    clients: list[Any] = []
    tasks: list[asyncio.Task[None]] = []

    async def start(**kwargs: Any) -> Running:
        client = api.api_client(AGENT_USER)
        clients.append(client)
        metrics = RecordingMetrics()
        # The agent's pod watch (its node's pods, all namespaces: the dependencies' too).
        cache = WatchCache()
        kube = Kube(client, metrics)
        pods = asyncio.create_task(kube.watch_pods(NODE, cache, None))
        shield = Shield(
            kube,
            NodeScope(NODE),
            default_build_pod_selectors(),
            cache,
            metrics=metrics,
            on_blocked_drain=metrics.count_shield_blocked_drain,
            **kwargs,
        )
        task = asyncio.create_task(shield.run())
        tasks.extend((task, pods))
        async with asyncio.timeout(WAIT):
            await shield.wait_status(
                lambda s: (
                    all(ok or ns in s.forbidden for ns, ok in s.synced.items())
                    and cache.pods_synced
                )
            )
        return Running(shield, task, metrics, pods)

    yield start
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for client in clients:
        await client.close()


async def kill(running: Running) -> None:
    """The agent dies: no clean-up of any kind."""
    for task in (running.task, running.pods):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def timeline() -> Timeline:
    return Timeline()


@pytest.fixture
async def drain(api: SimApiServer, tmp_path: Path, timeline: Timeline) -> AsyncIterator[None]:
    """The MCC drain controller, started (it acts once a drain is requested)."""
    controller = DrainController(api.kubeconfig(MCC_USER, tmp_path / "mcc"), timeline, TIMINGS)
    await controller.start()
    yield
    await controller.stop()


@pytest.fixture
async def gc(api: SimApiServer, tmp_path: Path, timeline: Timeline) -> AsyncIterator[None]:
    collector = GarbageCollector(api.kubeconfig(GC_USER, tmp_path / "gc"), timeline, TIMINGS)
    await collector.start()
    yield
    await collector.stop()


async def refused_evictions(timeline: Timeline, count: int) -> list[TimelineEntry]:
    """Wait for ``count`` evictions of the build pod refused with 429 (kubectl: "will retry")."""
    seen: list[TimelineEntry] = []

    def refused(entry: TimelineEntry) -> bool:
        message = entry.message
        if f'evicting pods/"{POD}"' in message and "will retry" in message and entry not in seen:
            seen.append(entry)
        return len(seen) >= count

    async with asyncio.timeout(WAIT):
        await timeline.wait_for(refused)
    return seen


def evictions_of_pod(api: SimApiServer, status: int) -> int:
    return sum(
        1
        for _t, user, verb, resource, path, code in api.request_log
        if user == MCC_USER
        and verb == "create"
        and resource == "pods/eviction"
        and path.endswith(f"/pods/{POD}/eviction")
        and code == status
    )


def drain_done(api: SimApiServer) -> bool:
    return node_annotations(api).get(protocol.LAST_APPLIED_DRAIN) == DRAIN_B


async def test_budget_refuses_the_drain_while_the_agent_is_down_and_goes_with_the_pod(
    api: SimApiServer,
    start_shield: Callable[..., Any],
    timeline: Timeline,
    drain: None,
    gc: None,
) -> None:
    add_build_pod(api)
    running = await start_shield()
    pdb = await protected(api)
    assert pdb["metadata"]["ownerReferences"][0]["name"] == POD
    assert pdb["spec"]["selector"] == {"matchLabels": {"openshift.io/build.name": BUILD}}
    assert pdb["status"]["disruptionsAllowed"] == 0
    await kill(running)

    mcd_request(api, DRAIN_B)  # no agent: nothing holds the request; the MCC drains
    await refused_evictions(timeline, 2)
    assert evictions_of_pod(api, 429) >= 2
    assert api.get("nodes", NODE)["spec"].get("unschedulable") is True
    assert not drain_done(api)

    # The build finishes in its pod, which was never evicted; then the drain completes.
    finish_pod(api)
    await api.wait_for(lambda: drain_done(api), timeout=WAIT)
    pod_writes = api.writes("pods", name=POD)
    deleted = [w for w in pod_writes if w.after is None]
    assert len(deleted) == 1
    succeeded = [
        w for w in pod_writes if (w.after or {}).get("status", {}).get("phase") == "Succeeded"
    ]
    assert succeeded[0].rv < deleted[0].rv  # evicted only once it had succeeded
    # The agent is still dead: the garbage collector removed the budget with its pod.
    await api.wait_for(lambda: not our_budgets(api), timeout=WAIT)
    removal = api.writes(PDBS, name=pdb["metadata"]["name"])[-1]
    assert removal.after is None
    assert removal.user == GC_USER


async def test_the_agent_deletes_the_budget_when_the_build_pod_finishes(
    api: SimApiServer, start_shield: Callable[..., Any], timeline: Timeline, drain: None
) -> None:
    add_build_pod(api)
    running = await start_shield()
    pdb = await protected(api)
    async with asyncio.timeout(WAIT):
        await running.shield.wait_status(lambda s: len(s.held) == 1)
    assert running.metrics.budgets[-1] == 1
    assert running.metrics.synced["poddisruptionbudget"] is True
    status = running.shield.status().to_json()
    assert status["budgets"] == [
        {
            "namespace": MCO_NAMESPACE,
            "name": POD,
            "node": NODE,
            "phase": "Running",
            "role": "build-pod",
            "budget": pdb["metadata"]["name"],
        }
    ]

    mcd_request(api, DRAIN_B)
    await refused_evictions(timeline, 1)
    running.shield.node_seen(unschedulable=True)
    running.shield.node_seen(unschedulable=True)  # the same cordon, seen again
    assert running.metrics.blocked == 1
    assert running.shield.status().blocked_drains == 1
    assert running.shield.status().node_cordoned is True

    finish_pod(api)
    await api.wait_for(lambda: not our_budgets(api), timeout=WAIT)
    removal = api.writes(PDBS, name=pdb["metadata"]["name"])[-1]
    assert removal.user == AGENT_USER
    await api.wait_for(lambda: drain_done(api), timeout=WAIT)
    async with asyncio.timeout(WAIT):
        await running.shield.wait_status(lambda s: not s.held)
    assert running.metrics.budgets[-1] == 0


async def test_a_pod_with_another_budget_is_left_alone_and_reported(
    api: SimApiServer, start_shield: Callable[..., Any], timeline: Timeline, drain: None
) -> None:
    api.create(
        PDBS,
        {
            "metadata": {"name": "builds", "namespace": MCO_NAMESPACE},
            # minAvailable 0 lets the drain evict the pod; maxUnavailable would not (a
            # build pod has no controller with a scale: expectedPods 0, nothing allowed).
            "spec": {"minAvailable": 0, "selector": {"matchExpressions": [
                {"key": "openshift.io/build.name", "operator": "Exists"}]}},
        },
        MCO_NAMESPACE,
    )  # fmt: skip
    add_build_pod(api)
    running = await start_shield()
    async with asyncio.timeout(WAIT):
        await running.shield.wait_status(lambda s: len(s.conflicts) == 1)
    assert running.metrics.conflicts[-1] == 1
    [conflict] = running.shield.status().to_json()["conflicts"]
    assert conflict["name"] == POD
    assert conflict["budgets"] == [f"{MCO_NAMESPACE}/builds"]
    assert conflict["shielded"] is False
    assert our_budgets(api) == []
    # Only the other budget governs the pod: no 500 ("more than one PodDisruptionBudget").
    mcd_request(api, DRAIN_B)
    await api.wait_for(lambda: drain_done(api), timeout=WAIT)
    assert evictions_of_pod(api, 500) == 0
    assert our_budgets(api) == []
    assert not [w for w in api.writes(PDBS) if w.user == AGENT_USER]


async def test_stale_budgets_of_this_node_are_removed_at_start(
    api: SimApiServer, start_shield: Callable[..., Any]
) -> None:
    def leftover(name: str, node: str) -> None:
        api.create(
            PDBS,
            {
                "metadata": {
                    "name": name,
                    "namespace": MCO_NAMESPACE,
                    "labels": {MANAGED_BY_KEY: MANAGED_BY, "drain-guard.io/node": node},
                },
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"gone": name}}},
            },
            MCO_NAMESPACE,
        )

    leftover("drain-guard-old-build", NODE)
    leftover("drain-guard-theirs", "worker-1")
    await start_shield()
    await api.wait_for(lambda: len(our_budgets(api)) == 1, timeout=WAIT)
    assert [b["metadata"]["name"] for b in our_budgets(api)] == ["drain-guard-theirs"]


async def test_a_namespace_without_rights_is_reported_and_left_alone(
    api: SimApiServer, start_shield: Callable[..., Any]
) -> None:
    api.faults.error(403, user=AGENT_USER, verb="list", resource="poddisruptionbudgets.policy")
    add_build_pod(api)
    running = await start_shield()  # ready: a forbidden namespace is not waited for
    status = running.shield.status().to_json()
    assert list(status["forbidden"]) == [MCO_NAMESPACE]
    assert status["synced"] == {MCO_NAMESPACE: False}
    assert "poddisruptionbudget_list" in running.metrics.api_errors
    assert running.metrics.synced["poddisruptionbudget"] is False
    assert our_budgets(api) == []  # nothing created without seeing the namespace's budgets


async def test_dependencies_are_shielded_only_while_a_build_runs(
    api: SimApiServer, start_shield: Callable[..., Any]
) -> None:
    api.create("namespaces", {"metadata": {"name": REGISTRY_NAMESPACE}})
    for ns, name, labels in (
        (MCO_NAMESPACE, "machine-os-builder-7d9f-x2x", {"k8s-app": "machine-os-builder"}),
        (REGISTRY_NAMESPACE, "image-registry-5b86-scml4", {"docker-registry": "default"}),
    ):
        api.create(
            "pods",
            {
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running", "conditions": READY},
            },
            ns,
        )
    running = await start_shield(dependencies=True)
    assert running.shield.status().namespaces == (MCO_NAMESPACE, REGISTRY_NAMESPACE)
    assert api.list(PDBS, label_selector=OURS) == []  # no build: nothing to protect them for

    add_build_pod(api)
    async with asyncio.timeout(WAIT):
        status = await running.shield.wait_status(lambda s: len(s.held) == 3)
    assert sorted((h.pod.name, h.role.value) for h in status.held) == [
        (POD, "build-pod"),
        ("image-registry-5b86-scml4", "dependency"),
        ("machine-os-builder-7d9f-x2x", "dependency"),
    ]
    assert len(api.list(PDBS, label_selector=OURS)) == 3

    finish_pod(api)
    await api.wait_for(lambda: not api.list(PDBS, label_selector=OURS), timeout=WAIT)


async def test_uninstall_removes_this_nodes_budgets(
    api: SimApiServer, start_shield: Callable[..., Any]
) -> None:
    add_build_pod(api)
    running = await start_shield()
    await protected(api)
    await kill(running)
    assert await running.shield.remove_all() == 1
    assert our_budgets(api) == []
    assert await running.shield.remove_all() == 0


async def test_a_relisted_watch_neither_duplicates_nor_drops_the_budget(
    api: SimApiServer, start_shield: Callable[..., Any]
) -> None:
    add_build_pod(api)
    running = await start_shield()
    await protected(api)
    # Both watches end, and their resourceVersion is refused (410): each lists afresh.
    api.faults.expire_watches(2, user=AGENT_USER)
    api.cut_watches(user=AGENT_USER)
    relisted = {("pod", "expired"), ("poddisruptionbudget", "expired")}
    async with asyncio.timeout(WAIT):
        await running.shield.wait_status(
            lambda s: relisted <= set(running.metrics.restarts) and bool(s.held)
        )
    # And it still acts on what it re-listed: the finished pod's budget goes.
    finish_pod(api)
    await api.wait_for(lambda: not our_budgets(api), timeout=WAIT)
    agent_writes = [(w.verb, w.name) for w in api.writes(PDBS) if w.user == AGENT_USER]
    assert agent_writes == [("create", f"drain-guard-{POD}"), ("delete", f"drain-guard-{POD}")]


async def test_a_429_is_retried_after_the_servers_retry_after(
    api: SimApiServer, start_shield: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="drain_guard.shield.loop")
    api.faults.error(
        429, retry_after=1, user=AGENT_USER, verb="create", resource=f"{PDBS}.policy", times=1
    )
    add_build_pod(api)
    running = await start_shield()
    await protected(api)  # created on the second try
    assert "poddisruptionbudget_create" in running.metrics.api_errors
    waits = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert waits
    assert "retrying in 1.0s," in waits[0], waits


async def test_failed_retries_are_one_warning_and_one_recovery_line(
    api: SimApiServer, start_shield: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="drain_guard.shield.loop")
    api.faults.error(503, user=AGENT_USER, verb="create", resource=f"{PDBS}.policy", times=3)
    add_build_pod(api)
    running = await start_shield()
    await protected(api)  # created on the fourth try
    assert running.metrics.retries == ["shield"] * 3
    ours = [r for r in caplog.records if r.getMessage().startswith(f"shield of node {NODE}:")]
    warnings = [r.getMessage() for r in ours if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "API unreachable since" in warnings[0]
    assert "503" in warnings[0]
    assert "API reachable again after" in warnings[1]
    assert warnings[1].endswith("3 retries)")
    assert sum("failed again" in r.getMessage() for r in ours if r.levelno == logging.DEBUG) == 2


async def test_the_shields_calls_and_watches_are_api_contact_as_the_agents(
    api: SimApiServer,
) -> None:
    """One way to call the API (``Kube.call``): the shield's own requests and its budget
    watches record API contact as the agent's do, so the central shield's ``/readyz`` ("API
    reached recently") and its last-contact gauge count them. The pods come by hand here: no
    other watch reaches the API."""
    metrics = BaseMetrics()
    counters = Health(metrics)
    cache = WatchCache()
    cache.replace_pods([])
    async with api.api_client(AGENT_USER) as client:
        shield = Shield(Kube(client, counters), EVERY_NODE, default_build_pod_selectors(), cache)
        task = asyncio.create_task(shield.run())
        async with asyncio.timeout(WAIT):
            await shield.wait_status(lambda s: all(s.synced.values()))
        watched = counters.last_contact
        assert watched is not None  # the budgets' list and watch
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        counters.last_contact = None
        assert await shield.remove_all() == 0  # one list, no watch running
    assert counters.last_contact is not None
    gauge = metrics.registry.get_sample_value("drain_guard_last_api_contact_timestamp_seconds")
    assert gauge == counters.last_contact.timestamp()
    # A failure is counted once, under the shield's operation, by the same wrapper.
    api.faults.error(500, user=AGENT_USER, verb="list", resource=f"{PDBS}.policy", times=1)
    async with api.api_client(AGENT_USER) as client:
        shield = Shield(Kube(client, counters), EVERY_NODE, default_build_pod_selectors(), cache)
        await shield.remove_all()
    errors = metrics.registry.get_sample_value(
        "drain_guard_api_errors_total", {"operation": "poddisruptionbudget_list"}
    )
    assert errors == 1
