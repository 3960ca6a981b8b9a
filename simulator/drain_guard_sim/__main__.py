"""``drain-guard-sim``: the simulated cluster's own command: ``demo`` (``drain-guard demo`` runs
it) and ``serve`` (a cluster to try drain-guard by hand)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from drain_guard_sim.harness import demo, serve

#: The leading arguments with which ``drain-guard demo`` hands over to this command:
#: ``--as-drain-guard-demo SECONDS ARGS...`` runs ``demo ARGS...`` under the name
#: ``drain-guard demo``, with SECONDS (the agent's own --max-hold default) as the default of
#: ``--agent-max-hold``. The simulator never imports the agent, so it is told, not copied.
AS_DRAIN_GUARD_DEMO = "--as-drain-guard-demo"

DEMO_HELP = "the seed scenario in a simulated cluster, without and with agents"
DEMO_DESCRIPTION = "The seed scenario in a simulated cluster, without and with agents."


class Parser(argparse.ArgumentParser):
    """Takes no abbreviation of a flag (a typo is an error, never another flag) and refuses a
    flag it does not know itself, so a subcommand's error names the subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="drain-guard-sim", description="A simulated OpenShift cluster for drain-guard."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    demo.configure_parser(sub.add_parser("demo", help=DEMO_HELP, description=DEMO_DESCRIPTION))
    serve.configure_parser(
        sub.add_parser(
            "serve",
            help="a simulated cluster to try drain-guard by hand (kubectl, agents, curl)",
            description="Serve a simulated OpenShift cluster on a fixed loopback port over TLS,"
            " with MCO's actors, until Ctrl-C; print the commands to try drain-guard in it.",
        )
    )
    return parser


def build_drain_guard_demo_parser(agent_max_hold: float) -> argparse.ArgumentParser:
    """``drain-guard demo``'s parser: the demo's flags, the agent's default max hold filled."""
    parser = Parser(prog="drain-guard demo", description=DEMO_DESCRIPTION)
    demo.configure_parser(parser, agent_max_hold=agent_max_hold)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [AS_DRAIN_GUARD_DEMO] and len(argv) >= 2:
        args = build_drain_guard_demo_parser(float(argv[1])).parse_args(argv[2:])
        return demo.run(args)
    args = build_parser().parse_args(argv)
    code: int = demo.run(args) if args.command == "demo" else serve.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
