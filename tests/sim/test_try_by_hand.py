"""docs/try-by-hand.md runs as written, from a fresh state, with the real kubectl.

The page's first block starts ``drain-guard-sim serve``; the second is the script it
prints, which must be exactly what ``serve`` prints (one source) and is run top to bottom
with bash, as a user would paste it. Only the workdir and the ports are moved (to a temporary
directory and free ports), so that the test cannot collide with a cluster someone is trying
by hand on this machine.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from pathlib import Path

import pytest

from drain_guard_sim.harness import serve
from tests.helpers import require_tool

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GUIDE = REPO / "docs" / "try-by-hand.md"
READY = "The cluster's timeline"


def guide_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", GUIDE.read_text(), re.S)


def _free_ports(count: int) -> list[int]:
    """``count`` consecutive free loopback ports, the first for the API and the rest for the
    agents (found by binding; nothing on this machine hands them out)."""
    for base in range(23000, 60000, 97):
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return list(range(base, base + count))
    raise AssertionError("no free ports")


def _status_of(node: str, out: str) -> str:
    """The text /status of ``node``'s agent holding a drain (decision ``hold`` or ``holding``),
    as the script's curl printed it last (``drain-guard status --endpoint`` before it shows the
    same lines, each after ``agent:``)."""
    start = out.rindex(f"node {node}: hold")
    return out[start : out.index("\n  agent:", start)]


def test_the_guide_is_what_serve_prints_with_its_defaults() -> None:
    serve_block, script = guide_blocks()
    assert serve_block == ".venv/bin/drain-guard-sim serve"
    assert f"export KUBECONFIG={serve.DEFAULT_WORKDIR}/kubeconfig" in script
    assert f"127.0.0.1:{serve.DEFAULT_AGENT_PORT}" in script


@pytest.mark.timeout(600)
async def test_try_it_by_hand_as_written(tmp_path: Path) -> None:
    require_tool("kubectl")
    serve_block, script = guide_blocks()
    api_port, *agent_ports = _free_ports(4)
    workdir = tmp_path / "sim"
    moves = {str(serve.DEFAULT_WORKDIR): str(workdir), str(serve.DEFAULT_PORT): str(api_port)}
    for i, port in enumerate(agent_ports):
        moves[str(serve.DEFAULT_AGENT_PORT + i)] = str(port)

    def moved(text: str) -> str:
        for old, new in moves.items():
            text = text.replace(old, new)
        return text

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    for key in [k for k in env if k.startswith("DRAIN_GUARD_") or k == "KUBECONFIG"]:
        del env[key]
    argv = [
        str(REPO / serve_block.split()[0]),
        *serve_block.split()[1:],
        "--workdir",
        str(workdir),
        "--port",
        str(api_port),
        "--agent-port",
        str(agent_ports[0]),
    ]
    server = await asyncio.create_subprocess_exec(
        *argv,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert server.stdout is not None
    try:
        printed: list[str] = []
        async with asyncio.timeout(60):
            while READY not in (line := (await server.stdout.readline()).decode()):
                assert line, "serve exited:\n" + "".join(printed)
                printed.append(line)
        shown = "".join(printed).split("try:\n\n", 1)[1].rstrip("\n")
        assert shown == moved(script)  # the guide shows what serve prints
        # Read the timeline as it comes (a full pipe would stop the cluster's event loop).
        timeline = asyncio.create_task(server.stdout.read())

        # As pasted into a terminal; the trap stops the agents if a step fails.
        user = await asyncio.create_subprocess_exec(
            "bash",
            "-e",
            "-c",
            "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + moved(script),
            cwd=tmp_path,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        async with asyncio.timeout(540):
            out = (await user.communicate())[0].decode()
        assert user.returncode == 0, out
    finally:
        if server.returncode is None:
            server.send_signal(signal.SIGINT)  # Ctrl-C
        async with asyncio.timeout(30):
            rest = (await timeline).decode()
            await server.wait()
    assert server.returncode == 0, rest
    assert rest.rstrip().endswith("drain-guard-sim serve: stopped")

    # What the user saw: worker-0's drain held for the build and the unchanged image; the
    # rollout on to worker-1, held for the hand-made build pod until it was deleted, and to
    # worker-2, held for the hold request until it was removed; then the pool updated.
    assert "node/worker-0 condition met" in out
    assert "pod/build-by-hand created" in out
    assert "machineconfig.machineconfiguration.openshift.io/99-worker-seed created" in out
    assert re.search(r"worker-0 +hold-drain-rendered-worker-\w+ +drain-rendered-worker-", out)
    held = _status_of("worker-0", out)
    assert "held since:" in held
    assert "reason:        build-pod" in held
    assert "reason:        noop-image" in held
    assert "node/worker-1 condition met" in out
    assert (
        "reason:        build-pod: build pod openshift-machine-config-operator/build-by-hand"
        in _status_of("worker-1", out)
    )
    assert 'pod "build-by-hand" deleted' in out
    assert "node/worker-2 condition met" in out
    assert "reason:        manual: " in _status_of("worker-2", out)
    assert "node/worker-2 annotated" in out
    assert "machineconfigpool.machineconfiguration.openshift.io/worker condition met" in out
    # In that order (worker-2 is annotated twice: the request, then its removal), and no
    # node went Degraded on the way.
    order = [
        "node/worker-0 condition met",
        "node/worker-1 condition met",
        'pod "build-by-hand" deleted',
        "node/worker-2 condition met",
        "node/worker-2 annotated",
        "machineconfigpool.machineconfiguration.openshift.io/worker condition met",
    ]
    at = [out.rindex(line) for line in order]
    assert at == sorted(at)
    assert "Marking Degraded" not in rest


def test_the_agents_logs_survive_the_next_serve(tmp_path: Path) -> None:
    """Issue 25: the printed commands logged into the workdir, which the next serve empties."""
    workdir = tmp_path / "sim"
    serve._fresh(workdir)
    log = serve.logs_dir(workdir) / "agent-worker-0.log"
    log.write_text("the last run's log\n")
    serve._fresh(workdir)
    assert log.read_text() == "the last run's log\n"
    assert not log.is_relative_to(workdir)
