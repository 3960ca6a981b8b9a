"""``drain-guard run``'s settings: the agent's flags, in the order ``--help`` lists them, and
their validation into :class:`Settings`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta

from drain_guard.config.alerts import ALERT_OPTIONS, AlertSettings, alert_settings
from drain_guard.config.blocking import blocking_pod_settings
from drain_guard.config.effective import effective, shown_by
from drain_guard.config.options import (
    Option,
    OptionGroup,
    add_groups,
    options_of,
    validated,
)
from drain_guard.config.scope import SCOPE_OPTIONS
from drain_guard.config.values import (
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
from drain_guard.core.pods import DEFAULT_SCOPE, PodScope
from drain_guard.core.selectors import BuildPodSelector
from drain_guard.guards import Guard, registry
from drain_guard.settings.api import API_OPTIONS, MIN_WATCH_TIMEOUT
from drain_guard.settings.hold import HOLD_OPTIONS, MCD_DRAIN_TIMEOUT
from drain_guard.settings.host import HOST_OPTIONS, HostSettings, host_settings
from drain_guard.settings.install import INSTALL_OPTIONS, Install, install_from
from drain_guard.settings.reporting import REPORTING_OPTIONS
from drain_guard.settings.shielding import SHIELDING_OPTIONS


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
    *INSTALL_OPTIONS,
    *API_OPTIONS,
    *HOST_OPTIONS,
    *HOLD_OPTIONS,
    *SCOPE_OPTIONS,
    *SHIELDING_OPTIONS,
    *ALERT_OPTIONS,
    *registry.options(),
    *REPORTING_OPTIONS,
)


_BY_FLAG = {option.flag: option for option in _OPTIONS}


def _group(title: str, *flags: str) -> OptionGroup:
    return OptionGroup(title, tuple(_BY_FLAG.pop(flag) for flag in flags))


def _flags(options: tuple[Option, ...]) -> tuple[str, ...]:
    return tuple(option.flag for option in options)


#: ``drain-guard run``'s options by group: the groups of its settings and of its ``--help``.
RUN_GROUPS: tuple[OptionGroup, ...] = (
    _group("node", "--node-name"),
    _group("install", *_flags(INSTALL_OPTIONS)),
    _group("api", *_flags(API_OPTIONS)),
    _group("host", *_flags(HOST_OPTIONS)),
    _group("hold", *_flags(HOLD_OPTIONS)),
    _group("scope", *_flags(SCOPE_OPTIONS)),
    _group("shield", *_flags(SHIELDING_OPTIONS)),
    _group("alerts", *_flags(ALERT_OPTIONS)),
    _group("guards", *_flags(registry.options())),
    _group("status and logs", *_flags(REPORTING_OPTIONS)),
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
