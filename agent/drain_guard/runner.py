"""``drain-guard run`` as a process: build the parts, run them under one TaskGroup until
SIGTERM/SIGINT or a part fails, then release on uninstall, flush Events and close.

A crash is never an uninstall: only a stop by SIGTERM/SIGINT may release (and then only when
``--release-on-exit`` or the uninstall check says so); a part that failed or ended keeps every
hold, and the process exits 1 for its supervisor to restart it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from drain_guard import __version__, selfcheck
from drain_guard.config import Settings, WorkloadRef, format_duration
from drain_guard.controller import Controller, pod_watch_namespace
from drain_guard.events import EventQueue, EventRecorder
from drain_guard.kube import (
    BOOKMARK_PERIOD,
    WATCH_TIMEOUT,
    Kube,
    KubeError,
    WatchCache,
    WorkloadState,
)
from drain_guard.kubeclient import ConfigException
from drain_guard.logs import configure_logging
from drain_guard.metrics import MetricCounters, Metrics
from drain_guard.server import LateSource, make_app, serve
from drain_guard.shield import Shield
from drain_guard.shieldplan import NodeScope

log = logging.getLogger("drain_guard.runner")

#: On exit, how long to wait for queued Events (the uninstall's DrainReleased) to be written.
EVENT_FLUSH_TIMEOUT = 5.0


@dataclass(frozen=True)
class Stopped:
    """How the parts ended: the exit code, and whether a signal (SIGTERM/SIGINT) ended them,
    the only end that may undo what the process keeps."""

    code: int
    signalled: bool


def kept_after_error(stopped: Stopped, kept: str) -> str | None:
    """Why nothing is undone on exit when no signal ended the process (a failed or ended
    part: a crash, not an uninstall), or None after a signal."""
    if stopped.signalled:
        return None
    return f"stopped by an error, not by a signal: {kept} are kept (a crash is not an uninstall)"


async def shutdown_releases(settings: Settings, kube: Kube, stopped: Stopped) -> tuple[bool, str]:
    """Whether to release holds on exit, and why (uninstall vs rolling update)."""
    crashed = kept_after_error(stopped, "holds")
    if crashed is not None:
        return False, crashed
    if settings.observe_only:
        return False, "--observe-only: nothing is written"
    if settings.release_on_exit:
        return True, "--release-on-exit"
    ref: WorkloadRef | None = settings.daemonset
    if ref is None:
        return False, "no --daemonset and no --release-on-exit: holds are kept"
    # A hold left behind is bounded by the next agent's max-hold; a wrong release is not
    # undoable.
    return await uninstalling("DaemonSet", ref, kube.daemonset_state, kept="holds")


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


def make_shield(
    settings: Settings,
    kube: Kube,
    metrics: Metrics,
    pods: WatchCache,
    watch_timeout: int = WATCH_TIMEOUT,
) -> Shield | None:
    """The shield as ``drain-guard run`` starts it, on ``pods`` (the agent's pod watch)."""
    if not settings.shield_build_pods or settings.observe_only:  # budgets are writes
        # No shield, no watch of budgets: drop the series rather than show it unsynced forever.
        metrics.synced.remove("poddisruptionbudget")
        return None
    return Shield(
        kube,
        NodeScope(settings.node_name),
        settings.build_pod_selectors,
        pods,
        scope=settings.build_pod_scope,
        dependencies=settings.shield_dependencies,
        metrics=metrics,
        on_blocked_drain=metrics.count_shield_blocked_drain,
        watch_timeout=watch_timeout,
    )


class _StoppedError(Exception):
    """SIGTERM or SIGINT, or a part of the agent that returned: end the TaskGroup."""

    def __init__(self, part: str) -> None:
        super().__init__(part)
        self.part = part


async def _part(name: str, coro: Coroutine[Any, Any, None]) -> None:
    """Run one part; any end of it ends the agent (a failure is logged with its name)."""
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

    code = 0
    try:
        async with asyncio.TaskGroup() as group:
            for name, coro in {**parts, "stop": signalled()}.items():
                group.create_task(_part(name, coro), name=name)
    except* _StoppedError as ended:
        parts_ended = [e.part for e in ended.exceptions if isinstance(e, _StoppedError)]
        if "stop" not in parts_ended:
            log.error("%s task ended", ", ".join(parts_ended))
            code = 1
    except* Exception:
        code = 1
    log.info("stopping")
    return Stopped(code, signalled=code == 0 and stop.is_set())


async def interruptible(coro: Coroutine[Any, Any, int]) -> int:
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
        return 0


async def _main(settings: Settings) -> int:
    metrics = Metrics()
    counters = MetricCounters(metrics)
    try:  # the kubeconfig is read, the API not yet reached
        kube = await Kube.connect(settings.kubeconfig, counters, settings.api_socket)
    except (ConfigException, OSError, ValueError) as exc:
        log.error("cannot load Kubernetes config: %s", exc)
        return 2  # an invalid setting, as the CLI's other ones
    source = LateSource()
    try:  # before the start-up checks, so that the probes answer while they wait for the API
        runner, _ = await serve(make_app(source, metrics), settings.listen)
    except OSError as exc:
        log.error("cannot listen on %s: %s", settings.listen, exc)
        await kube.close()
        return 2
    try:
        return await interruptible(_agent(settings, metrics, counters, kube, source))
    finally:
        await runner.cleanup()


async def _agent(
    settings: Settings, metrics: Metrics, counters: MetricCounters, kube: Kube, source: LateSource
) -> int:
    try:
        if settings.daemonset is not None:
            assert settings.pod_name is not None  # config.settings_from requires it
            await selfcheck.check_daemonset(kube, settings.daemonset, settings.pod_name)
    except selfcheck.StartupError as exc:
        log.error("%s", exc)
        await kube.close()
        return 2
    await selfcheck.check_node(kube, settings.node_name)
    events = EventQueue(EventRecorder(kube, settings.node_name, metrics=metrics))
    metrics.set_observe_only(settings.observe_only)
    cache = WatchCache()
    shield = make_shield(settings, kube, metrics, cache)
    controller = Controller(settings, kube, metrics, counters, events, cache, shield)
    if settings.daemonset is None and not settings.release_on_exit:
        log.warning("neither --daemonset nor --release-on-exit: holds are kept on exit")
    source.target = controller
    log.info(
        "drain-guard %s guarding node %s (max-hold %s)%s",
        __version__,
        settings.node_name,
        settings.max_hold,
        "; observe-only: deciding, writing nothing" if settings.observe_only else "",
    )
    shielded = [] if shield is None else list(shield.status().namespaces)
    effective = {"apiServer": kube.api.configuration.host, **settings.effective()}
    log.info("settings", extra={"fields": {**effective, "shieldNamespaces": shielded}})
    parts = {
        "node": kube.watch_node(settings.node_name, cache),
        "pods": kube.watch_pods(settings.node_name, cache, pod_watch_namespace(settings)),
        "controller": controller.run(),
    }
    if shield is not None:
        parts["shield"] = shield.run()
    # Events outlive the parts: the uninstall's release below still writes one.
    sender = asyncio.create_task(events.run(), name="events")
    checker = asyncio.create_task(
        selfcheck.report_confinement(
            kube,
            settings.node_name,
            metrics,
            lambda c: setattr(controller, "confinement", c),
            settings.confinement_check_interval.total_seconds(),
        ),
        name="confinement",
    )
    try:
        stopped = await until_stopped(parts)
        code = stopped.code
        try:
            release, why = await shutdown_releases(settings, kube, stopped)
            log.info("on exit: %s", why)
            if release:
                await controller.release_on_exit()
                if shield is not None:
                    # Uninstalled: leave no budgets behind (a rolling update keeps them).
                    log.info("on exit: removed %d shield budgets", await shield.remove_all())
        except KubeError as exc:
            log.error("could not release on exit: %s", exc)
            code = 1
        try:
            async with asyncio.timeout(EVENT_FLUSH_TIMEOUT):
                await events.flush()
        except TimeoutError:
            log.warning("exiting with Events not yet written")
    finally:
        sender.cancel()
        checker.cancel()
        await asyncio.gather(sender, checker, return_exceptions=True)
        await kube.close()
    return code


#: Below this, a healthy idle watch (a bookmark about once a minute from kube-apiserver) can
#: look stale between two bookmarks, and ``/readyz`` flaps.
MIN_API_STALE_AFTER = timedelta(seconds=2 * BOOKMARK_PERIOD)


def warn_short_api_stale_after(api_stale_after: timedelta) -> None:
    """Say at start when ``--api-stale-after`` is too short for a real API server.

    A warning, not a refusal: against an API server that sends bookmarks faster (the
    simulator's tests) a few seconds is meaningful."""
    if api_stale_after < MIN_API_STALE_AFTER:
        log.warning(
            "--api-stale-after %s is below %s: kube-apiserver sends a bookmark on an idle"
            " watch about once a minute, so /readyz may fail while the API is healthy",
            format_duration(api_stale_after),
            format_duration(MIN_API_STALE_AFTER),
        )


def run_agent(settings: Settings) -> int:
    """``drain-guard run``: the agent until SIGTERM/SIGINT; 0 after a clean shutdown."""
    configure_logging(settings.log_format, settings.log_level)
    warn_short_api_stale_after(settings.api_stale_after)
    return asyncio.run(_main(settings))
