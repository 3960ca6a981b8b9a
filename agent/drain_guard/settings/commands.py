"""The commands' settings, typed (``status``, ``hold``, ``release``, ``preflight``,
``copy-booted-origin``): each command is given its value instead of the parsed command line; a
bad one is a ``SettingsError``, one line and exit 2 (``cli``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from drain_guard.config.values import SettingsError


@dataclass(frozen=True)
class StatusCommand:
    """``drain-guard status``: one node (None: every node with something to show), the view,
    the agent's endpoint to ask (None: the default one, tried), the caller's kubeconfig, and
    whether the ignored ``--max-hold`` was given (it is then said to be ignored)."""

    node_name: str | None
    output: str
    endpoint: str | None
    kubeconfig: str | None
    max_hold_given: bool


@dataclass(frozen=True)
class HoldCommand:
    """``drain-guard hold``: the node, for how long from now, why, the caller's kubeconfig."""

    node_name: str
    duration: timedelta
    reason: str
    kubeconfig: str | None


@dataclass(frozen=True)
class ReleaseCommand:
    """``drain-guard release``: one node, or every node (``node_name`` None: ``--all``)."""

    node_name: str | None
    kubeconfig: str | None


@dataclass(frozen=True)
class PreflightCommand:
    """``drain-guard preflight``: the caller's kubeconfig, the agent's namespace and account,
    the node whose agent to impersonate (None: the first agent pod's), the install whose rows
    to prove (None: the one that fits) and the rights table's file."""

    kubeconfig: str | None
    namespace: str
    service_account: str
    node_name: str | None
    install: str | None
    rights: str


@dataclass(frozen=True)
class CopyOriginCommand:
    """``drain-guard copy-booted-origin``: where the host's / is mounted, the kernel command
    line, and the directory to copy into."""

    host_root: str
    cmdline_file: str
    to: str


def status_command(args: argparse.Namespace, environ: Mapping[str, str]) -> StatusCommand:
    return StatusCommand(
        node_name=args.node_name or environ.get("NODE_NAME") or None,
        output=args.output,
        endpoint=args.endpoint,
        kubeconfig=args.kubeconfig,
        max_hold_given=args.max_hold is not None,
    )


def hold_command(args: argparse.Namespace) -> HoldCommand:
    if args.duration <= timedelta(0):
        raise SettingsError("--for must be above 0")
    return HoldCommand(args.node_name, args.duration, args.reason, args.kubeconfig)


def release_command(args: argparse.Namespace) -> ReleaseCommand:
    return ReleaseCommand(None if args.all else args.node_name, args.kubeconfig)


def preflight_command(args: argparse.Namespace) -> PreflightCommand:
    return PreflightCommand(
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        service_account=args.service_account,
        node_name=args.node_name,
        install=args.install,
        rights=args.rights,
    )


def copy_origin_command(args: argparse.Namespace) -> CopyOriginCommand:
    return CopyOriginCommand(args.host_root, args.cmdline_file, args.to)
