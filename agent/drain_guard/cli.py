"""``drain-guard run | shield | webhook | node-proxy | copy-booted-origin | status | hold | release
| preflight | demo``.

``run`` is the agent; ``shield`` the central shield (docs/shield.md), where the agents may keep no
budgets; ``webhook`` the admission webhook that confines the agents on OpenShift 4.15/4.16
(drain_guard.programs.webhook); ``node-proxy`` holds the node's credential for a systemd agent and
passes on only that agent's requests about its own Node (drain_guard.programs.nodeproxy).
``status``, ``hold``, ``release`` and ``preflight`` are operator tools that talk to the API with the
caller's own credentials (``--kubeconfig`` / ``KUBECONFIG`` / in-cluster), so RBAC decides who may
hold or release (drain_guard.commands). ``demo`` is imported lazily: the agent never loads the
simulator.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NoReturn

from drain_guard import __version__
from drain_guard.commands.hold import run_hold
from drain_guard.commands.preflight.run import DEFAULT_RIGHTS, run_preflight
from drain_guard.commands.release import run_release
from drain_guard.commands.status import DEFAULT_ENDPOINT, run_status
from drain_guard.config.values import LogFormat, SettingsError, parse_duration
from drain_guard.core.exitcodes import EXIT_OK, EXIT_USAGE
from drain_guard.settings.agent import add_run_arguments, settings_from
from drain_guard.settings.commands import (
    CopyOriginCommand,
    copy_origin_command,
    hold_command,
    preflight_command,
    release_command,
    status_command,
)
from drain_guard.settings.hold import default_max_hold
from drain_guard.settings.nodeproxy import add_node_proxy_arguments, node_proxy_settings
from drain_guard.settings.shield import add_shield_arguments, shield_settings_from
from drain_guard.settings.webhook import add_webhook_arguments, webhook_settings

# The programs, and with them the API client (aiohttp, kubernetes_asyncio), are imported by
# main() when they run.

#: ``drain-guard node-proxy``'s defaults: the systemd unit's socket, the kubelet's kubeconfig.


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line on stderr (exit 2), no usage dump, and
    takes no abbreviation of a flag (``--node`` is not ``--node-name``: a typo is an error).

    The agent's log is what an operator sees of a bad manifest; one line reads best there.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # A negative duration (--max-hold -5m) is a value, refused as such, not a missing one.
        self._negative_number_matcher = re.compile(r"^-\d[\w.]*$")

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class SubcommandParser(OneLineParser):
    """A subcommand's parser: it refuses a flag it does not know itself, so the error names
    the subcommand (``drain-guard run: error: ...``); argparse would hand the flag up to the
    top parser, whose error names ``drain-guard`` alone."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="drain-guard",
        description="Hold OpenShift MCO drain requests while a drain would be harmful or useless.",
    )
    parser.add_argument("--version", action="version", version=f"drain-guard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=SubcommandParser)

    run = sub.add_parser("run", help="run the agent for one node")
    add_run_arguments(run)

    shield = sub.add_parser(
        "shield", help="keep the build pods' PodDisruptionBudgets of every node (central shield)"
    )
    add_shield_arguments(shield)

    proxy = sub.add_parser(
        "node-proxy",
        help="serve a local agent its own Node's requests with the node's credential (systemd)",
    )
    add_node_proxy_arguments(proxy)

    origin = sub.add_parser(
        "copy-booted-origin",
        help="copy the booted deployment's origin file alone, for an agent that sees no more",
    )
    origin.add_argument("--host-root", required=True, help="where the host's / is mounted")
    origin.add_argument(
        "--cmdline-file",
        default="/proc/cmdline",
        help="the kernel command line (default: %(default)s)",
    )
    origin.add_argument(
        "--to", required=True, help="the directory to copy into (the agent's --host-root)"
    )

    webhook = sub.add_parser(
        "webhook",
        help="serve the admission webhook that confines drain-guard (OpenShift 4.15/4.16)",
    )
    add_webhook_arguments(webhook)

    status = sub.add_parser("status", help="show a node's hold state")
    _add_client_arguments(status)
    status.add_argument(
        "--node-name", help="node to show (default: NODE_NAME, else every node with a hold)"
    )
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    status.add_argument(
        "--endpoint",
        help=f"the agent's HTTP endpoint to include (default: try {DEFAULT_ENDPOINT})",
    )
    # Accepted for the scripts that pass it, and ignored: a hold's end is on its Node.
    status.add_argument("--max-hold", help=argparse.SUPPRESS)

    hold = sub.add_parser(
        "hold",
        help="hold the drains of a node for a while (writes drain-guard.io/hold-request;"
        " release withdraws it)",
    )
    _add_client_arguments(hold)
    hold.add_argument("--node-name", required=True, help="node whose drains to hold")
    hold.add_argument(
        "--for", dest="duration", type=_duration, required=True, help="how long, e.g. 30m, 2h"
    )
    hold.add_argument(
        "--reason", required=True, help="why, one line (shown in drain-guard status and Events)"
    )

    release = sub.add_parser(
        "release",
        help="release a held drain now (outcome manual), or remove stale drain-guard keys",
    )
    _add_client_arguments(release)
    target = release.add_mutually_exclusive_group(required=True)
    target.add_argument("--node-name", help="node whose hold to release")
    target.add_argument("--all", action="store_true", help="release every node's hold")

    preflight = sub.add_parser(
        "preflight",
        help="say which install fits this cluster, and prove the installed confinement"
        " (docs/rights.md's rows, as the agent, dry run)",
    )
    _add_client_arguments(preflight)
    preflight.add_argument(
        "--namespace", default="drain-guard", help="the agent's namespace (default: %(default)s)"
    )
    preflight.add_argument(
        "--service-account",
        default="drain-guard",
        help="the agent's ServiceAccount (default: %(default)s)",
    )
    preflight.add_argument(
        "--node-name", help="the node whose agent to impersonate (default: the first agent pod's)"
    )
    preflight.add_argument(
        "--install",
        help="the overlay whose rows to prove (default: the one that fits the cluster)",
    )
    preflight.add_argument(
        "--rights",
        default=str(DEFAULT_RIGHTS),
        help="the rights table (default: docs/rights.md as this drain-guard ships it)",
    )

    # Listed for --help only: main() hands ``demo ...`` to the demo's own parser, so that
    # building this parser, as ``run`` does, never imports the simulator.
    sub.add_parser("demo", help="run the seed scenario in a simulated cluster (see demo --help)")
    return parser


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except SettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="kubeconfig file (default: KUBECONFIG, else in-cluster, else ~/.kube/config)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:
        return _demo(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "run":
        try:
            settings = settings_from(args, os.environ)
        except SettingsError as exc:
            print(f"drain-guard run: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if not os.path.isdir(settings.host.host_root):
            print(
                f"drain-guard run: error: --host-root {settings.host.host_root}: no such directory"
                " (where the host's / is mounted)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        from drain_guard.programs.runner import run_agent  # lazily: status/release need none of it

        return run_agent(settings)
    if args.command == "shield":
        try:
            shield_settings = shield_settings_from(args, os.environ)
        except SettingsError as exc:
            print(f"drain-guard shield: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        from drain_guard.programs.central import run_shield

        return run_shield(shield_settings)
    if args.command == "webhook":
        from drain_guard.programs import webhook

        try:
            webhook_config = webhook_settings(args, os.environ)
        except SettingsError as exc:  # logged as the pod's log is, one line
            return webhook.refuse(LogFormat(args.log_format), exc)
        return webhook.main(webhook_config)
    if args.command == "node-proxy":
        try:
            proxy_settings = node_proxy_settings(args, os.environ)
        except SettingsError as exc:
            print(f"drain-guard node-proxy: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        from drain_guard.programs.nodeproxy import main as nodeproxy_main

        return nodeproxy_main(proxy_settings)
    if args.command == "copy-booted-origin":
        return _copy_booted_origin(copy_origin_command(args))
    if args.command == "status":
        return asyncio.run(run_status(status_command(args, os.environ)))
    if args.command == "hold":
        try:
            hold = hold_command(args)
        except SettingsError as exc:
            print(f"drain-guard hold: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return asyncio.run(run_hold(hold))
    if args.command == "preflight":
        return run_preflight(preflight_command(args))
    assert args.command == "release", args.command  # "demo" never reaches the parser
    return asyncio.run(run_release(release_command(args)))


def _copy_booted_origin(command: CopyOriginCommand) -> int:
    """One line either way, and exit 0 even when the host's booted image cannot be read: the
    agent then reads the same failure from the empty copy and its no-op guard abstains (a
    failed init container would keep the agent, and its build-pod guard, from starting)."""
    from pathlib import Path

    from drain_guard.node.host import HostError, copy_booted_origin

    prog = "drain-guard copy-booted-origin"
    target = Path(command.to)
    if not target.is_dir():
        print(f"{prog}: error: --to {target} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    try:
        copied = copy_booted_origin(Path(command.host_root), Path(command.cmdline_file), target)
    except HostError as exc:
        print(f"{prog}: nothing copied, the booted image is unknown: {exc}", file=sys.stderr)
        return EXIT_OK
    except OSError as exc:
        print(f"{prog}: nothing copied: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return EXIT_OK
    print(f"{prog}: copied {copied} to {target}")
    return EXIT_OK


def _demo(argv: Sequence[str]) -> int:
    """Hand over to the simulator's own command: a process boundary, so the agent never
    imports the simulator (a separate distribution, absent from the image)."""
    if importlib.util.find_spec("drain_guard_sim") is None:
        print(
            "drain-guard demo: error: the simulated cluster is not installed"
            " (pip install ./simulator from a drain-guard checkout, or run make demo)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # The demo's agents hold as long as the agent's default, scaled like every MCO duration:
    # passed in as the default of the demo's --agent-max-hold, so there is no second copy of
    # it; the simulator's demo then names itself drain-guard demo in its help and errors.
    max_hold = f"{default_max_hold().total_seconds():g}"
    demo = [sys.executable, "-m", "drain_guard_sim", "--as-drain-guard-demo", max_hold]
    os.execv(sys.executable, [*demo, *argv])
