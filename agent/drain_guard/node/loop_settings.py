"""What the controller's loop reads of ``drain-guard run``'s settings, and nothing else: the
runner builds it from the settings (:func:`loop_settings`), and the controller is given it
rather than all of ``Settings``, so what the loop depends on is this one list."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from drain_guard.guards import Guard
from drain_guard.node.watches import blocking_watch_namespaces, pod_watch_namespace
from drain_guard.settings.agent import Settings
from drain_guard.settings.host import HostSettings


@dataclass(frozen=True)
class LoopSettings:
    """The loop's settings: its node, the hold's bounds, the guards, where the booted image is
    read, how stale the API may get, and the scope and watches ``/status`` reports."""

    node_name: str
    max_hold: timedelta
    observe_only: bool
    guards: tuple[Guard, ...]
    host: HostSettings
    api_stale_after: timedelta
    #: Alert gating's query URL; None with alert gating off.
    alert_url: str | None
    build_pod_namespaces: tuple[str, ...]
    #: The namespace of the node's one pod watch; None: every one.
    pod_watch_namespace: str | None
    blocking_pod_namespaces: tuple[str, ...]
    #: The blocking-pod namespaces with a pod watch of their own (``node.watches``).
    blocking_watch_namespaces: tuple[str, ...]


def loop_settings(settings: Settings) -> LoopSettings:
    """What the loop reads of ``settings``."""
    scope, shield = settings.scope, settings.shield
    return LoopSettings(
        node_name=settings.node_name,
        max_hold=settings.hold.max_hold,
        observe_only=settings.hold.observe_only,
        guards=settings.guards,
        host=settings.host,
        api_stale_after=settings.api.stale_after,
        alert_url=None if settings.alerts is None else settings.alerts.url,
        build_pod_namespaces=tuple(scope.build_pod_scope.names()),
        pod_watch_namespace=pod_watch_namespace(scope, shield),
        blocking_pod_namespaces=scope.blocking_pod_namespaces,
        blocking_watch_namespaces=blocking_watch_namespaces(scope, shield),
    )
