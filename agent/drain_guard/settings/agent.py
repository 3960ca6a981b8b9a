"""``drain-guard run``'s settings: one typed group a group of its ``--help`` (each declared,
with its options and how it is built, in its own module), built once from the merged flags,
environment and defaults into :class:`Settings`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field

from drain_guard.config.alerts import ALERTS, AlertSettings
from drain_guard.config.effective import effective, shown_by
from drain_guard.config.options import (
    Option,
    OptionGroup,
    SettingsGroup,
    add_groups,
    options_of,
    validated,
)
from drain_guard.config.scope import SCOPE, ScopeSettings
from drain_guard.config.values import SettingsError
from drain_guard.guards import Guard, GuardSettings, registry
from drain_guard.settings.api import API, ApiSettings
from drain_guard.settings.hold import HOLD, HoldSettings
from drain_guard.settings.host import HOST, HostSettings
from drain_guard.settings.install import INSTALL, Install
from drain_guard.settings.reporting import REPORTING, ReportingSettings
from drain_guard.settings.shielding import SHIELDING, ShieldingSettings


def _node_name(raw: Mapping[str, object]) -> str:
    node_name = str(raw["node_name"] or "").strip()
    if not node_name:
        raise SettingsError("--node-name (or NODE_NAME) is required")
    return node_name


NODE = SettingsGroup(
    "node",
    (Option("--node-name", "NODE_NAME", None, "name of the Node this agent guards (required)"),),
    _node_name,
)

#: ``drain-guard run``'s groups, in the order of its ``--help``, of :class:`Settings`' fields
#: and of its start-up line; the guards' options are built by the registry.
RUN_GROUPS: tuple[OptionGroup, ...] = (
    NODE,
    INSTALL,
    API,
    HOST,
    HOLD,
    SCOPE,
    SHIELDING,
    ALERTS,
    OptionGroup("guards", registry.options()),
    REPORTING,
)
RUN_OPTIONS = options_of(RUN_GROUPS)


def _reasons(guards: tuple[Guard, ...]) -> list[str]:
    return [guard.reason.value for guard in guards]


@dataclass(frozen=True)
class Settings:
    """Everything ``drain-guard run`` needs, already validated: a field a group of
    :data:`RUN_GROUPS`, in their order."""

    node_name: str
    install: Install
    api: ApiSettings
    host: HostSettings
    hold: HoldSettings
    scope: ScopeSettings
    shield: ShieldingSettings
    #: Alert gating; None: off.
    alerts: AlertSettings | None
    #: The guards these settings turn on, in the registry's order (``guards.registry``).
    guards: tuple[Guard, ...] = field(metadata=shown_by(_reasons))
    reporting: ReportingSettings

    def effective(self) -> dict[str, object]:
        """The settings in force, for the agent's start-up line (derived from the fields)."""
        return effective(self)


def run_option(flag: str) -> Option:
    return next(opt for opt in RUN_OPTIONS if opt.flag == flag)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``run`` flags by group; defaults stay ``None`` so the environment can fill
    them."""
    add_groups(parser, RUN_GROUPS)


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Merge flags (``args``), environment and defaults into validated :class:`Settings`.

    An error about a value taken from the environment names the variable, not the flag: the
    operator has to find it in a manifest or unit file, not on a command line.
    """
    return validated(RUN_OPTIONS, args, environ, _settings)


def _settings(raw: Mapping[str, object]) -> Settings:
    """Each group built once, in order; the guards from the groups they read and their own
    options."""
    node_name, install, api = NODE.build(raw), INSTALL.build(raw), API.build(raw)
    host, hold, scope = HOST.build(raw), HOLD.build(raw), SCOPE.build(raw)
    shield, alerts = SHIELDING.build(raw), ALERTS.build(raw)
    read_by_guards = GuardSettings(scope, alerts, through_node_proxy=api.socket is not None)
    return Settings(
        node_name=node_name,
        install=install,
        api=api,
        host=host,
        hold=hold,
        scope=scope,
        shield=shield,
        alerts=alerts,
        guards=registry.build(read_by_guards, raw),
        reporting=REPORTING.build(raw),
    )
