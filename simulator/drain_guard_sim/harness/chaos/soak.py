"""``run_soak``: one agent's RSS and open file descriptors over thousands of watch events
(pod churn and node updates); a measurement, not a timed test."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.mco import (
    ADMIN_USER,
    BUILD_NAME_LABEL,
    DESIRED_DRAIN,
    MCD_USER,
    MCO_NAMESPACE,
    annotations_of,
)
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import agent_user, spawn_agent


@dataclass
class SoakReport:
    """RSS (bytes) and open fds of the agent, sampled as events were fed to it."""

    events: int
    samples: list[tuple[int, int, int]]  # (events so far, rss, fds)
    seconds: float
    #: The agent's own writes meanwhile (holds and releases): it was processing the events.
    agent_writes: int

    def summary(self) -> str:
        first, last = self.samples[0], self.samples[-1]
        peak = max(s[1] for s in self.samples)
        return (
            f"{self.events} events in {self.seconds:.1f}s: RSS {first[1] / 2**20:.1f} MiB → "
            f"{last[1] / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB), "
            f"fds {first[2]} → {last[2]} (max {max(s[2] for s in self.samples)}); "
            f"the agent wrote {self.agent_writes} holds and releases meanwhile"
        )


async def run_soak(
    events: int = 5000,
    samples: int = 20,
    workdir: Path | None = None,
    *,
    program: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> SoakReport:
    """Feed one agent ``events`` watch events (pod churn on its node, node annotation updates,
    drain requests it holds and releases) and sample its RSS and open fds along the way.
    ``program`` and ``env`` run drain-guard as :func:`spawn_agent` says (``benchmarks.soak``:
    as the image runs it)."""
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        root = workdir or Path(tmp)
        async with SimApiServer(bookmark_interval=1.0) as api:
            api.create("namespaces", {"metadata": {"name": MCO_NAMESPACE}})
            api.create("namespaces", {"metadata": {"name": "churn"}})
            api.create("nodes", {"metadata": {"name": "worker-0", "annotations": {}}, "spec": {}})
            host = HostFS(root / "host", "registry.example/os@sha256:" + "a" * 64)
            kubeconfig = api.kubeconfig(agent_user("worker-0"), root / "kubeconfig")
            agent = await spawn_agent(
                "worker-0",
                kubeconfig,
                host,
                "--log-level",
                "WARNING",
                log_path=root / "agent.log",
                program=program,
                env=env,
            )
            try:
                probe = psutil.Process(agent.pid)
                # Warm-up, not measured: imports, the first lists, one hold and release.
                await api.wait_for(_soak_event(api, -4) or (lambda: True), 60.0)
                await api.wait_for(_soak_event(api, -2) or (lambda: True), 10.0)
                out: list[tuple[int, int, int]] = []
                every = max(1, events // samples)
                for i in range(events):
                    awaited = _soak_event(api, i)
                    # The agent holds the request, or releases it once the build pod is
                    # gone: each cycle goes through it, or the soak stops here, saying why.
                    try:
                        await api.wait_for(awaited or (lambda: True), 10.0)
                    except TimeoutError:
                        tail = agent.lines[-15:]
                        user = agent_user("worker-0")
                        raise RuntimeError(
                            f"event {i}: the agent did not act (desiredDrain "
                            f"{_desired(api)!r}; open watches {api.open_watches}, its pod "
                            f"lists {api.request_count(user=user, verb='list')} and watches "
                            f"{api.request_count(user=user, verb='watch')}); its log ends:\n"
                            + "\n".join(tail)
                        ) from None
                    if i % every == 0 or i == events - 1:
                        await asyncio.sleep(0.2)
                        out.append((i + 1, probe.memory_info().rss, probe.num_fds()))
            finally:
                await agent.stop(timeout=10, kill_after=True)
            written = len(api.writes("nodes", user=agent_user("worker-0")))
    return SoakReport(events, out, time.monotonic() - began, written)


def _soak_event(api: Any, i: int) -> Callable[[], bool] | None:
    """One event of a churning node: pods come and go, requests are held and released.
    Returns what the agent must have done before the next event, if anything."""
    name = f"pod-{i % 40}"
    step = i % 10
    if step < 6:
        if api.try_get("pods", name, "churn") is None:
            api.create(
                "pods",
                {
                    "metadata": {"name": name, "namespace": "churn", "labels": {"i": str(i)}},
                    "spec": {"nodeName": "worker-0", "containers": [{"name": "c", "image": "x"}]},
                    "status": {"phase": "Running"},
                },
                "churn",
            )
        else:
            api.delete("pods", name, "churn")
    elif step == 6:
        labels = {BUILD_NAME_LABEL: f"build-{i}"}
        api.create(
            "pods",
            {
                "metadata": {"name": f"build-{i}", "namespace": MCO_NAMESPACE, "labels": labels},
                "spec": {"nodeName": "worker-0", "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running"},
            },
            MCO_NAMESPACE,
        )
        api.patch(
            "nodes",
            "worker-0",
            {"metadata": {"annotations": {DESIRED_DRAIN: f"drain-rendered-{i}"}}},
            user=MCD_USER,
        )
        return lambda: _desired(api) == f"hold-drain-rendered-{i}"
    elif step == 8:
        api.delete("pods", f"build-{i - 2}", MCO_NAMESPACE)
        return lambda: _desired(api) == f"drain-rendered-{i - 2}"
    else:
        api.patch("nodes", "worker-0", {"metadata": {"labels": {"churn": str(i)}}}, user=ADMIN_USER)
    return None


def _desired(api: Any) -> str | None:
    desired: str | None = annotations_of(api.get("nodes", "worker-0")).get(DESIRED_DRAIN)
    return desired
