"""``drain-guard shield``'s settings: the central shield's flags (those it shares with
``run`` mean the same) and their validation into :class:`ShieldSettings`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from drain_guard.config.effective import effective
from drain_guard.config.options import Option, add_arguments, env_name, validated
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


#: ``drain-guard shield``: the flags it shares with ``run`` mean the same there.
SHIELD_OPTIONS: tuple[Option, ...] = (
    run_option("--kubeconfig"),
    Option(
        "--listen",
        env_name("--listen"),
        DEFAULT_SHIELD_LISTEN,
        "HOST:PORT of the status/metrics endpoint (port 0: any free port)",
    ),
    run_option("--api-stale-after"),
    Option(
        "--build-pod-selector",
        env_name("--build-pod-selector"),
        None,
        f"build pods: [{MCO_NAMESPACE}:]LABEL-SELECTOR[@KIND[/NAME]] (repeatable; replaces the"
        " defaults; in the environment separate selectors with ';'); only pods of"
        f" {MCO_NAMESPACE} are shielded",
        repeatable=True,
    ),
    Option(
        "--deployment",
        env_name("--deployment"),
        None,
        "NAMESPACE/NAME of the shield's own Deployment, checked at start to exist: on"
        " SIGTERM the budgets are removed only if it is gone or being deleted (uninstall)",
    ),
    run_option("--log-format"),
    run_option("--log-level"),
)


@dataclass(frozen=True)
class ShieldSettings:
    """Everything ``drain-guard shield`` needs, already validated."""

    kubeconfig: str | None
    listen: Listen
    api_stale_after: timedelta
    build_pod_selectors: tuple[BuildPodSelector, ...]
    deployment: WorkloadRef | None
    log_format: LogFormat
    log_level: str

    def effective(self) -> dict[str, object]:
        """The settings in force, for the start-up line (derived from the fields)."""
        return effective(self)


def add_shield_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``shield`` flags, as :func:`add_run_arguments` does."""
    add_arguments(parser, SHIELD_OPTIONS)


def shield_settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ShieldSettings:
    """:func:`settings_from` for ``drain-guard shield``."""
    return validated(SHIELD_OPTIONS, args, environ, _shield_settings)


def _shield_settings(raw: Mapping[str, object]) -> ShieldSettings:
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
    kubeconfig = raw["kubeconfig"]
    deployment = raw["deployment"]
    return ShieldSettings(
        kubeconfig=None if kubeconfig is None else str(kubeconfig),
        listen=named("--listen", parse_listen, str(raw["listen"])),
        api_stale_after=parse_api_stale_after(raw),
        build_pod_selectors=selectors,
        deployment=None if deployment is None else parse_workload("--deployment", str(deployment)),
        log_format=LogFormat(str(raw["log_format"])),
        log_level=str(raw["log_level"]),
    )
