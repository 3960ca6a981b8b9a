"""How the demo, the tests, the chaos harness and the benchmarks start a real agent for a
simulated node and read its log: one place, so that they all run the agent the same way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import aiohttp

from drain_guard_sim.actors.hostfs import HostFS

__all__ = [
    "AgentError",
    "AgentProcess",
    "agent_command",
    "agent_user",
    "clean_environment",
    "run_args",
    "spawn_agent",
    "spawn_shield",
    "spawn_webhook",
]

#: How much of the pipe one read takes; a log line may be longer (it is joined, never cut).
CHUNK = 1 << 16
#: Seconds: the default bound of each wait on an agent, never reached when all is well;
#: generous, for a loaded machine running tests on several workers.
WAIT = 60.0

_T = TypeVar("_T")


#: The message of the agent's decision records (``drain_guard.controller``), one per change
#: of decision; their fields are what the demo reads (``demoagents.AgentDecision``).
DECISION = "decision"


def agent_user(node: str) -> str:
    """Each node's agent has its own ServiceAccount name here, so its requests and writes are
    attributable in the simulator's counters and write log."""
    return f"system:serviceaccount:drain-guard:drain-guard-{node}"


def run_args(
    node: str,
    kubeconfig: Path | str | None,
    host: HostFS,
    *extra: str,
    listen: str = "127.0.0.1:0",
    boot_id: bool = True,
) -> list[str]:
    """``drain-guard run`` arguments for ``node``: its identity (none when ``kubeconfig`` is
    None: an ``--api-socket`` in ``extra``), its host tree (its boot id unless ``boot_id`` is
    False: an agent older than ``--boot-id-file``), a port (any free one unless ``listen``
    says)."""
    return [
        "run",
        "--node-name",
        node,
        *(() if kubeconfig is None else ("--kubeconfig", str(kubeconfig))),
        "--listen",
        listen,
        "--host-root",
        str(host.root),
        "--cmdline-file",
        str(host.cmdline_file),
        *(("--boot-id-file", str(host.boot_id_file)) if boot_id else ()),
        *extra,
    ]


def agent_command(
    node: str,
    kubeconfig: Path | str | None,
    host: HostFS,
    *extra: str,
    program: Sequence[str] = (),
    boot_id: bool = True,
) -> list[str]:
    """The whole command line: ``program`` (by default this interpreter running ``python -m
    drain_guard``; the benchmarks also run the agent as its image does) then ``run ...``."""
    command = program or (sys.executable, "-m", "drain_guard")
    return [*command, *run_args(node, kubeconfig, host, *extra, boot_id=boot_id)]


def clean_environment() -> dict[str, str]:
    """This process's environment without drain-guard settings: the flags alone decide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAIN_GUARD_")}
    env.pop("NODE_NAME", None)
    env.pop("KUBECONFIG", None)
    return env


class AgentError(AssertionError):
    """The agent exited (or did not) while the caller waited for something else; the message
    ends with the tail of its log."""


@dataclass
class AgentProcess:
    """A ``drain-guard run`` process and its log, read from stderr for as long as it runs.

    The log is read in chunks, not with ``readline()``: a line can be longer than a stream's
    64 KiB line limit (a huge annotation in a decision line), and a reader that died on it
    would leave the agent blocked on a full pipe.
    """

    node: str
    proc: asyncio.subprocess.Process
    started: float  #: ``time.monotonic()`` at the spawn
    lines: list[str] = field(default_factory=list)
    #: The lines that are JSON objects (``--log-format json``), in order.
    records: list[dict[str, Any]] = field(default_factory=list)
    #: The HTTP port, once the agent has logged its ``listening on`` line (field ``port``).
    port: int | None = None
    #: ``time.monotonic()`` of the first decision (both watches listed), and of the exit.
    synced_at: float | None = None
    ended: float | None = None
    on_record: Callable[[dict[str, Any]], None] | None = None
    log_file: IO[str] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _reader: asyncio.Task[None] | None = None

    @classmethod
    def attach(
        cls,
        node: str,
        proc: asyncio.subprocess.Process,
        *,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        log_path: Path | None = None,
    ) -> AgentProcess:
        """Start reading the log of ``proc`` (spawned with ``stderr=PIPE``) in the background."""
        agent = cls(
            node,
            proc,
            time.monotonic(),
            on_record=on_record,
            log_file=log_path.open("a") if log_path is not None else None,
        )
        agent._reader = asyncio.create_task(agent._read())
        return agent

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        pending = b""
        try:
            while chunk := await self.proc.stderr.read(CHUNK):
                *complete, pending = (pending + chunk).split(b"\n")
                for raw in complete:
                    self._add(raw)
            if pending:
                self._add(pending)
            await self.proc.wait()
        finally:
            self.ended = time.monotonic()
            if self.log_file is not None:
                self.log_file.close()
            self._changed.set()

    def _add(self, raw: bytes) -> None:
        line = raw.decode(errors="replace")
        self.lines.append(line)
        if self.log_file is not None:
            self.log_file.write(line + "\n")
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                self.records.append(record)
                self._note(record)
        self._changed.set()

    def _note(self, record: dict[str, Any]) -> None:
        port = record.get("port")
        if self.port is None and isinstance(port, int):
            self.port = port
        elif record.get("message") == DECISION:
            if self.synced_at is None:
                self.synced_at = time.monotonic()  # made only once both watches have listed
            if self.on_record is not None:
                self.on_record(record)

    def log_text(self, last: int = 60) -> str:
        return "\n".join(self.lines[-last:])

    async def _until(self, find: Callable[[], _T | None], timeout: float) -> _T:  # noqa: ASYNC109
        """Wait, woken by each new line, until ``find`` returns something."""
        async with asyncio.timeout(timeout):
            while True:
                self._changed.clear()
                found = find()
                if found is not None:
                    return found
                if self._reader is None or self._reader.done():
                    raise AgentError(f"agent for {self.node} exited:\n{self.log_text()}")
                await self._changed.wait()

    async def wait_log(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        start: int = 0,
        timeout: float = WAIT,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        """The first JSON log record, from index ``start``, that matches ``predicate``."""
        index = start

        def find() -> dict[str, Any] | None:
            nonlocal index
            while index < len(self.records):
                if predicate(self.records[index]):
                    return self.records[index]
                index += 1
            return None

        return await self._until(find, timeout)

    async def wait_line(self, fragment: str, timeout: float = WAIT) -> str:  # noqa: ASYNC109
        """The first log line containing ``fragment`` (for ``--log-format text``)."""
        return await self._until(
            lambda: next((line for line in self.lines if fragment in line), None), timeout
        )

    async def wait_synced(self, timeout: float = WAIT) -> float:  # noqa: ASYNC109
        """Until it listens and has made its first decision; seconds since the spawn."""
        await self._until(
            lambda: True if self.port is not None and self.synced_at is not None else None,
            timeout,
        )
        assert self.synced_at is not None
        return self.synced_at - self.started

    async def http(self, path: str) -> tuple[int, str]:
        """GET ``path`` on the agent's own endpoint: (status, body)."""
        assert self.port is not None, "the agent has not said where it listens yet"
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(f"http://127.0.0.1:{self.port}{path}") as resp,
        ):
            return resp.status, await resp.text()

    async def stop(
        self,
        sig: int = signal.SIGTERM,
        timeout: float = WAIT,  # noqa: ASYNC109
        *,
        kill_after: bool = False,
    ) -> int:
        """Send ``sig`` and wait for the exit and the last of the log. An agent that does not
        exit in ``timeout`` is killed if ``kill_after``, else it is an error showing its log."""
        if self.running:
            self.proc.send_signal(sig)
        try:
            async with asyncio.timeout(timeout):
                code = await self.proc.wait()
        except TimeoutError:
            if not kill_after:
                raise AgentError(
                    f"agent for {self.node} did not exit after signal {sig}:\n{self.log_text()}"
                ) from None
            self.proc.kill()
            code = await self.proc.wait()
        await self.closed()
        return code

    async def kill(self) -> None:
        """SIGKILL, as a node's crash would, and wait for the last of the log."""
        if self.running:
            self.proc.kill()
            await self.proc.wait()
        await self.closed()

    async def closed(self) -> None:
        """Until the log reader has read everything (the process has exited)."""
        if self._reader is not None:
            await self._reader


async def spawn_agent(
    node: str,
    kubeconfig: Path | str | None,
    host: HostFS,
    *extra: str,
    env: dict[str, str] | None = None,
    program: Sequence[str] = (),
    log_path: Path | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    boot_id: bool = True,
) -> AgentProcess:
    """Start ``drain-guard run`` for ``node`` with JSON logs on any free port (``extra`` flags
    come last, so they win), in an environment without drain-guard settings (plus ``env``).
    ``program`` runs drain-guard (see :func:`agent_command`); ``log_path`` keeps a copy of the
    log; ``on_record`` sees each decision record."""
    command = agent_command(
        node, kubeconfig, host, "--log-format", "json", *extra, program=program, boot_id=boot_id
    )
    return await _spawn(node, command, env, on_record=on_record, log_path=log_path)


#: What :func:`spawn_shield`'s process is called in errors (it guards no one node).
SHIELD = "central-shield"


async def spawn_shield(
    kubeconfig: Path | str,
    *extra: str,
    env: dict[str, str] | None = None,
    program: Sequence[str] = (),
) -> AgentProcess:
    """Start ``drain-guard shield`` (the central shield) with JSON logs on any free port;
    ``program`` runs drain-guard (default: ``python -m drain_guard`` in this environment)."""
    command = [
        *(program or (sys.executable, "-m", "drain_guard")),
        "shield",
        "--kubeconfig",
        str(kubeconfig),
        "--listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
        *extra,
    ]
    return await _spawn(SHIELD, command, env)


#: What :func:`spawn_webhook`'s process is called in errors.
WEBHOOK = "webhook"


async def spawn_webhook(
    kubeconfig: Path | str, cert_file: Path, key_file: Path, *extra: str
) -> AgentProcess:
    """Start ``drain-guard webhook`` over TLS with JSON logs on any free loopback port."""
    command = [
        sys.executable,
        "-m",
        "drain_guard",
        "webhook",
        "--kubeconfig",
        str(kubeconfig),
        "--tls-cert-file",
        str(cert_file),
        "--tls-private-key-file",
        str(key_file),
        "--listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
        *extra,
    ]
    return await _spawn(WEBHOOK, command, None)


async def _spawn(
    name: str,
    command: Sequence[str],
    env: dict[str, str] | None,
    *,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    log_path: Path | None = None,
) -> AgentProcess:
    """Run ``command`` without drain-guard settings in its environment (plus ``env``)."""
    environ = clean_environment()
    environ.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
    )
    return AgentProcess.attach(name, proc, on_record=on_record, log_path=log_path)
