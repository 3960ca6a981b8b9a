"""``drain-guard-sim``: the simulated cluster's own command: ``demo`` (``drain-guard demo`` runs
it) and ``serve`` (a cluster to try drain-guard by hand)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from drain_guard_sim.harness import demo, serve


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="drain-guard-sim", description="A simulated OpenShift cluster for drain-guard."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo.configure_parser(
        sub.add_parser(
            "demo",
            help="the seed scenario in a simulated cluster, without and with agents",
            description="The seed scenario in a simulated cluster, without and with agents.",
        )
    )
    serve.configure_parser(
        sub.add_parser(
            "serve",
            help="a simulated cluster to try drain-guard by hand (kubectl, agents, curl)",
            description="Serve a simulated OpenShift cluster on a fixed loopback port over TLS,"
            " with MCO's actors, until Ctrl-C; print the commands to try drain-guard in it.",
        )
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    code: int = demo.run(args) if args.command == "demo" else serve.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
