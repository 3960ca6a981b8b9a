"""The sweep of killed processes' scratch directories removes theirs and nothing else."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from drain_guard.kube import scratch


def _start_once(tmpdir: Path) -> str:
    """A process that takes its scratch directory (sweeping first) and exits: the path it got."""
    code = "from drain_guard.kube import scratch; print(scratch.own_directory())"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TMPDIR": str(tmpdir)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _directory(parent: Path, name: str, *files: str) -> Path:
    path = parent / name
    path.mkdir()
    for file in files:
        (path / file).write_text("x")
    return path


def test_a_start_removes_dead_scratch_directories_and_leaves_everything_else(
    tmp_path: Path,
) -> None:
    dead = _directory(tmp_path, scratch.PREFIX + "dead", scratch.MARKER, "ca.crt")
    killed_before_marker = _directory(tmp_path, scratch.PREFIX + "early")
    demo = _directory(tmp_path, "drain-guard-demo-1", "kubeconfig")
    unmarked = _directory(tmp_path, scratch.PREFIX + "foreign", "notes.txt")
    alive = _directory(tmp_path, scratch.PREFIX + "alive", scratch.MARKER)
    lock = os.open(alive, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        own = _start_once(tmp_path)
    finally:
        os.close(lock)

    assert not dead.exists()
    assert not killed_before_marker.exists()
    assert (demo / "kubeconfig").read_text() == "x"
    assert (unmarked / "notes.txt").read_text() == "x"
    assert alive.exists()
    assert Path(own).parent == tmp_path
    assert Path(own).name.startswith(scratch.PREFIX)
    assert not Path(own).exists()  # removed at the process's exit
