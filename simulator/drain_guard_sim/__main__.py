"""``drain-guard-sim demo``: the simulated cluster's own command (``drain-guard demo`` runs it)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from drain_guard_sim import demo


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
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    code: int = demo.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
