"""One process life-cycle for every drain-guard program (``run``, ``shield``, ``webhook``,
``node-proxy``): connect, serve, self-check, run the parts, apply the exit policy, close.

Each program is a :class:`Program`, a thin entry that says how to do each step; the order,
the exit codes and the handling of signals are here, once:

1. ``connect``: read the credentials (the API not yet reached); a bad kubeconfig exits 2.
2. ``serve``: open the listener before the start-up checks, so that the probes answer while
   they wait for the API; a listener that cannot be opened exits 2 (an invalid setting).
3. ``start``: the start-up self-checks (a :class:`~drain_guard.runtime.selfcheck.StartupError` exits
   2), then the parts, as a :class:`Running`.
4. the parts run under one TaskGroup until SIGTERM/SIGINT (exit 0) or until one of them ends
   or fails (exit 1: a crash, for the supervisor to restart it). A signal during 1-3 is a
   clean stop too (exit 0).
5. ``on_exit``, the exit policy, with how the parts ended (:class:`Stopped`): only a stop by
   a signal may undo what the process keeps (:func:`kept_after_error`); a crash never does.
6. the helpers that outlive the parts are cancelled, the listener and the client closed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from aiohttp import web

from drain_guard.config.values import Listen, WorkloadRef, format_duration
from drain_guard.core.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Kube, WorkloadState
from drain_guard.kube.kubeclient import ConfigException
from drain_guard.kube.listwatch import BOOKMARK_PERIOD
from drain_guard.runtime.metrics import BaseMetrics
from drain_guard.runtime.selfcheck import StartupError
from drain_guard.runtime.server import LateSource, make_app, serve

log = logging.getLogger("drain_guard.runtime.lifecycle")

Client = TypeVar("Client")


@dataclass(frozen=True)
class Stopped:
    """How the parts ended: the exit code, and whether a signal (SIGTERM/SIGINT) ended them,
    the only end that may undo what the process keeps."""

    code: int
    signalled: bool


async def keep_code(stopped: Stopped) -> int:
    """The exit policy of a program that keeps nothing to undo: the parts' exit code."""
    return stopped.code


@dataclass
class Running:
    """A program after its start-up checks: its parts (each runs until cancelled; any end of
    one ends the process), the exit policy, and helpers that outlive the parts (the agent's
    Event sender flushes the exit policy's Events) until the process closes."""

    parts: dict[str, Coroutine[Any, Any, None]]
    on_exit: Callable[[Stopped], Awaitable[int]] = keep_code
    helpers: dict[str, Coroutine[Any, Any, None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Program(Generic[Client]):
    """One drain-guard program, as the steps :func:`run_program` takes in order."""

    connect: Callable[[], Awaitable[Client]]
    serve: Callable[[Client], Awaitable[web.AppRunner]]
    listener: str  # what ``serve`` opens, for its error: "0.0.0.0:9797", "--socket /run/x"
    start: Callable[[Client], Awaitable[Running]]
    close: Callable[[Client], Awaitable[None]]


def status_server_program(
    connect: Callable[[], Awaitable[Kube]],
    listen: Listen,
    source: LateSource,
    metrics: BaseMetrics,
    start: Callable[[Kube], Awaitable[Running]],
) -> Program[Kube]:
    """A program on the Kubernetes API whose listener is drain-guard's status server
    (``/healthz``, ``/readyz``, ``/status``, ``/metrics``): the agent and the central shield."""

    async def serve_status(_: Kube) -> web.AppRunner:
        runner, _port = await serve(make_app(source, metrics), listen)
        return runner

    return Program(connect, serve_status, str(listen), start, Kube.close)


async def run_program(program: Program[Client]) -> int:
    """Run ``program`` through its life-cycle; the process's exit code (see the module)."""
    try:  # the credentials are read, the API not yet reached
        client = await program.connect()
    except (ConfigException, OSError, ValueError) as exc:
        log.error("cannot load Kubernetes config: %s", exc)
        return EXIT_USAGE  # an invalid setting, as the CLI's other ones
    try:
        try:
            runner = await program.serve(client)
        except OSError as exc:
            log.error("cannot listen on %s: %s", program.listener, exc)
            return EXIT_USAGE
        try:
            return await _interruptible(_run(program, client))
        finally:
            await runner.cleanup()
    finally:
        await program.close(client)


async def _run(program: Program[Client], client: Client) -> int:
    try:
        running = await program.start(client)
    except StartupError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    helpers = [asyncio.create_task(c, name=n) for n, c in running.helpers.items()]
    try:
        return await running.on_exit(await until_stopped(running.parts))
    finally:
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)


def kept_after_error(stopped: Stopped, kept: str) -> str | None:
    """Why nothing is undone on exit when no signal ended the process (a failed or ended
    part: a crash, not an uninstall), or None after a signal."""
    if stopped.signalled:
        return None
    return f"stopped by an error, not by a signal: {kept} are kept (a crash is not an uninstall)"


async def uninstalling(
    kind: str,
    ref: WorkloadRef,
    read_state: Callable[[str, str], Awaitable[WorkloadState]],
    *,
    kept: str,
) -> tuple[bool, str]:
    """Whether the workload that runs this process is gone or being deleted (an uninstall:
    undo what it keeps), not being replaced (a rolling update: keep it); and why, for the
    log. When its state cannot be read, keep: what is kept is bounded, a wrong undo is not."""
    try:
        state = await read_state(ref.namespace, ref.name)
    except KubeError as exc:
        return False, f"cannot read {kind} {ref} ({exc}): {kept} are kept"
    if state is WorkloadState.PRESENT:
        return False, f"{kind} {ref} exists (rolling update): {kept} are kept"
    return True, f"{kind} {ref} is {state.value} (uninstall)"


class _StoppedError(Exception):
    """SIGTERM or SIGINT, or a part of the process that returned: end the TaskGroup."""

    def __init__(self, part: str) -> None:
        super().__init__(part)
        self.part = part


async def _part(name: str, coro: Coroutine[Any, Any, None]) -> None:
    """Run one part; any end of it ends the process (a failure is logged with its name)."""
    try:
        await coro
    except Exception:
        log.exception("%s task failed", name)
        raise
    raise _StoppedError(name)


async def until_stopped(parts: dict[str, Coroutine[Any, Any, None]]) -> Stopped:
    """Run ``parts`` under one TaskGroup until a signal or until one of them ends; the exit
    code is 0 after a signal, 1 if a part failed or ended (each part runs until cancelled)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def signalled() -> None:
        await stop.wait()

    code = EXIT_OK
    try:
        async with asyncio.TaskGroup() as group:
            for name, coro in {**parts, "stop": signalled()}.items():
                group.create_task(_part(name, coro), name=name)
    except* _StoppedError as ended:
        parts_ended = [e.part for e in ended.exceptions if isinstance(e, _StoppedError)]
        if "stop" not in parts_ended:
            log.error("%s task ended", ", ".join(parts_ended))
            code = EXIT_FAILURE
    except* Exception:
        code = EXIT_FAILURE
    log.info("stopping")
    return Stopped(code, signalled=code == EXIT_OK and stop.is_set())


async def _interruptible(coro: Coroutine[Any, Any, int]) -> int:
    """Run the process's ``coro``; a SIGTERM or SIGINT before it reaches :func:`until_stopped`
    (which then takes the signals over), e.g. while its start-up checks wait for the API,
    cancels it: a clean stop, exit 0, logged as any stop."""
    task = asyncio.create_task(coro, name="main")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await task
    except asyncio.CancelledError:
        log.info("stopping (signalled before start-up completed)")
        return EXIT_OK


#: Below this, a healthy idle watch can look stale between two answers, and ``/readyz``
#: flaps: it hears from the API at least every 1.5 bookmark periods (a bookmark, at most one
#: a minute from kube-apiserver, or else the read that checks a quiet watch).
MIN_API_STALE_AFTER = timedelta(seconds=2 * BOOKMARK_PERIOD)


def warn_short_api_stale_after(api_stale_after: timedelta) -> None:
    """Say at start when ``--api-stale-after`` is too short for a real API server.

    A warning, not a refusal: against an API server that sends bookmarks faster (the
    simulator's tests) a few seconds is meaningful."""
    if api_stale_after < MIN_API_STALE_AFTER:
        log.warning(
            "--api-stale-after %s is below %s: an idle watch hears from kube-apiserver about"
            " every 90 s (a bookmark, or a read), so /readyz may fail while the API is healthy",
            format_duration(api_stale_after),
            format_duration(MIN_API_STALE_AFTER),
        )
