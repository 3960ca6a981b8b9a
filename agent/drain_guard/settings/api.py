"""``drain-guard run``'s api group: where its API requests go (a kubeconfig, or the node proxy's
socket), when the API counts as stale, and how long its watches last."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from drain_guard.config.options import Option, SettingsGroup, env_name
from drain_guard.config.values import (
    SettingsError,
    format_duration,
    named,
    parse_api_stale_after,
    parse_duration,
)

#: kube-apiserver's watch cache sends a watch's last bookmark 2 s before its end (within a
#: second): a shorter watch would end without one, and its renewal would start behind.
MIN_WATCH_TIMEOUT = timedelta(seconds=5)

API_OPTIONS: tuple[Option, ...] = (
    Option(
        "--kubeconfig",
        "KUBECONFIG",
        None,
        "kubeconfig file; without it the in-cluster config, else ~/.kube/config",
    ),
    Option(
        "--api-socket",
        env_name("--api-socket"),
        None,
        "Unix socket of drain-guard node-proxy (the systemd install): every API request goes"
        " there, with no credential of the agent's own, and the proxy passes on only this"
        " Node's reads, hold, release and Events (docs/install.md, section 7); excludes"
        " --kubeconfig",
    ),
    Option(
        "--api-stale-after",
        env_name("--api-stale-after"),
        "10m",
        "/readyz fails when the API server has not answered for this long (watch events and"
        " bookmarks count)",
    ),
    Option(
        "--watch-timeout",
        env_name("--watch-timeout"),
        "30m",
        "timeoutSeconds asked on the Node and pod watches (each ±10 %): the API server ends"
        " a watch then, after a bookmark 2 s before, and the agent renews it from there; at"
        " least 5s",
    ),
)


@dataclass(frozen=True)
class ApiSettings:
    """Where the API requests go: ``kubeconfig`` (None: in-cluster, else ~/.kube/config) or
    the node proxy's ``socket`` (``--api-socket``, with no credential of the agent's own);
    ``stale_after`` (``--api-stale-after``) and ``watch_timeout``."""

    kubeconfig: str | None
    socket: str | None
    stale_after: timedelta
    watch_timeout: timedelta


def api_settings(raw: Mapping[str, object]) -> ApiSettings:
    watch_timeout = named("--watch-timeout", parse_duration, str(raw["watch_timeout"]))
    if watch_timeout < MIN_WATCH_TIMEOUT:
        raise SettingsError(
            f"--watch-timeout must be at least {format_duration(MIN_WATCH_TIMEOUT)}: the API"
            " server's bookmark comes 2 s before a watch's end"
        )
    kubeconfig = raw["kubeconfig"]
    socket = str(raw["api_socket"] or "").strip() or None
    if socket is not None and kubeconfig is not None:
        raise SettingsError(
            "--api-socket excludes --kubeconfig: through the node proxy the agent holds no"
            " credential"
        )
    return ApiSettings(
        kubeconfig=None if kubeconfig is None else str(kubeconfig),
        socket=socket,
        stale_after=parse_api_stale_after(raw),
        watch_timeout=watch_timeout,
    )


API = SettingsGroup("api", API_OPTIONS, api_settings)
