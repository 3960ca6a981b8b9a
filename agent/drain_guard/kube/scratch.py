"""A temporary directory of this process's own, for the certificate files the Kubernetes
library writes, and the removal of those that killed processes left behind.

The library writes a kubeconfig's inline certificate data (``certificate-authority-data``,
...) to temporary files and removes them at exit; a process killed with SIGKILL (the
OOM killer, a liveness probe's kill, a node's shutdown) never exits, and its files stay.
In the DaemonSet's ``/tmp`` (an emptyDir, which outlives the container) each killed start
added one. So each process writes them in a directory of its own, which it holds an
exclusive ``flock`` on for its life: the kernel lets the lock go however the process ends,
and every start removes the directories whose lock it can take, those of processes that
are gone (in any PID namespace: the lock is on the directory, not on a process id).

The sweep removes only what is certainly such a directory: its name has a prefix no other
program of drain-guard's uses, it belongs to this user, and it holds the marker its process
wrote once locked (or nothing at all: a process killed between the two). A user's
``/tmp/drain-guard-demo-*`` or any other unlocked directory of a similar name is not its own.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile

__all__ = ["own_directory"]

PREFIX = "drain-guard-scratch-"
#: Written in a directory once its process holds the lock: the sweep's proof of ownership.
MARKER = ".drain-guard-scratch"

#: This process's directory in each temporary directory it used, and the descriptor its
#: lock is held on.
_own: dict[str, tuple[str, int]] = {}


def own_directory() -> str | None:
    """This process's directory (made and locked at the first call, after the directories of
    processes that are gone are removed; removed at exit), or None when none can be made (no
    writable temporary directory: the library then fails only if it has a file to write)."""
    base = tempfile.gettempdir()
    if base not in _own:
        _sweep(base)
        try:
            _own[base] = _made(base)
        except OSError:
            return None
        atexit.register(shutil.rmtree, _own[base][0], True)
    return _own[base][0]


def _made(base: str) -> tuple[str, int]:
    """A new directory in ``base``, locked; made again should another start's sweep remove it
    between its creation and the lock (it was not locked yet)."""
    while True:
        path = tempfile.mkdtemp(prefix=PREFIX, dir=base)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.path.samestat(os.stat(path), os.fstat(fd)):
                with open(os.path.join(path, MARKER), "x"):
                    pass
                return path, fd
        except FileNotFoundError:
            pass
        except OSError:
            os.close(fd)
            raise
        os.close(fd)


def _sweep(base: str) -> None:
    """Remove the directories in ``base`` that no live process holds locked."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return  # no temporary directory: the library's own write says so
    for entry in entries:
        if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, or not ours to open
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live process's
        try:
            if _ours(entry.path, fd):
                shutil.rmtree(entry.path, ignore_errors=True)
        finally:
            os.close(fd)


def _ours(path: str, fd: int) -> bool:
    """Whether the unlocked directory ``path`` (open as ``fd``) is a scratch directory of this
    user's: its marker, or nothing at all, inside."""
    try:
        if os.fstat(fd).st_uid != os.getuid():
            return False
        entries = os.listdir(fd)
    except OSError:
        return False
    return not entries or MARKER in entries
