"""``drain-guard shield``: one process that keeps the budgets of every node's build pods.

Where the per-node agents cannot be confined to their own node's budgets (OpenShift 4.15 and
4.16 have no ValidatingAdmissionPolicy; a systemd host's token has no node-name claim), they
hold no budget rights at all (``--shield-build-pods=false``) and this one process, with its
own service account, keeps the budgets from the control plane instead: the agent's
:class:`~drain_guard.shield.Shield` in the every-node scope, on one watch of every pod of
MCO's namespace. Its endpoint is the agent's server, its parts run under the agent's runner.

On SIGTERM the budgets stay (they are owned by their pods and guard them while the shield
restarts) unless its own Deployment is gone or being deleted: an uninstall removes them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from drain_guard import __version__, selfcheck
from drain_guard.config import ShieldSettings
from drain_guard.kube import Kube, WatchCache
from drain_guard.kubeclient import ConfigException
from drain_guard.logs import configure_logging
from drain_guard.metrics import BaseMetrics, MetricCounters
from drain_guard.protocol import format_rfc3339
from drain_guard.runner import interruptible, uninstalling, until_stopped
from drain_guard.selectors import MCO_NAMESPACE
from drain_guard.server import LateSource, make_app, serve
from drain_guard.shield import EVERY_NODE, Shield, ShieldStatus
from drain_guard.status import WatchStatus, contact_unready, watches_unready

log = logging.getLogger("drain_guard.central")


@dataclass(frozen=True)
class CentralStatus:
    """What the central shield's ``/status`` shows: its watches and its shield."""

    version: str
    started_at: datetime
    generated_at: datetime
    synced: dict[str, bool]
    last_api_contact: datetime | None
    shield: ShieldStatus

    def to_json(self) -> dict[str, Any]:
        contact = self.last_api_contact
        return {
            "version": self.version,
            "startedAt": format_rfc3339(self.started_at),
            "generatedAt": format_rfc3339(self.generated_at),
            "synced": dict(self.synced),
            "lastApiContact": None if contact is None else format_rfc3339(contact),
            "shield": self.shield.to_json(),
        }

    def to_text(self) -> str:
        s = self.shield
        lines = [
            f"central shield {self.version}: build pods of every node in {', '.join(s.namespaces)}",
            "  synced:        "
            + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in self.synced.items()),
        ]
        lines += [
            f"  shielded:      {h.pod.key} on {h.pod.node} ({h.pod.phase}): budget {h.budget}"
            for h in s.held
        ] or ["  shielded:      none"]
        lines += [
            f"  conflict:      {c.pod.key} on {c.pod.node}: also {', '.join(c.budgets)}"
            for c in s.conflicts
        ]
        lines += [f"  unshieldable:  {u.pod.key} on {u.pod.node}: {u.why}" for u in s.unshieldable]
        lines += [f"  forbidden:     {ns}: {why}" for ns, why in sorted(s.forbidden.items())]
        if s.last_error:
            lines.append(f"  last error:    {s.last_error}")
        return "\n".join(lines) + "\n"


class CentralShield:
    """The server's StatusSource for ``drain-guard shield``."""

    def __init__(
        self,
        shield: Shield,
        pods: WatchCache,
        counters: MetricCounters,
        stale_after: timedelta,
    ) -> None:
        self.shield = shield
        self.pods = pods
        self.counters = counters
        self.stale_after = stale_after
        self.started_at = datetime.now(UTC)

    def _synced(self) -> dict[str, bool]:
        """Each watch listed and watching now: a view that is complete and current."""
        budgets = self.shield.status().synced.values()
        return {"pod": self._pod_watch().synced, "poddisruptionbudget": all(budgets)}

    def _pod_watch(self) -> WatchStatus:
        return self.counters.watches.get("pod", WatchStatus())

    def status(self) -> CentralStatus:
        return CentralStatus(
            version=__version__,
            started_at=self.started_at,
            generated_at=datetime.now(UTC),
            synced=self._synced(),
            last_api_contact=self.counters.last_contact,
            shield=self.shield.status(),
        )

    def alive(self) -> bool:
        return self.shield.running

    async def announce_synced(self) -> None:
        """Log once that both watches have listed: from then on budgets are kept."""
        await self.shield.wait_status(
            lambda status: self.pods.pods_synced and all(status.synced.values())
        )
        log.info("watches synced: shielding the build pods of every node")

    def ready(self) -> tuple[bool, str]:
        """The agent's rule for the pod watch and the API contact (status.readiness), and the
        budgets listed and watching: only then are budgets kept."""
        now = datetime.now(UTC)
        budgets = self.shield.status().synced.values()
        why = (
            watches_unready(self.counters.watches, ("pod",), now, self.stale_after)
            or (None if all(budgets) else "poddisruptionbudget watch not synced")
            or contact_unready(self.counters.last_contact, now, self.stale_after)
        )
        return why is None, why or ""


async def removes_on_exit(settings: ShieldSettings, kube: Kube) -> tuple[bool, str]:
    """Whether to remove the budgets on exit, and why (uninstall vs rolling update)."""
    ref = settings.deployment
    if ref is None:
        return False, "no --deployment: budgets are kept (each goes with its pod)"
    # A budget left behind goes with its pod; one removed too early opens a build to eviction.
    return await uninstalling("Deployment", ref, kube.deployment_state, kept="budgets")


async def _main(settings: ShieldSettings) -> int:
    metrics = BaseMetrics()
    late = LateSource()
    try:  # first, so that the probes answer while the start-up check waits for the API
        runner, _ = await serve(make_app(late, metrics), settings.listen)
    except OSError as exc:
        log.error("cannot listen on %s: %s", settings.listen, exc)
        return 2  # an invalid setting, as the CLI's other ones
    try:
        return await interruptible(_shield(settings, metrics, late))
    finally:
        await runner.cleanup()


async def _shield(settings: ShieldSettings, metrics: BaseMetrics, late: LateSource) -> int:
    counters = MetricCounters(metrics)
    try:
        kube = await Kube.connect(settings.kubeconfig, counters)
    except (ConfigException, OSError, ValueError) as exc:
        log.error("cannot load Kubernetes config: %s", exc)
        return 2
    if settings.deployment is not None:
        try:
            await selfcheck.check_deployment(kube, settings.deployment)
        except selfcheck.StartupError as exc:
            log.error("%s", exc)
            await kube.close()
            return 2
    pods = WatchCache()
    shield = Shield(kube, EVERY_NODE, settings.build_pod_selectors, pods, metrics=metrics)
    source = CentralShield(shield, pods, counters, settings.api_stale_after)
    late.target = source
    log.info("drain-guard %s shielding the build pods of every node", __version__)
    fields = {"apiServer": kube.api.configuration.host, **settings.effective()}
    shielded = list(shield.status().namespaces)
    log.info("settings", extra={"fields": {**fields, "shieldNamespaces": shielded}})
    announce = asyncio.create_task(source.announce_synced(), name="announce")
    try:
        code = await until_stopped(
            {"pods": kube.watch_pods(None, pods, MCO_NAMESPACE), "shield": shield.run()}
        )
        remove, why = await removes_on_exit(settings, kube)
        log.info("on exit: %s", why)
        if remove:
            log.info("on exit: removed %d shield budgets", await shield.remove_all())
    finally:
        announce.cancel()
        await asyncio.gather(announce, return_exceptions=True)
        await kube.close()
    return code


def run_shield(settings: ShieldSettings) -> int:
    """``drain-guard shield``: the central shield until SIGTERM/SIGINT; 0 after a clean stop."""
    configure_logging(settings.log_format, settings.log_level)
    return asyncio.run(_main(settings))
