"""How the demo, the tests, the chaos harness and the benchmarks start a real agent for a
simulated node: one place, so that they all run the agent the same way."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from drain_guard_sim.hostfs import HostFS

__all__ = ["agent_command", "agent_user", "clean_environment", "run_args"]


def agent_user(node: str) -> str:
    """Each node's agent has its own ServiceAccount name here, so its requests and writes are
    attributable in the simulator's counters and write log."""
    return f"system:serviceaccount:drain-guard:drain-guard-{node}"


def run_args(node: str, kubeconfig: Path | str, host: HostFS, *extra: str) -> list[str]:
    """``drain-guard run`` arguments for ``node``: its identity, its host tree, any free port."""
    return [
        "run",
        "--node-name",
        node,
        "--kubeconfig",
        str(kubeconfig),
        "--listen",
        "127.0.0.1:0",
        "--host-root",
        str(host.root),
        "--cmdline-file",
        str(host.cmdline_file),
        *extra,
    ]


def agent_command(node: str, kubeconfig: Path | str, host: HostFS, *extra: str) -> list[str]:
    """The whole command line: this interpreter running ``python -m drain_guard run ...``."""
    return [sys.executable, "-m", "drain_guard", *run_args(node, kubeconfig, host, *extra)]


def clean_environment() -> dict[str, str]:
    """This process's environment without drain-guard settings: the flags alone decide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAIN_GUARD_")}
    env.pop("NODE_NAME", None)
    env.pop("KUBECONFIG", None)
    return env
