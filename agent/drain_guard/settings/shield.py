"""``drain-guard shield``'s settings: the central shield's flags (those it shares with
``run`` mean the same), one typed group a group of its ``--help``, as ``run``'s
(``settings/agent.py``): where its API requests go, which build pods it keeps budgets for, its
own Deployment, and its status and logs; each group built once into :class:`ShieldSettings`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from drain_guard.config.effective import effective
from drain_guard.config.options import (
    Option,
    OptionGroup,
    SettingsGroup,
    add_groups,
    env_name,
    options_of,
    validated,
)
from drain_guard.config.values import (
    Listen,
    LogFormat,
    SettingsError,
    WorkloadRef,
    named,
    parse_api_stale_after,
    parse_build_pod_selectors,
    parse_listen,
    parse_workload,
)
from drain_guard.core.selectors import MCO_NAMESPACE, BuildPodSelector
from drain_guard.settings.agent import run_option

DEFAULT_SHIELD_LISTEN = "127.0.0.1:9798"


@dataclass(frozen=True)
class ShieldApiSettings:
    """Where the shield's API requests go, and how long the API may be silent before its
    ``/readyz`` says so."""

    kubeconfig: str | None
    api_stale_after: timedelta


def _api(raw: Mapping[str, object]) -> ShieldApiSettings:
    kubeconfig = raw["kubeconfig"]
    return ShieldApiSettings(
        kubeconfig=None if kubeconfig is None else str(kubeconfig),
        api_stale_after=parse_api_stale_after(raw),
    )


@dataclass(frozen=True)
class ShieldScopeSettings:
    """The build pods the shield keeps budgets for: pods of MCO's namespace only."""

    build_pod_selectors: tuple[BuildPodSelector, ...]


def _scope(raw: Mapping[str, object]) -> ShieldScopeSettings:
    selectors = parse_build_pod_selectors(raw)
    for selector in selectors:
        if selector.namespace not in (None, MCO_NAMESPACE):
            raise SettingsError(
                f"--build-pod-selector {selector} names namespace {selector.namespace}: the"
                f" central shield keeps budgets in {MCO_NAMESPACE} only"
            )
        if selector.selector.positive().is_empty():
            # Its pod watch lists by the positive terms: none would list every pod of MCO's
            # namespace, a daemon pod per node (issue 28).
            raise SettingsError(
                f"--build-pod-selector {selector} has no label a pod must have (key=value,"
                " key in (...), or key): the central shield would watch every pod of"
                f" {MCO_NAMESPACE}; add one"
            )
    return ShieldScopeSettings(selectors)


def _deployment(raw: Mapping[str, object]) -> WorkloadRef | None:
    deployment = raw["deployment"]
    return None if deployment is None else parse_workload("--deployment", str(deployment))


@dataclass(frozen=True)
class ShieldReportingSettings:
    """Where the shield's ``/status`` and metrics are served, and its log's format and
    level."""

    listen: Listen
    log_format: LogFormat
    log_level: str


def _reporting(raw: Mapping[str, object]) -> ShieldReportingSettings:
    return ShieldReportingSettings(
        listen=named("--listen", parse_listen, str(raw["listen"])),
        log_format=LogFormat(str(raw["log_format"])),
        log_level=str(raw["log_level"]),
    )


API = SettingsGroup("api", (run_option("--kubeconfig"), run_option("--api-stale-after")), _api)
SCOPE = SettingsGroup(
    "scope",
    (
        Option(
            "--build-pod-selector",
            env_name("--build-pod-selector"),
            None,
            f"build pods: [{MCO_NAMESPACE}:]LABEL-SELECTOR[@KIND[/NAME]] (repeatable; replaces"
            " the defaults; in the environment separate selectors with ';'); only pods of"
            f" {MCO_NAMESPACE} are shielded",
            repeatable=True,
        ),
    ),
    _scope,
)
INSTALL = SettingsGroup(
    "install",
    (
        Option(
            "--deployment",
            env_name("--deployment"),
            None,
            "NAMESPACE/NAME of the shield's own Deployment, checked at start to exist: on"
            " SIGTERM the budgets are removed only if it is gone or being deleted (uninstall)",
        ),
    ),
    _deployment,
)
REPORTING = SettingsGroup(
    "status and logs",
    (
        Option(
            "--listen",
            env_name("--listen"),
            DEFAULT_SHIELD_LISTEN,
            "HOST:PORT of the status/metrics endpoint (port 0: any free port)",
        ),
        run_option("--log-format"),
        run_option("--log-level"),
    ),
    _reporting,
)

#: ``drain-guard shield``'s groups, in the order of its ``--help``, of :class:`ShieldSettings`'
#: fields and of its start-up line.
SHIELD_GROUPS: tuple[OptionGroup, ...] = (API, SCOPE, INSTALL, REPORTING)
SHIELD_OPTIONS = options_of(SHIELD_GROUPS)


@dataclass(frozen=True)
class ShieldSettings:
    """Everything ``drain-guard shield`` needs, already validated: a field a group of
    :data:`SHIELD_GROUPS`, in their order."""

    api: ShieldApiSettings
    scope: ShieldScopeSettings
    #: The shield's own Deployment (``--deployment``); None: not checked, budgets kept on exit.
    deployment: WorkloadRef | None
    reporting: ShieldReportingSettings

    def effective(self) -> dict[str, object]:
        """The settings in force, for the start-up line (derived from the fields)."""
        return effective(self)


def add_shield_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``shield`` flags by group, as :func:`add_run_arguments` does."""
    add_groups(parser, SHIELD_GROUPS)


def shield_settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ShieldSettings:
    """:func:`settings_from` for ``drain-guard shield``."""
    return validated(SHIELD_OPTIONS, args, environ, _shield_settings)


def _shield_settings(raw: Mapping[str, object]) -> ShieldSettings:
    """Each group built once, in order."""
    return ShieldSettings(
        api=API.build(raw),
        scope=SCOPE.build(raw),
        deployment=INSTALL.build(raw),
        reporting=REPORTING.build(raw),
    )
