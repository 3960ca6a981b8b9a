"""``drain-guard run`` as a process (drain_guard.runtime.lifecycle's steps): the start-up checks,
the parts (the Node and pod watches, the controller, the shield), and the exit policy: release on
uninstall, flush Events.

A crash is never an uninstall: only a stop by SIGTERM/SIGINT may release (and then only when
``--release-on-exit`` or the uninstall check says so); a part that failed or ended keeps every
hold, and the process exits 1 for its supervisor to restart it.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from drain_guard import __version__
from drain_guard.config.values import format_duration
from drain_guard.core.exitcodes import EXIT_FAILURE
from drain_guard.core.operations import Watched
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Kube
from drain_guard.kube.counters import Counters, Relay, WatchGroup
from drain_guard.kube.listwatch import WATCH_TIMEOUT, NamedCache, WatchCache
from drain_guard.node.alertsource import AlertSource
from drain_guard.node.controller import Controller
from drain_guard.node.events import EventQueue, EventRecorder
from drain_guard.node.loop_settings import loop_settings
from drain_guard.node.mcowatch import discover
from drain_guard.runtime import selfcheck
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.runtime.health import Health
from drain_guard.runtime.lifecycle import (
    Program,
    Running,
    Stopped,
    kept_after_error,
    run_program,
    status_server_program,
    uninstalling,
    warn_short_api_stale_after,
)
from drain_guard.runtime.logs import configure_logging
from drain_guard.runtime.server import LateSource
from drain_guard.settings.agent import Settings
from drain_guard.settings.install import InstallKind
from drain_guard.shield.loop import Shield
from drain_guard.shield.plan import NodeScope

log = logging.getLogger("drain_guard.programs.runner")

#: On exit, how long to wait for queued Events (the uninstall's DrainReleased) to be written.
EVENT_FLUSH_TIMEOUT = 5.0


async def shutdown_releases(settings: Settings, kube: Kube, stopped: Stopped) -> tuple[bool, str]:
    """Whether to release holds on exit, and why (uninstall vs rolling update)."""
    crashed = kept_after_error(stopped, "holds")
    if crashed is not None:
        return False, crashed
    if settings.hold.observe_only:
        return False, "--observe-only: nothing is written"
    install = settings.install
    if install.kind is InstallKind.SYSTEMD:
        return True, "--install systemd: a stopped service releases its holds"
    if install.daemonset is None:
        return False, f"--install {install.kind}: holds are kept"
    ref = install.daemonset
    # A hold left behind is bounded by the next agent's max-hold; a wrong release is not
    # undoable.
    return await uninstalling("DaemonSet", ref, kube.daemonset_state, kept="holds")


def make_shield(
    settings: Settings,
    kube: Kube,
    metrics: Metrics,
    pods: WatchCache,
    watch_timeout: int = WATCH_TIMEOUT,
) -> Shield | None:
    """The shield as ``drain-guard run`` starts it, on ``pods`` (the agent's pod watch)."""
    if not settings.shield.build_pods or settings.hold.observe_only:  # budgets are writes
        # No shield, no watch of budgets: drop the series rather than show it unsynced forever.
        metrics.synced.remove("poddisruptionbudget")
        return None
    return Shield(
        kube,
        NodeScope(settings.node_name),
        settings.scope.build_pod_selectors,
        pods,
        scope=settings.scope.build_pod_scope,
        dependencies=settings.shield.dependencies,
        metrics=metrics,
        on_blocked_drain=metrics.count_shield_blocked_drain,
        watch_timeout=watch_timeout,
    )


class _Agent:
    """The agent's steps of the life-cycle (drain_guard.runtime.lifecycle.Program)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.counters = Health(self.metrics)
        self.source = LateSource()  # the controller, once the start-up checks have passed

    def program(self) -> Program[Kube]:
        settings = self.settings
        connect = partial(Kube.connect, settings.api.kubeconfig, self.counters, settings.api.socket)
        return status_server_program(
            connect, settings.reporting.listen, self.source, self.metrics, self.start
        )

    async def start(self, kube: Kube) -> Running:
        settings, metrics = self.settings, self.metrics
        install = settings.install
        if install.daemonset is not None and install.pod_name is not None:  # --install daemonset
            await selfcheck.check_daemonset(kube, install.daemonset, install.pod_name)
        await selfcheck.check_node(kube, settings.node_name)
        # Through the node proxy (systemd) the node's identity may not read pools: their
        # Events then carry no uid (docs/install.md).
        recorder = EventRecorder(
            kube, settings.node_name, metrics=metrics, pool_uids=settings.api.socket is None
        )
        events = EventQueue(recorder)
        metrics.set_observe_only(settings.hold.observe_only)
        cache = WatchCache()
        watch_timeout = int(settings.api.watch_timeout.total_seconds())
        shield = make_shield(settings, kube, metrics, cache, watch_timeout)
        mco = await discover(kube, through_proxy=settings.api.socket is not None)
        loop = loop_settings(settings)
        controller = Controller(loop, kube, metrics, self.counters, events, cache, shield, mco=mco)
        recorder.watched_pool_uid = controller.mco.pool_uid
        if install.kind is InstallKind.STANDALONE:
            log.warning("--install standalone: holds are kept on exit")
        self.source.target = controller
        log.info(
            "drain-guard %s guarding node %s (max-hold %s)%s",
            __version__,
            settings.node_name,
            format_duration(settings.hold.max_hold),
            "; observe-only: deciding, writing nothing" if settings.hold.observe_only else "",
        )
        shielded = [] if shield is None else list(shield.status().namespaces)
        effective = {"apiServer": kube.api.configuration.host, **settings.effective()}
        log.info("settings", extra={"fields": {**effective, "shieldNamespaces": shielded}})
        pod_watches = WatchGroup(kube.counters, 1 + len(controller.blocking_caches))
        parts = {
            "node": kube.watch_node(settings.node_name, cache, watch_timeout),
            "pods": kube.watch_pods(
                settings.node_name,
                cache,
                loop.pod_watch_namespace,
                watch_timeout,
                counters=pod_watches.member(0),
            ),
            "controller": controller.run(),
        }
        if shield is not None:
            parts["shield"] = shield.run()
        for i, (namespace, pods) in enumerate(controller.blocking_caches.items(), start=1):
            parts[f"pods in {namespace}"] = kube.watch_pods(
                settings.node_name, pods, namespace, watch_timeout, pod_watches.member(i)
            )
        for ref, named in controller.named_caches.items():
            parts[ref.watch_name] = kube.watch_named(
                ref.resource,
                ref.namespace,
                ref.name,
                named,
                watch_timeout,
                _GuardRead(kube.counters, named),
            )
        parts.update(controller.mco.parts(kube, watch_timeout))
        if settings.alerts is not None:
            alerts = AlertSource(settings.alerts, controller.alerts_changed, controller.clock.now)
            parts["alerts"] = alerts.run()

        async def on_exit(stopped: Stopped) -> int:
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
                code = EXIT_FAILURE
            try:
                async with asyncio.timeout(EVENT_FLUSH_TIMEOUT):
                    await events.flush()
            except TimeoutError:
                log.warning("exiting with Events not yet written")
            return code

        confinement = selfcheck.report_confinement(
            kube,
            settings.node_name,
            metrics,
            lambda c: setattr(controller, "confinement", c),
            settings.reporting.confinement_check_interval.total_seconds(),
        )
        # Events outlive the parts: the uninstall's release on exit still writes one.
        helpers = {"events": events.run(), "confinement": confinement}
        return Running(parts, on_exit, helpers)


class _GuardRead(Relay):
    """A guard's watch of one named object: its errors and restarts are counted, its state
    is kept on its cache (the controller's ``/status`` and ``/readyz`` report it under the
    object's name), not reported as the resource's: the shield's budget watches report that."""

    def __init__(self, counters: Counters, cache: NamedCache) -> None:
        super().__init__(counters)
        self.cache = cache

    def watch_state(self, resource: Watched, state: WatchStatus) -> None:
        self.cache.watch = state


def run_agent(settings: Settings) -> int:
    """``drain-guard run``: the agent until SIGTERM/SIGINT; 0 after a clean shutdown."""
    configure_logging(settings.reporting.log_format, settings.reporting.log_level)
    warn_short_api_stale_after(settings.api.stale_after)
    return asyncio.run(run_program(_Agent(settings).program()))
