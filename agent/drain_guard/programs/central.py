"""``drain-guard shield``: one process that keeps the budgets of every node's build pods.

Where the per-node agents cannot be confined to their own node's budgets (OpenShift 4.15 and
4.16 have no ValidatingAdmissionPolicy; a systemd host's token has no node-name claim), they
hold no budget rights at all (``--shield-build-pods=false``) and this one process, with its
own service account, keeps the budgets from the control plane instead: the agent's
:class:`~drain_guard.shield.loop.Shield` in the every-node scope, on one watch of every pod of
MCO's namespace. Its endpoint is the agent's server; its steps are drain_guard.runtime.lifecycle's.

It lists and watches only the pods a build-pod selector may match: one paged list-watch
per selector, by the selector's positive terms (:func:`pod_watch_selectors`), never the whole
namespace, whose MCO daemon pods (one per node, about 9 KiB each) grow with the cluster. What
it holds, and what each event costs it, follows the build pods, not the nodes; and since
every pod whose labels include a build pod's is in those watches, whether a budget's selector
would single a pod out is read from them, with no list per build pod.

On SIGTERM the budgets stay (they are owned by their pods and guard them while the shield
restarts) unless its own Deployment is gone or being deleted: an uninstall removes them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from drain_guard import __version__
from drain_guard.core.operations import Watched
from drain_guard.core.pods import Pod
from drain_guard.core.selectors import MCO_NAMESPACE, BuildPodSelector
from drain_guard.kube.call import JsonObj
from drain_guard.kube.client import Kube
from drain_guard.kube.counters import WatchGroup
from drain_guard.kube.listwatch import ListWatch, WatchCache
from drain_guard.protocol import format_rfc3339
from drain_guard.runtime import selfcheck
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
from drain_guard.runtime.metrics import BaseMetrics
from drain_guard.runtime.server import LateSource
from drain_guard.settings.shield import ShieldSettings
from drain_guard.shield.loop import Shield
from drain_guard.shield.plan import EVERY_NODE, ShieldStatus

log = logging.getLogger("drain_guard.programs.central")


def pod_watch_selectors(selectors: Sequence[BuildPodSelector]) -> tuple[str, ...]:
    """The label selectors of the central shield's pod watches: each build-pod selector's
    positive terms, once each. A pod with all of a build pod's labels (and more) matches the
    one its build pod matched, so the watches show every pod a budget's selector would
    cover. A selector without a positive term (``!key`` alone) would watch the whole
    namespace: the settings refuse it (drain_guard.settings.shield)."""
    texts = (str(s.selector.positive()) for s in selectors if s.namespace in (None, MCO_NAMESPACE))
    return tuple(dict.fromkeys(texts))


@dataclass
class SelectedPods(WatchCache):
    """The central shield's pods: the union of its pod watches, one per label selector.

    A pod two watches show is kept in the newer of their versions (resourceVersions are
    etcd revisions, compared as numbers), so a watch that lags behind another does not put
    an older state back; it goes when no watch shows it any more.
    """

    watches: int = 1
    _shown_by: dict[tuple[str, str], set[int]] = field(default_factory=dict)
    _versions: dict[tuple[str, str], int] = field(default_factory=dict)
    _listed: set[int] = field(default_factory=set)

    def replace_for(self, watch: int) -> Callable[[Sequence[JsonObj]], None]:
        def replace(items: Sequence[JsonObj]) -> None:
            for key in [k for k, shown in self._shown_by.items() if watch in shown]:
                self._hide(key, watch)
            for item in items:
                self._show(watch, Pod.from_dict(item), item)
            self._listed.add(watch)
            self.pods_synced = len(self._listed) == self.watches
            self._notify_pods()

        return replace

    def apply_for(self, watch: int) -> Callable[[str, JsonObj], None]:
        def apply(kind: str, obj: JsonObj) -> None:
            pod = Pod.from_dict(obj)
            if kind == "DELETED":
                self._hide((pod.namespace, pod.name), watch)
            else:
                self._show(watch, pod, obj)
            self._notify_pods((pod.namespace, pod.name))

        return apply

    def _show(self, watch: int, pod: Pod, obj: JsonObj) -> None:
        key = (pod.namespace, pod.name)
        self._shown_by.setdefault(key, set()).add(watch)
        text = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        version = int(text) if text.isdigit() else None
        if version is not None and version < self._versions.get(key, -1):
            return  # another watch already delivered a newer version
        self.pods[key] = pod
        if version is None:
            self._versions.pop(key, None)
        else:
            self._versions[key] = version

    def _hide(self, key: tuple[str, str], watch: int) -> None:
        shown = self._shown_by.get(key)
        if shown is None:
            return
        shown.discard(watch)
        if not shown:
            del self._shown_by[key]
            self._versions.pop(key, None)
            self.pods.pop(key, None)


def watch_build_pods(kube: Kube, pods: SelectedPods, selectors: Sequence[str]) -> list[ListWatch]:
    """One paged list-watch of MCO's namespace per label selector, into ``pods``."""
    group = WatchGroup(kube.counters, len(selectors))
    return [
        ListWatch(
            resource=Watched.POD,
            list_fn=functools.partial(kube.core.list_namespaced_pod, MCO_NAMESPACE),
            field_selector="",
            label_selector=selector,
            replace=pods.replace_for(i),
            apply=pods.apply_for(i),
            counters=group.member(i),
            name=f"pods in {MCO_NAMESPACE} with {selector or 'any labels'}",
        )
        for i, selector in enumerate(selectors)
    ]


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
        lines += [f"  {line}" for line in s.text_lines()]
        return "\n".join(lines) + "\n"


class CentralShield:
    """The server's StatusSource for ``drain-guard shield``."""

    def __init__(
        self,
        shield: Shield,
        pods: WatchCache,
        counters: Health,
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
        return {"pod": self.counters.watch(Watched.POD).synced, "poddisruptionbudget": all(budgets)}

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
        """health's rule on the pod watch, and the budgets listed and watching: only then are
        budgets kept."""
        budgets = self.shield.status().synced.values()
        return self.counters.ready(
            (Watched.POD,),
            datetime.now(UTC),
            self.stale_after,
            also=None if all(budgets) else "poddisruptionbudget watch not synced",
        )


async def removes_on_exit(
    settings: ShieldSettings, kube: Kube, stopped: Stopped
) -> tuple[bool, str]:
    """Whether to remove the budgets on exit, and why (uninstall vs rolling update)."""
    crashed = kept_after_error(stopped, "budgets")
    if crashed is not None:
        return False, crashed
    ref = settings.deployment
    if ref is None:
        return False, "no --deployment: budgets are kept (each goes with its pod)"
    # A budget left behind goes with its pod; one removed too early opens a build to eviction.
    return await uninstalling("Deployment", ref, kube.deployment_state, kept="budgets")


class _Central:
    """The central shield's steps of the life-cycle (drain_guard.runtime.lifecycle.Program)."""

    def __init__(self, settings: ShieldSettings) -> None:
        self.settings = settings
        self.metrics = BaseMetrics()
        self.counters = Health(self.metrics)
        self.source = LateSource()  # the CentralShield, once the start-up check has passed

    def program(self) -> Program[Kube]:
        connect = functools.partial(Kube.connect, self.settings.api.kubeconfig, self.counters)
        return status_server_program(
            connect, self.settings.reporting.listen, self.source, self.metrics, self.start
        )

    async def start(self, kube: Kube) -> Running:
        settings = self.settings
        if settings.deployment is not None:
            await selfcheck.check_deployment(kube, settings.deployment)
        selectors = pod_watch_selectors(settings.scope.build_pod_selectors)
        pods = SelectedPods(watches=len(selectors))
        shield = Shield(
            kube,
            EVERY_NODE,
            settings.scope.build_pod_selectors,
            pods,
            metrics=self.metrics,
            uniqueness_from_pods=True,
        )
        source = CentralShield(shield, pods, self.counters, settings.api.api_stale_after)
        self.source.target = source
        log.info("drain-guard %s shielding the build pods of every node", __version__)
        fields = {"apiServer": kube.api.configuration.host, **settings.effective()}
        shielded = list(shield.status().namespaces)
        fields |= {"shieldNamespaces": shielded, "podWatchSelectors": list(selectors)}
        log.info("settings", extra={"fields": fields})
        watches = watch_build_pods(kube, pods, selectors)
        parts = {f"pods-{i}": w.run() for i, w in enumerate(watches)}

        async def on_exit(stopped: Stopped) -> int:
            remove, why = await removes_on_exit(settings, kube, stopped)
            log.info("on exit: %s", why)
            if remove:
                log.info("on exit: removed %d shield budgets", await shield.remove_all())
            return stopped.code

        return Running(
            {**parts, "shield": shield.run()}, on_exit, {"announce": source.announce_synced()}
        )


def run_shield(settings: ShieldSettings) -> int:
    """``drain-guard shield``: the central shield until SIGTERM/SIGINT; 0 after a clean stop."""
    configure_logging(settings.reporting.log_format, settings.reporting.log_level)
    warn_short_api_stale_after(settings.api.api_stale_after)
    return asyncio.run(run_program(_Central(settings).program()))
