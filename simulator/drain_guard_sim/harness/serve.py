"""``drain-guard-sim serve``: the simulated cluster, left running for hand use.

It serves the API on a fixed loopback port over TLS (client-go sends a kubeconfig's token only
over TLS, so ``kubectl`` can write), with MCO's actors and N worker nodes with their host
trees, as the demo has them. It writes an admin kubeconfig, one kubeconfig per node for the
agents and the manifests docs/try-by-hand.md uses, prints the commands to try, then
prints the cluster's timeline (what MCO does) until SIGINT or SIGTERM.

The agents are not started here: starting them by hand is the point.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import TextIO

import yaml

from drain_guard_sim.actors.mco import MCO_NAMESPACE, Timings
from drain_guard_sim.actors.timeline import TimelineEntry
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.agentproc import run_args
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.seedobjects import machine_config

__all__ = ["configure_parser", "run"]

DEFAULT_WORKDIR = Path("/tmp/drain-guard-sim")
DEFAULT_PORT = 16443
DEFAULT_AGENT_PORT = 19797
MARKER = ".drain-guard-sim"  # a workdir this command made, and may wipe at the next start
SEED_CONFIG = "99-worker-seed"
HAND_BUILD_NODE = "worker-1"  # where the hand-made build pod goes: the rollout's second node


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=3, help="worker nodes (default: 3)")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"the API server's port on 127.0.0.1 (default: {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--agent-port",
        type=int,
        default=DEFAULT_AGENT_PORT,
        help="the first agent's /status port in the printed commands; worker-N gets this + N"
        f" (default: {DEFAULT_AGENT_PORT})",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=f"kubeconfigs, certificates, host trees and manifests; emptied at start if this"
        f" command made it (default: {DEFAULT_WORKDIR})",
    )
    parser.add_argument(
        "--time-factor",
        type=float,
        default=0.25,
        help="simulated seconds per MCO second (default: 0.25: a 120 s build takes 30 s)",
    )


def run(args: argparse.Namespace) -> int:
    error = _check(args)
    if error is not None:
        print(f"drain-guard-sim serve: {error}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(args, sys.stdout))
    except OSError as exc:
        print(f"drain-guard-sim serve: {exc}", file=sys.stderr)
        return 1


def _check(args: argparse.Namespace) -> str | None:
    if args.nodes < 3 or args.nodes > 50:
        return "--nodes must be from 3 to 50 (the commands use worker-0 to worker-2)"
    if not 0 < args.time_factor <= 1:
        return "--time-factor must be in (0, 1]"
    if not 1 <= args.port <= 65535:
        return "--port must be from 1 to 65535"
    if not 1 <= args.agent_port <= 65535 - args.nodes:
        return "--agent-port must leave room for one port per node below 65536"
    with socket.socket() as probe:  # before the workdir of a running serve is emptied
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", args.port))
        except OSError as exc:
            return f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror} (another serve?)"
    workdir: Path = args.workdir
    if workdir.exists() and not (workdir / MARKER).exists() and any(workdir.iterdir()):
        return f"--workdir {workdir} is not empty and was not made by drain-guard-sim serve"
    return None


def _fresh(workdir: Path) -> None:
    """An empty workdir, marked as ours: every run starts from the same state."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / MARKER).write_text("made by drain-guard-sim serve; emptied at its next start\n")
    logs_dir(workdir).mkdir(parents=True, exist_ok=True)


def logs_dir(workdir: Path) -> Path:
    """Where the printed commands send the agents' logs: beside the workdir, not in it, so
    that the next serve, which empties the workdir, leaves the last run's logs to read."""
    return workdir.with_name(f"{workdir.name}-logs")


def _manifests(workdir: Path) -> tuple[Path, Path]:
    """The seed's MachineConfig, and a build pod to create by hand on HAND_BUILD_NODE."""
    seed = workdir / f"{SEED_CONFIG}.yaml"
    # Files only, as the demo's: MCO 4.15's layered update never applies kernel arguments, so
    # a MachineConfig with some leaves its first node Degraded and the rollout stops there.
    seed.write_text(yaml.safe_dump(machine_config(SEED_CONFIG), sort_keys=False))
    build_pod = workdir / "build-pod.yaml"
    build_pod.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "build-by-hand",
                    "namespace": MCO_NAMESPACE,
                    "labels": {"openshift.io/build.name": "build-by-hand"},
                },
                "spec": {
                    "nodeName": HAND_BUILD_NODE,
                    "containers": [{"name": "build", "image": "builder"}],
                },
            },
            sort_keys=False,
        )
    )
    return seed, build_pod


def _held(node: str, timeout: str) -> str:
    return (
        f"kubectl wait node/{node} --for=jsonpath='{{.metadata.annotations.drain-guard\\.io/"
        f"held-drain}}' --timeout={timeout}"
    )


def commands(cluster: SimCluster, args: argparse.Namespace, kubeconfig: Path) -> str:
    """The commands to try, with this run's paths and ports: a script that runs top to
    bottom in a second terminal (docs/try-by-hand.md shows the default run's)."""
    seed, build_pod = _manifests(args.workdir)
    q = shlex.quote
    lines = [
        "# read and write as the cluster admin",
        f"export KUBECONFIG={q(str(kubeconfig))}",
        "kubectl get nodes",
        "# one agent per node, each with its node-bound identity and its host tree",
    ]
    for i, node in enumerate(cluster.node_names):
        argv = run_args(
            node,
            cluster.agent_kubeconfig(node),
            cluster.hosts[node],
            listen=f"127.0.0.1:{args.agent_port + i}",
        )
        log = logs_dir(args.workdir) / f"agent-{node}.log"
        lines.append(f"drain-guard {shlex.join(argv)} 2>{q(str(log))} &")
    lines.append(
        "# wait until each is ready (its watches listed), or MCO may drain before it looks"
    )
    for i in range(len(cluster.node_names)):
        lines.append(
            f"curl -sf --retry 30 --retry-connrefused --retry-delay 1"
            f" http://127.0.0.1:{args.agent_port + i}/readyz"
        )
    first = f"http://127.0.0.1:{args.agent_port}"
    second = f"http://127.0.0.1:{args.agent_port + 1}"
    third = f"http://127.0.0.1:{args.agent_port + 2}"
    lines += [
        f"# a build pod on {HAND_BUILD_NODE} (--validate=false: the simulator serves no OpenAPI"
        " schema),",
        "# and an operator's hold request on worker-2",
        f"kubectl create --validate=false -f {q(str(build_pod))}",
        "kubectl annotate node worker-2"
        " 'drain-guard.io/hold-request=2099-01-01T00:00:00Z;tried by hand'",
        "# the seed scenario: the MachineConfig starts a build on worker-0, and MCO 4.15 asks",
        "# to drain worker-0 for the image it runs",
        f"kubectl create --validate=false -f {q(str(seed))}",
        "# worker-0's drain is held: why?",
        _held("worker-0", "60s"),
        "kubectl get nodes -o custom-columns='NAME:.metadata.name,"
        "DRAIN:.metadata.annotations.machineconfiguration\\.openshift\\.io/desiredDrain,"
        "HELD:.metadata.annotations.drain-guard\\.io/held-drain'",
        "drain-guard status",
        f"drain-guard status --node-name worker-0 --endpoint {first}",
        f"curl -s '{first}/status?format=text'",
        "# MCO updates one worker at a time (maxUnavailable 1). After the build, worker-0 is",
        "# drained and rebooted (twice on 4.15: the stale same-image update, then the real one);",
        f"# then {HAND_BUILD_NODE}'s drain is held while the hand-made build pod exists (nothing"
        " runs it",
        "# here: it stays Pending until deleted)",
        _held(HAND_BUILD_NODE, "300s"),
        f"curl -s '{second}/status?format=text'",
        f"kubectl delete pod -n {MCO_NAMESPACE} build-by-hand",
        f"# {HAND_BUILD_NODE} is drained and updated; then worker-2's drain is held while the"
        " hold request is there",
        _held("worker-2", "300s"),
        f"curl -s '{third}/status?format=text'",
        "kubectl annotate node worker-2 drain-guard.io/hold-request-",
        "# worker-2 is drained and updated: the rollout is done",
        "kubectl wait machineconfigpools.machineconfiguration.openshift.io/worker"
        f" --for=jsonpath='{{.status.updatedMachineCount}}'={len(cluster.node_names)}"
        " --timeout=300s",
        "# stop the agents",
        "kill $(jobs -p)",
    ]
    return "\n".join(lines)


async def _print_timeline(cluster: SimCluster, out: TextIO) -> None:
    timeline = cluster.timeline
    printed = 0
    while True:
        seen = printed

        def new(_entry: TimelineEntry, seen: int = seen) -> bool:
            return len(timeline.entries) > seen

        await timeline.wait_for(new)
        entries = timeline.entries
        for entry in entries[printed:]:
            out.write(entry.format(cluster.timings.time_factor) + "\n")
        printed = len(entries)
        out.flush()


async def _serve(args: argparse.Namespace, out: TextIO) -> int:
    workdir: Path = args.workdir
    _fresh(workdir)
    tls = ServingCert.generate(workdir / "pki")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    cluster = SimCluster(
        workdir,
        nodes=args.nodes,
        time_factor=args.time_factor,
        # A node reboots in 20 s, as in the demo; every other duration is MCO's own.
        timings=Timings(reboot=20.0),
        port=args.port,
        tls=tls,
    )
    await cluster.start()
    # The seed's order: MCO 4.15's node controller loses its race with the build.
    cluster.lose_build_races()
    printer: asyncio.Task[None] | None = None
    try:
        kubeconfig = cluster.api.kubeconfig("system:admin", workdir / "kubeconfig")
        out.write(
            f"drain-guard-sim serve: {len(cluster.node_names)} workers on {cluster.api.url};"
            " Ctrl-C stops it.\n\nIn another terminal, with drain-guard installed"
            " (. .venv/bin/activate), try:\n\n"
            f"{commands(cluster, args, kubeconfig)}\n\n"
            "The cluster's timeline (MCO seconds since the start):\n"
        )
        out.flush()
        printer = asyncio.create_task(_print_timeline(cluster, out))
        await stop.wait()
    finally:
        if printer is not None:
            printer.cancel()
            await asyncio.gather(printer, return_exceptions=True)
        await cluster.stop()
    out.write("drain-guard-sim serve: stopped\n")
    out.flush()
    return 0
