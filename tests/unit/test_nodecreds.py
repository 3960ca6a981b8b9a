"""drain-guard copy-node-credentials on a kubelet-style directory: what it copies, where, with
which mode and group, what it refuses, and the kubelet's rotation (the -current link swapped)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from drain_guard import nodecreds
from drain_guard.cli import main

CURRENT = "/var/lib/kubelet/pki/kubelet-client-current.pem"


def host(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def kubeconfig(**user: str) -> str:
    """As the kubelet writes it: its pair by the certificate store's current path."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://api-int:6443"}}],
            "users": [
                {
                    "name": "u",
                    "user": user or {"client-certificate": CURRENT, "client-key": CURRENT},
                }
            ],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )


def rotate(root: Path, n: int) -> bytes:
    """client-go's certificate store: a new 0600 pair, a -updated link to it (by its absolute
    host path), the -current link removed and -updated renamed over it."""
    pem = f"pair {n}\n".encode()
    pair = host(root, f"/var/lib/kubelet/pki/kubelet-client-{n}.pem")
    pair.parent.mkdir(parents=True, exist_ok=True)
    pair.touch(mode=0o600)
    pair.write_bytes(pem)
    updated = host(root, "/var/lib/kubelet/pki/kubelet-client-updated.pem")
    updated.symlink_to(f"/var/lib/kubelet/pki/kubelet-client-{n}.pem")
    host(root, CURRENT).unlink(missing_ok=True)
    updated.rename(host(root, CURRENT))
    return pem


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    rotate(root, 1)
    config = host(root, "/var/lib/kubelet/kubeconfig")
    config.write_text(kubeconfig())
    config.chmod(0o600)
    return root


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    copy.mkdir()
    return copy


def copy_once(root: Path, copy: Path) -> int:
    return main(["copy-node-credentials", "--from", str(root), "--to", str(copy), "--once"])


def test_copies_the_kubeconfig_and_its_pair_where_the_kubeconfig_names_them(
    root: Path, copy: Path
) -> None:
    assert copy_once(root, copy) == 0
    # Mounted at /var/lib/kubelet, the copy is read as the kubelet's own files are.
    assert (copy / "kubeconfig").read_bytes() == host(
        root, "/var/lib/kubelet/kubeconfig"
    ).read_bytes()
    pair = copy / "pki/kubelet-client-current.pem"
    assert pair.read_bytes() == b"pair 1\n"
    assert not pair.is_symlink()  # the link's target, not the link
    for path in (copy / "kubeconfig", pair):
        info = path.stat()
        assert stat.S_IMODE(info.st_mode) == 0o640, path
        assert info.st_gid == os.getegid(), path
    assert stat.S_IMODE((copy / "pki").stat().st_mode) == 0o750
    assert sorted(p.name for p in copy.rglob("*")) == [
        "kubeconfig",
        "kubelet-client-current.pem",
        "pki",
    ]


def test_relative_names_resolve_against_the_kubelets_directory(root: Path, copy: Path) -> None:
    """client-go resolves a relative name against the kubeconfig's directory, in the copy too."""
    host(root, "/var/lib/kubelet/kubeconfig").write_text(
        kubeconfig(
            **{
                "client-certificate": "pki/kubelet-client-current.pem",
                "client-key": "pki/kubelet-client-1.pem",
            }
        )
    )
    assert copy_once(root, copy) == 0
    assert (copy / "pki/kubelet-client-current.pem").read_bytes() == b"pair 1\n"
    assert (copy / "pki/kubelet-client-1.pem").read_bytes() == b"pair 1\n"


@pytest.mark.parametrize(
    "name",
    [
        "/etc/kubernetes/static-pod-resources/kube-apiserver-certs/secrets/service-account-private-key/service-account.key",
        "../../../etc/shadow",
        "/var/lib/kubelet/../kubelet-other/x.pem",
        "/var/lib/kubelet",
    ],
)
def test_refuses_a_kubeconfig_naming_a_file_outside_the_kubelets_directory(
    root: Path, copy: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    host(root, "/var/lib/kubelet/kubeconfig").write_text(
        kubeconfig(**{"client-certificate": CURRENT, "client-key": name})
    )
    assert copy_once(root, copy) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("outside /var/lib/kubelet: not copied"), line
    assert name in line
    assert list(copy.iterdir()) == []  # nothing copied, not even the allowed file


def test_refuses_a_link_out_of_the_kubelets_directory(
    root: Path, copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host(root, CURRENT).unlink()
    host(root, CURRENT).symlink_to("/etc/kubernetes/kubeconfig")
    assert copy_once(root, copy) == 1
    assert (
        "links to /etc/kubernetes/kubeconfig, outside /var/lib/kubelet" in capsys.readouterr().err
    )
    assert list(copy.iterdir()) == []


def test_follows_the_rotation_and_writes_only_what_changed(root: Path, copy: Path) -> None:
    pair = copy / "pki/kubelet-client-current.pem"
    assert copy_once(root, copy) == 0
    config_inode = (copy / "kubeconfig").stat().st_ino
    old_inode = pair.stat().st_ino
    assert nodecreds.copy_once(root, copy) == []  # nothing changed, nothing written
    rotate(root, 2)
    assert nodecreds.copy_once(root, copy) == [PurePosixPath("pki/kubelet-client-current.pem")]
    assert pair.read_bytes() == b"pair 2\n"
    assert pair.stat().st_ino != old_inode  # a new file renamed in, not the old one rewritten
    assert (copy / "kubeconfig").stat().st_ino == config_inode


def test_a_failed_write_leaves_the_previous_copy_whole(
    root: Path, copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert copy_once(root, copy) == 0
    rotate(root, 2)
    real_fdopen = os.fdopen

    class Interrupted:
        """The new file's write stops halfway (disk full, the copier killed)."""

        def __new__(cls, fd: int, mode: str) -> Any:
            return super().__new__(cls) if "w" in mode else real_fdopen(fd, mode)

        def __init__(self, fd: int, mode: str) -> None:
            self.file = real_fdopen(fd, mode)

        def __enter__(self) -> Interrupted:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def write(self, data: bytes) -> None:
            self.file.write(data[: len(data) // 2])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdopen", Interrupted)
    with pytest.raises(OSError, match="No space"):
        nodecreds.copy_once(root, copy)
    assert (copy / "pki/kubelet-client-current.pem").read_bytes() == b"pair 1\n"
    monkeypatch.undo()
    assert copy_once(root, copy) == 0  # the half-written new file left behind is replaced
    assert (copy / "pki/kubelet-client-current.pem").read_bytes() == b"pair 2\n"
    assert sorted(p.name for p in (copy / "pki").iterdir()) == ["kubelet-client-current.pem"]


@pytest.fixture
def copier(root: Path, copy: Path) -> Iterator[subprocess.Popen[str]]:
    """The copier as a process, reading its sources every 50 ms."""
    argv = ["copy-node-credentials", "--from", str(root), "--to", str(copy), "--interval", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "drain_guard", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield proc
    proc.terminate()
    assert proc.wait(timeout=30) == 0  # SIGTERM: a clean exit


def _next_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the copier exited ({proc.wait(timeout=30)})"
    return line.rstrip("\n")


def test_a_running_copier_follows_the_swap_through_its_gap(
    root: Path, copy: Path, copier: subprocess.Popen[str]
) -> None:
    """Between the kubelet's removal of -current and its rename of -updated, the pair is
    missing: one line, and the copy made when it is back; the old copy stays meanwhile."""
    prefix = "drain-guard copy-node-credentials: "
    assert (
        _next_line(copier) == f"{prefix}copied pki/kubelet-client-current.pem, kubeconfig to {copy}"
    )
    pair = host(root, "/var/lib/kubelet/pki/kubelet-client-2.pem")
    pair.touch(mode=0o600)
    pair.write_bytes(b"pair 2\n")
    updated = host(root, "/var/lib/kubelet/pki/kubelet-client-updated.pem")
    updated.symlink_to("/var/lib/kubelet/pki/kubelet-client-2.pem")
    host(root, CURRENT).unlink()  # the swap's gap
    assert _next_line(copier) == f"{prefix}error: {CURRENT} is missing; trying again every 0.05s"
    assert (copy / "pki/kubelet-client-current.pem").read_bytes() == b"pair 1\n"
    updated.rename(host(root, CURRENT))
    assert _next_line(copier) == f"{prefix}copied pki/kubelet-client-current.pem to {copy}"
    assert (copy / "pki/kubelet-client-current.pem").read_bytes() == b"pair 2\n"


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--interval", "0"], "--interval: must be above 0: '0'"),
        (["--interval", "soon"], "--interval: not a number of seconds: 'soon'"),
    ],
)
def test_invalid_settings_are_one_line_and_exit_2(
    root: Path, copy: Path, flags: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["copy-node-credentials", "--from", str(root), "--to", str(copy), *flags])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(error), line


def test_a_missing_target_directory_is_one_line_and_exit_2(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert copy_once(root, tmp_path / "absent") == 2
    (line,) = capsys.readouterr().err.splitlines()
    absent = tmp_path / "absent"
    assert line == f"drain-guard copy-node-credentials: error: --to {absent} is not a directory"


def test_the_copier_loads_no_api_client(root: Path, copy: Path) -> None:
    """Root in its pod: none of the HTTP or Kubernetes client code is in the process (and
    about a third of the memory; docs/install.md, "Resources")."""
    code = (
        "import sys\n"
        "from drain_guard.cli import main\n"
        f"assert main(['copy-node-credentials', '--from', {str(root)!r}, '--to', {str(copy)!r},"
        " '--once']) == 0\n"
        "clients = ('aiohttp', 'kubernetes_asyncio', 'drain_guard.kube')\n"
        "loaded = [m for m in sys.modules if m.startswith(clients)]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
