"""``drain-guard run``'s api group: where its API requests go (a kubeconfig, or the node proxy's
socket), when the API counts as stale, and how long its watches last."""

from __future__ import annotations

from datetime import timedelta

from drain_guard.config.options import Option, env_name

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
