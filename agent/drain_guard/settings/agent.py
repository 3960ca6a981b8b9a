"""``drain-guard run``'s settings: the agent's flags, in the order ``--help`` lists them, and
their validation into :class:`Settings`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta

from drain_guard.config.alerts import ALERT_OPTIONS, AlertSettings, alert_settings
from drain_guard.config.blocking import BLOCKING_POD_OPTIONS, blocking_pod_settings
from drain_guard.config.effective import effective, shown_by
from drain_guard.config.options import (
    Option,
    OptionGroup,
    add_groups,
    env_name,
    options_of,
    validated,
)
from drain_guard.config.values import (
    LOG_LEVELS,
    Listen,
    LogFormat,
    SettingsError,
    format_duration,
    named,
    parse_api_stale_after,
    parse_build_pod_selectors,
    parse_duration,
    parse_listen,
    parse_scope,
)
from drain_guard.core.pods import ALL_NAMESPACES, DEFAULT_SCOPE, PodScope
from drain_guard.core.selectors import MCO_NAMESPACE, BuildPodSelector
from drain_guard.guards import Guard, registry
from drain_guard.settings.host import HOST_OPTIONS, HostSettings, host_settings
from drain_guard.settings.install import INSTALL_OPTION, Install, install_from

DEFAULT_LISTEN = "127.0.0.1:9797"
# The MCD gives up waiting for a drain after one hour (Degraded, FailedToDrain). A hold that
# long would turn "drain later" into "node degraded", and the drain itself needs time after
# the release, so holds of an hour or more are refused outright rather than merely warned.
MCD_DRAIN_TIMEOUT = timedelta(hours=1)
#: kube-apiserver's watch cache sends a watch's last bookmark 2 s before its end (within a
#: second): a shorter watch would end without one, and its renewal would start behind.
MIN_WATCH_TIMEOUT = timedelta(seconds=5)


def _reasons(guards: tuple[Guard, ...]) -> list[str]:
    return [guard.reason.value for guard in guards]


@dataclass(frozen=True)
class Settings:
    """Everything ``drain-guard run`` needs, already validated."""

    node_name: str
    kubeconfig: str | None
    host: HostSettings
    listen: Listen
    max_hold: timedelta
    build_pod_selectors: tuple[BuildPodSelector, ...]
    install: Install
    log_format: LogFormat
    log_level: str
    #: The namespaces whose pods may hold a drain (MCO's, and those opted in).
    build_pod_scope: PodScope = field(default=DEFAULT_SCOPE, metadata=shown_by(PodScope.names))
    shield_build_pods: bool = True
    shield_dependencies: bool = False
    api_stale_after: timedelta = timedelta(minutes=10)
    watch_timeout: timedelta = timedelta(minutes=30)
    confinement_check_interval: timedelta = timedelta(hours=1)
    observe_only: bool = False
    api_socket: str | None = None
    alerts: AlertSettings | None = None
    #: Operator-declared blocking pods, and the namespaces where they may run (each read
    #: with a Role there).
    blocking_pod_selectors: tuple[BuildPodSelector, ...] = ()
    blocking_pod_namespaces: tuple[str, ...] = ()
    #: The guards these settings turn on, in the registry's order (``guards.registry``).
    guards: tuple[Guard, ...] = field(default=(), metadata=shown_by(_reasons))

    def effective(self) -> dict[str, object]:
        """The settings in force, for the agent's start-up line (derived from the fields)."""
        return effective(self)


_OPTIONS: tuple[Option, ...] = (
    Option("--node-name", "NODE_NAME", None, "name of the Node this agent guards (required)"),
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
        "--pod-name",
        "POD_NAME",
        None,
        "this agent's pod (downward API metadata.name); with --daemonset, checked at start to"
        " be that DaemonSet's",
    ),
    *HOST_OPTIONS,
    Option(
        "--listen",
        env_name("--listen"),
        DEFAULT_LISTEN,
        "HOST:PORT of the status/metrics endpoint (port 0: any free port)",
    ),
    Option(
        "--max-hold",
        env_name("--max-hold"),
        "45m",
        "longest hold, e.g. 90s, 30m, 50m; must be below 1h (the MCD's drain timeout)",
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
    Option(
        "--confinement-check-interval",
        env_name("--confinement-check-interval"),
        "1h",
        "how often the confinement self-check runs again after the start (a dry-run write to"
        " another Node and a dry-run TokenRequest for another account must be denied)",
    ),
    Option(
        "--build-pod-selector",
        env_name("--build-pod-selector"),
        None,
        "build pods: [NAMESPACE:]LABEL-SELECTOR[@KIND[/NAME]] (repeatable; replaces the"
        " defaults; in the environment separate selectors with ';')",
        repeatable=True,
    ),
    Option(
        "--build-pod-namespace",
        env_name("--build-pod-namespace"),
        None,
        f"let build pods of this namespace hold drains too (repeatable; '{ALL_NAMESPACES}': every"
        f" namespace). Without it only pods of {MCO_NAMESPACE} can: elsewhere any user who can"
        " create a pod could hold drains. The agent then watches pods cluster-wide (still only"
        " its node's) and needs the ClusterRole of docs/install.md; in the environment separate"
        " namespaces with ';'",
        repeatable=True,
    ),
    *BLOCKING_POD_OPTIONS,
    INSTALL_OPTION,
    Option(
        "--daemonset",
        env_name("--daemonset"),
        None,
        "NAMESPACE/NAME of the agent's DaemonSet: on SIGTERM holds are released only if it is"
        " gone or being deleted",
    ),
    Option(
        "--release-on-exit",
        env_name("--release-on-exit"),
        None,
        "release holds on SIGTERM/SIGINT (for systemd, where there is no DaemonSet)",
        boolean=True,
    ),
    Option(
        "--shield-build-pods",
        env_name("--shield-build-pods"),
        "true",
        "keep a PodDisruptionBudget on each build pod running on the node, so that a drain"
        " that gets past the hold cannot evict it (docs/shield.md)",
        boolean=True,
    ),
    Option(
        "--shield-dependencies",
        env_name("--shield-dependencies"),
        None,
        "while a build runs, also shield the machine-os-builder and image registry pods on the"
        " node (off: their budgets outlive a dead agent; docs/shield.md)",
        boolean=True,
    ),
    Option(
        "--observe-only",
        env_name("--observe-only"),
        None,
        "decide as usual but write nothing (no Node patch, no budget, no Event): report what"
        " would have been done in the log, /status and metrics, for a first rollout",
        boolean=True,
    ),
    *ALERT_OPTIONS,
    *registry.options(),
    Option(
        "--log-format",
        env_name("--log-format"),
        LogFormat.TEXT.value,
        "log line format",
        choices=tuple(f.value for f in LogFormat),
    ),
    Option(
        "--log-level",
        env_name("--log-level"),
        "INFO",
        "log level",
        choices=LOG_LEVELS,
    ),
)


_BY_FLAG = {option.flag: option for option in _OPTIONS}


def _group(title: str, *flags: str) -> OptionGroup:
    return OptionGroup(title, tuple(_BY_FLAG.pop(flag) for flag in flags))


def _flags(options: tuple[Option, ...]) -> tuple[str, ...]:
    return tuple(option.flag for option in options)


#: ``drain-guard run``'s options by group: the groups of its settings and of its ``--help``.
RUN_GROUPS: tuple[OptionGroup, ...] = (
    _group("node", "--node-name"),
    _group("install", "--install", "--daemonset", "--pod-name", "--release-on-exit"),
    _group("api", "--kubeconfig", "--api-socket", "--api-stale-after", "--watch-timeout"),
    _group("host", *_flags(HOST_OPTIONS)),
    _group("hold", "--max-hold", "--observe-only"),
    _group(
        "scope",
        "--build-pod-selector",
        "--build-pod-namespace",
        *_flags(BLOCKING_POD_OPTIONS),
    ),
    _group("shield", "--shield-build-pods", "--shield-dependencies"),
    _group("alerts", *_flags(ALERT_OPTIONS)),
    _group("guards", *_flags(registry.options())),
    _group(
        "status and logs", "--listen", "--confinement-check-interval", "--log-format", "--log-level"
    ),
)
assert not _BY_FLAG, f"options in no group of drain-guard run: {sorted(_BY_FLAG)}"
RUN_OPTIONS = options_of(RUN_GROUPS)


def run_option(flag: str) -> Option:
    return next(opt for opt in RUN_OPTIONS if opt.flag == flag)


def default_max_hold() -> timedelta:
    """``--max-hold``'s default, defined once in ``RUN_OPTIONS``; ``drain-guard demo`` hands it
    to the simulator's demo, which cannot import the agent."""
    default = run_option("--max-hold").default
    assert default is not None
    return parse_duration(default)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``run`` flags; defaults stay ``None`` so the environment can fill them."""
    add_groups(parser, RUN_GROUPS)


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Merge flags (``args``), environment and defaults into validated :class:`Settings`.

    An error about a value taken from the environment names the variable, not the flag: the
    operator has to find it in a manifest or unit file, not on a command line.
    """
    return validated(RUN_OPTIONS, args, environ, _settings)


def _settings(raw: dict[str, object]) -> Settings:
    node_name = str(raw["node_name"] or "").strip()
    if not node_name:
        raise SettingsError("--node-name (or NODE_NAME) is required")

    max_hold = named("--max-hold", parse_duration, str(raw["max_hold"]))
    if max_hold <= timedelta(0):
        raise SettingsError("--max-hold must be greater than 0")
    if max_hold >= MCD_DRAIN_TIMEOUT:
        raise SettingsError(
            f"--max-hold {raw['max_hold']} is not below 1h: the MCD marks the node Degraded"
            " after waiting 1h for a drain"
        )

    api_stale_after = parse_api_stale_after(raw)
    watch_timeout = named("--watch-timeout", parse_duration, str(raw["watch_timeout"]))
    if watch_timeout < MIN_WATCH_TIMEOUT:
        raise SettingsError(
            f"--watch-timeout must be at least {format_duration(MIN_WATCH_TIMEOUT)}: the API"
            " server's bookmark comes 2 s before a watch's end"
        )
    confinement_check_interval = named(
        "--confinement-check-interval",
        parse_duration,
        str(raw["confinement_check_interval"]),
    )
    if confinement_check_interval <= timedelta(0):
        raise SettingsError("--confinement-check-interval must be greater than 0")
    selectors = parse_build_pod_selectors(raw)
    scope = parse_scope(raw["build_pod_namespace"])
    for selector in selectors:
        if selector.namespace is not None and not scope.contains(selector.namespace):
            raise SettingsError(
                f"--build-pod-selector {selector} names namespace {selector.namespace}, outside"
                f" the build-pod scope; opt it in with --build-pod-namespace {selector.namespace}"
            )

    shield_build_pods = bool(raw["shield_build_pods"])
    shield_dependencies = bool(raw["shield_dependencies"])
    if shield_dependencies and not shield_build_pods:
        raise SettingsError("--shield-dependencies needs --shield-build-pods=true")
    kubeconfig = raw["kubeconfig"]
    api_socket = str(raw["api_socket"] or "").strip() or None
    if api_socket is not None and kubeconfig is not None:
        raise SettingsError(
            "--api-socket excludes --kubeconfig: through the node proxy the agent holds no"
            " credential"
        )
    settings = Settings(
        node_name=node_name,
        kubeconfig=None if kubeconfig is None else str(kubeconfig),
        host=host_settings(raw),
        listen=named("--listen", parse_listen, str(raw["listen"])),
        max_hold=max_hold,
        build_pod_selectors=selectors,
        build_pod_scope=scope,
        install=install_from(raw),
        log_format=LogFormat(str(raw["log_format"])),
        log_level=str(raw["log_level"]),
        shield_build_pods=shield_build_pods,
        shield_dependencies=shield_dependencies,
        api_stale_after=api_stale_after,
        watch_timeout=watch_timeout,
        confinement_check_interval=confinement_check_interval,
        observe_only=bool(raw["observe_only"]),
        api_socket=api_socket,
        alerts=alert_settings(raw),
        **blocking_pod_settings(raw),
    )
    return replace(settings, guards=registry.build(settings, raw))
