"""The processes of the real control plane and the real node: a free loopback port, a process
started with its log in a file (``spawn``), and waiting until it is ready or has died
(``ControlPlaneError`` with its log's tail)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT = 120.0  # seconds: a cold kube-apiserver on a loaded two-core machine


class ControlPlaneError(RuntimeError):
    """The control plane could not start or answer; the message ends with its log's tail."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class ManagedProcess:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    #: The command line it was started with (to start it again).
    argv: tuple[str, ...] = ()

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def pause(self) -> None:
        """SIGSTOP, returning once every thread has stopped: the signal is delivered to each
        thread when it next runs, so on a loaded machine a process told to stop may still
        answer a request for a while after ``kill`` returns. The parent is told when the
        group stop completes (or the process exits, whose status is left for ``popen``)."""
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGSTOP)
        os.waitid(os.P_PID, self.popen.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)

    def stop(self, grace: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def spawn(
    name: str, argv: Sequence[str], logdir: Path, env: Mapping[str, str] | None = None
) -> ManagedProcess:
    """Start ``argv`` in a session of its own, its output in ``logdir/name.log``."""
    log = logdir / f"{name}.log"
    with log.open("ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not them
            env=None if env is None else {**os.environ, **env},
        )
    return ManagedProcess(name, popen, log, tuple(argv))


def wait_ready(
    process: ManagedProcess, ready: Callable[[], bool], timeout: float = START_TIMEOUT
) -> None:
    """Return once ``ready()``; raise with the log's tail if the process exits first or
    ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise ControlPlaneError(
                f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}"
            )
        if ready():
            return
        time.sleep(0.2)
    raise ControlPlaneError(f"{process.name} not ready after {timeout:.0f} s:\n{process.tail()}")
