"""Shared fixtures: the API simulator with one worker Node, and the agent as a subprocess.

The agent always runs as its own process (``python -m drain_guard run``), talking to the simulator
through the real kubernetes_asyncio client with its own identity, so what is tested is what
ships. Waits are event-driven: on the simulator's write log, or on the agent's log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from drain_guard import protocol
from drain_guard_sim.agentproc import agent_command, clean_environment
from drain_guard_sim.apiserver import SimApiServer
from drain_guard_sim.hostfs import HostFS
from drain_guard_sim.store import WriteRecord

NODE = "worker-0"
AGENT_USER = "system:serviceaccount:drain-guard:drain-guard"
MCO_NS = "openshift-machine-config-operator"
REGISTRY = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator"
IMAGE_A = f"{REGISTRY}/ocb-image@sha256:{'a' * 64}"
IMAGE_B = f"{REGISTRY}/ocb-image@sha256:{'b' * 64}"
CONFIG_A = "rendered-worker-" + "a" * 32
CONFIG_B = "rendered-worker-" + "b" * 32
WAIT = 15.0  # seconds: generous upper bounds for event-driven waits on a loaded machine


@pytest.fixture
async def api() -> AsyncIterator[SimApiServer]:
    """The simulator with a layered, idle worker Node booted into IMAGE_A."""
    async with SimApiServer() as server:
        server.create("namespaces", {"metadata": {"name": MCO_NS}})
        server.create("namespaces", {"metadata": {"name": "drain-guard"}})
        server.create(
            "nodes",
            {
                "metadata": {
                    "name": NODE,
                    "annotations": {
                        protocol.CURRENT_CONFIG: CONFIG_A,
                        protocol.DESIRED_CONFIG: CONFIG_A,
                        protocol.CURRENT_IMAGE: IMAGE_A,
                        protocol.DESIRED_IMAGE: IMAGE_A,
                        protocol.STATE: "Done",
                        protocol.DESIRED_DRAIN: f"uncordon-{CONFIG_A}",
                        protocol.LAST_APPLIED_DRAIN: f"uncordon-{CONFIG_A}",
                    },
                },
                "spec": {},
            },
        )
        yield server


@pytest.fixture
def host(tmp_path: Path) -> HostFS:
    return HostFS(tmp_path / "host", IMAGE_A)


def node_annotations(api: SimApiServer, name: str = NODE) -> dict[str, str]:
    annotations: dict[str, str] = api.get("nodes", name)["metadata"].get("annotations") or {}
    return annotations


def mcd_request(api: SimApiServer, value: str, name: str = NODE, **extra: str) -> int:
    """Write desiredDrain as the MCD does (strategic merge, no resourceVersion); returns rv."""
    node = api.patch(
        "nodes",
        name,
        {"metadata": {"annotations": {protocol.DESIRED_DRAIN: value, **extra}}},
        user="system:serviceaccount:openshift-machine-config-operator:machine-config-daemon",
    )
    return int(node["metadata"]["resourceVersion"])


def add_build_pod(api: SimApiServer, name: str = "build-pod", node: str = NODE) -> None:
    api.create(
        "pods",
        {
            "metadata": {
                "name": name,
                "namespace": MCO_NS,
                "labels": {"openshift.io/build.name": f"build-{CONFIG_B}"},
            },
            "spec": {"nodeName": node, "containers": [{"name": "build", "image": "builder"}]},
            "status": {"phase": "Running"},
        },
        MCO_NS,
    )


def agent_writes(
    api: SimApiServer, since: int = 0, resource: str | None = None
) -> list[WriteRecord]:
    """The agent's writes after ``since``, to ``resource`` only if given (``"nodes"``: its
    decisions, without the Events and shield budgets it writes in the background)."""
    return [w for w in api.writes(resource) if w.user == AGENT_USER and w.rv > since]


async def wait_annotation(
    api: SimApiServer, key: str, predicate: Callable[[str | None], bool], name: str = NODE
) -> dict[str, str]:
    """Wait (on the simulator's writes, no polling) until annotation ``key`` satisfies it."""

    def check() -> dict[str, str]:
        ann = node_annotations(api, name)
        return ann if predicate(ann.get(key)) else {}  # {} is falsy: keep waiting

    return await api.wait_for(check, timeout=WAIT)


@dataclass
class Agent:
    """A ``drain-guard run`` subprocess and its log (JSON lines on stderr)."""

    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    port: int | None = None
    _new_line: asyncio.Event = field(default_factory=asyncio.Event)
    _reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        # Chunks, not readline(): a log line can exceed the stream's 64 KiB line limit (a
        # huge annotation in a decision line), and a reader that dies on it would leave the
        # agent blocked on a full stderr pipe.
        assert self.proc.stderr is not None
        pending = b""
        while chunk := await self.proc.stderr.read(1 << 16):
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                self._add(raw)
        if pending:
            self._add(pending)
        self._new_line.set()

    def _add(self, raw: bytes) -> None:
        line = raw.decode(errors="replace")
        self.lines.append(line)
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                self.records.append(record)
        self._new_line.set()

    async def wait_log(
        self, predicate: Callable[[dict[str, Any]], bool], start: int = 0
    ) -> dict[str, Any]:
        """Wait for a JSON log record (from index ``start``) matching ``predicate``."""
        async with asyncio.timeout(WAIT):
            index = start
            while True:
                while index < len(self.records):
                    if predicate(self.records[index]):
                        return self.records[index]
                    index += 1
                if self.proc.returncode is not None and self._reader is not None:
                    await self._reader
                    if index >= len(self.records):
                        raise AssertionError(f"agent exited:\n{self.log_text()}")
                    continue
                self._new_line.clear()
                await self._new_line.wait()

    async def wait_line(self, fragment: str) -> str:
        """Wait for a raw log line containing ``fragment`` (for ``--log-format text``)."""
        async with asyncio.timeout(WAIT):
            index = 0
            while True:
                for line in self.lines[index:]:
                    if fragment in line:
                        return line
                index = len(self.lines)
                if self.proc.returncode is not None:
                    raise AssertionError(f"agent exited:\n{self.log_text()}")
                self._new_line.clear()
                await self._new_line.wait()

    async def wait_ready(self) -> None:
        """Until it listens (port known) and has made its first decision (watches synced)."""
        listening = await self.wait_log(
            lambda r: str(r.get("message", "")).startswith("listening on http://")
        )
        self.port = int(str(listening["message"]).rsplit(":", 1)[1])
        await self.wait_log(lambda r: r.get("message") == "decision")

    def log_text(self) -> str:
        return "\n".join(self.lines[-60:])

    async def http(self, path: str) -> tuple[int, str]:
        assert self.port is not None
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(f"http://127.0.0.1:{self.port}{path}") as resp,
        ):
            return resp.status, await resp.text()

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            async with asyncio.timeout(WAIT):
                code = await self.proc.wait()
                if self._reader is not None:
                    await self._reader
        except TimeoutError:
            raise AssertionError(
                f"agent did not exit after signal {sig}:\n{self.log_text()}"
            ) from None
        return code


StartAgent = Callable[..., Awaitable[Agent]]


async def spawn_agent(
    node: str,
    kubeconfig: Path,
    host: HostFS,
    *extra: str,
    ready: bool = True,
    env: dict[str, str] | None = None,
    on_start: Callable[[Agent], None] | None = None,
) -> Agent:
    """Start ``drain-guard run`` for ``node`` (JSON logs, ephemeral port); with ``ready``,
    return once it listens and has made its first decision (both watches synced)."""
    argv = agent_command(node, kubeconfig, host, "--log-format", "json", *extra)
    environ = clean_environment()
    environ.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
    )
    agent = Agent(proc)
    agent._reader = asyncio.create_task(agent._read())
    if on_start is not None:
        on_start(agent)  # registered for clean-up before anything can fail
    if ready:
        await agent.wait_ready()
    return agent


async def reap(agents: Sequence[Agent]) -> None:
    """Kill what is still running (a test that failed midway) and collect the readers."""
    for agent in agents:
        if agent.proc.returncode is None:
            agent.proc.kill()
            await agent.proc.wait()
        if agent._reader is not None:
            await agent._reader


@pytest.fixture
async def start_agent(api: SimApiServer, host: HostFS, tmp_path: Path) -> AsyncIterator[StartAgent]:
    """Start agents for NODE (as the test asks), and make sure they are gone afterwards."""
    kubeconfig = api.kubeconfig(AGENT_USER, tmp_path / "agent-kubeconfig")
    started: list[Agent] = []

    async def start(*extra: str, ready: bool = True, env: dict[str, str] | None = None) -> Agent:
        return await spawn_agent(
            NODE, kubeconfig, host, *extra, ready=ready, env=env, on_start=started.append
        )

    yield start
    await reap(started)


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run CLI code in-process without the caller's drain-guard environment."""
    for key in list(os.environ):
        if key.startswith("DRAIN_GUARD_") or key in ("NODE_NAME", "KUBECONFIG"):
            monkeypatch.delenv(key)


async def metric(agent: Agent, name: str, **labels: str) -> float:
    """One sample from the agent's /metrics (0 if absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = await agent.http("/metrics")
    assert status == 200
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``python -m drain_guard ARGS`` as a subprocess (the simulator keeps serving meanwhile)."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DRAIN_GUARD_") and k not in ("NODE_NAME", "KUBECONFIG")
    }
    environ.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "drain_guard",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
    )
    async with asyncio.timeout(WAIT):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
