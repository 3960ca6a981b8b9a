"""The systemd install as shipped, under a real systemd, against the real API server.

A Debian bookworm whose PID 1 is systemd (``make systemd-root``) is booted with
``systemd-nspawn``; the agent is installed in it by the commands of docs/quickstart/systemd.md,
step 2, as written (pip reaching the wheels ``make image`` fetched, not an index), and
``drain-guard.service`` enabled. It boots, and with every unit's sandboxing on: the node proxy
holds a real node identity (a ``system:node:`` client certificate where the kubelet keeps it),
the agent talks to it over its socket and holds the build pod's node's drain, and stopping the
agent releases the hold and stops the proxy and the one-shot with it.

Nothing of the host changes: the container shares the host's network (the API server is on
its loopback; the agent's status port is a free one) and nothing else; nspawn runs in a mount
namespace of its own with a tmpfs on /run/systemd (its locks and propagation directory) and in
a cgroup made for it, removed with everything nspawn made under it. Needs root.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil
import pytest
import yaml
from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard_sim.harness.controlplane import ControlPlane
from drain_guard_sim.harness.processes import free_port
from tests.controlplane.nodes import (
    DRAIN_B,
    add_build_pod,
    create_worker,
    mcd_request,
    until,
    wait_annotation,
)
from tests.deploy.tools import REPO
from tests.helpers import IMAGE_B, WAIT, require_or_skip, require_tool

pytestmark = pytest.mark.systemd

ROOT_TAR = REPO / "build" / "systemd" / "bookworm-systemd.tar"
WHEELS = REPO / "build" / "image" / "wheels"
INSTALL_DOC = REPO / "docs" / "quickstart" / "systemd.md"
UNITS = (
    "drain-guard-booted-origin.service",
    "drain-guard-node-proxy.service",
    "drain-guard.service",
)
#: Where nspawn makes its cgroups: the named systemd hierarchy and the unified one beside the
#: v1 controllers (this machine), or the unified hierarchy alone (cgroup v2).
CGROUP_HIERARCHIES = (
    (Path("/sys/fs/cgroup"),)
    if Path("/sys/fs/cgroup/cgroup.controllers").exists()
    else (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))
)
#: nspawn's own state, hidden from the host by a tmpfs in nspawn's mount namespace.
NSPAWN_RUN = "/run/systemd"


def install_commands() -> str:
    """docs/quickstart/systemd.md's commands that install the agent and its units, as written:
    from its first line to the ``systemctl`` calls, which need a running systemd (the unit is
    enabled offline instead, and the container boots with it)."""
    text = INSTALL_DOC.read_text()
    start = text.index("# as root, from a clone of this repository\n")
    end = text.index("systemctl daemon-reload\n", start)
    return text[start:end]


def _install(root: Path) -> None:
    clone = root / "root" / "drain-guard"
    clone.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "agent", "systemd", "docs"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(
                source, clone / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        else:
            shutil.copy2(source, clone / name)
    shutil.copytree(WHEELS, root / "wheels")
    script = f"set -eux\ncd /root/drain-guard\n{install_commands()}"
    proc = subprocess.run(
        [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c"),
            'mount -t proc proc "$1/proc" && exec chroot "$1" env PIP_NO_INDEX=1 '
            'PIP_FIND_LINKS=/wheels sh -c "$2"',
            *("sh", str(root), script),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    shutil.rmtree(root / "wheels")
    systemctl = require_tool("systemctl")
    subprocess.run([systemctl, f"--root={root}", "enable", "drain-guard.service"], check=True)


def _kubelet_credential(root: Path, plane: ControlPlane, node: str) -> None:
    """The node identity where the kubelet keeps it: /var/lib/kubelet/kubeconfig (0600) naming
    its client certificate and key under /var/lib/kubelet/pki."""
    made = plane.user_kubeconfig(f"system:node:{node}", ["system:nodes"], root / "kubeconfig")
    config = yaml.safe_load(made.read_text())
    made.unlink()
    kubelet = root / "var" / "lib" / "kubelet"
    (kubelet / "pki").mkdir(parents=True)
    pem = kubelet / "pki" / "kubelet-client-current.pem"
    pem.touch(mode=0o600)
    pem.write_bytes(Path(config["users"][0]["user"]["client-certificate"]).read_bytes())
    config["users"][0]["user"] = {
        "client-certificate": "/var/lib/kubelet/pki/kubelet-client-current.pem",
        "client-key": "/var/lib/kubelet/pki/kubelet-client-current.pem",
    }
    kubeconfig = kubelet / "kubeconfig"
    kubeconfig.touch(mode=0o600)
    kubeconfig.write_text(yaml.safe_dump(config))


@dataclass
class Container:
    nspawn: subprocess.Popen[bytes]
    root: Path

    def init(self) -> psutil.Process:
        """The container's PID 1, systemd (nspawn's child)."""
        for child in psutil.Process(self.nspawn.pid).children(recursive=True):
            if child.name() == "systemd":
                return child
        raise LookupError("no systemd in the container yet")

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``argv`` in the container's namespaces (its systemctl talks to its systemd)."""
        return subprocess.run(
            [
                "nsenter",
                "--target",
                str(self.init().pid),
                "--mount",
                "--uts",
                "--ipc",
                "--pid",
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )

    def journal(self) -> str:
        """The last lines the agent's and the proxy's units logged."""
        units = [f"--unit={unit}" for unit in UNITS]
        return self.run("journalctl", "--boot", "--no-pager", "--lines=60", *units).stdout

    def service_process(self, unit: str) -> psutil.Process:
        """The host's view of ``unit``'s main process (systemd names it by the container's
        PID)."""
        main = self.run("systemctl", "show", "--property=MainPID", "--value", unit).stdout.strip()
        assert main not in ("", "0"), f"{unit} has no main process"
        for process in self.init().children(recursive=True):
            if _namespace_pid(process) == int(main):
                return process
        raise LookupError(f"{unit}: no process of pid {main} in the container")


def _namespace_pid(process: psutil.Process) -> int:
    try:
        with open(f"/proc/{process.pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except OSError:
        pass
    return -1


def _status(process: psutil.Process) -> dict[str, str]:
    with open(f"/proc/{process.pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


@contextmanager
def booted(root: Path, hostname: str) -> Iterator[Container]:
    """``root`` booted by systemd-nspawn, in a cgroup of its own removed afterwards."""
    nspawn = require_tool("systemd-nspawn")
    cgroup = f"drain-guard-test-{os.getpid()}-{hostname}"
    made = [h / cgroup for h in CGROUP_HIERARCHIES if h.is_dir()]
    for path in made:
        path.mkdir()
    script = (
        'for procs in "$@"; do [ "$procs" = -- ] && break; echo $$ > "$procs"; done; '
        'while [ "$1" != -- ]; do shift; done; shift; '
        f'mount -t tmpfs -o mode=0755 tmpfs {NSPAWN_RUN} && exec {nspawn} "$@"'
    )
    process = subprocess.Popen(
        [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"),
            *(str(path / "cgroup.procs") for path in made),
            "--",
            *("--directory", str(root), "--boot", f"--hostname={hostname}"),
            *("--register=no", "--keep-unit", "--console=passive", "--link-journal=no"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Container(process, root)
    finally:
        process.send_signal(signal.SIGTERM)  # nspawn powers the container off
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for path in made:
            for directory in sorted(path.rglob("*"), key=lambda p: -len(p.parts)):
                if directory.is_dir():
                    directory.rmdir()
            path.rmdir()


@pytest.fixture
def systemd_root(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        require_or_skip("booting systemd needs root")
    for built in (ROOT_TAR, WHEELS):
        if not built.exists():
            require_or_skip(f"{built.relative_to(REPO)} is not built (make systemd-root)")
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(ROOT_TAR) as tar:
        tar.extractall(root, numeric_owner=True, filter="fully_trusted")
    return root


async def _until_booted(container: Container) -> None:
    async def running() -> bool:
        try:
            state = container.run("systemctl", "is-system-running", "--wait")
        except LookupError:
            return False
        return state.stdout.strip() in ("running", "degraded")

    await until(running)


async def _ready(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/readyz") as response,
        ):
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def test_the_shipped_units_hold_a_drain_under_systemd(
    control_plane: ControlPlane, admin: client.ApiClient, systemd_root: Path
) -> None:
    root = systemd_root
    node = await create_worker(admin)
    await asyncio.to_thread(_install, root)
    _kubelet_credential(root, control_plane, node)
    # The host named as its Node: the units' NODE_NAME is the host name (%H).
    (root / "etc" / "hostname").write_text(f"{node}\n")
    port = free_port()
    env = root / "etc" / "drain-guard" / "drain-guard.env"
    env.write_text(
        env.read_text().replace(
            "DRAIN_GUARD_LISTEN=127.0.0.1:9797", f"DRAIN_GUARD_LISTEN=127.0.0.1:{port}"
        )
    )
    before_mounts = _mounts_under(root)

    with booted(root, node) as container:
        await _until_booted(container)
        for unit in UNITS:
            state = container.run("systemctl", "is-active", unit).stdout.strip()
            assert state == "active", f"{unit}: {state}\n{container.journal()}"

        # Their sandboxing is on: no capability, no new privileges, a system-call filter;
        # the agent as the user drain-guard, the proxy as root.
        agent = container.service_process("drain-guard.service")
        proxy = container.service_process("drain-guard-node-proxy.service")
        for process in (agent, proxy):
            status = _status(process)
            assert status["CapEff"] == status["CapBnd"] == "0000000000000000", status
            assert (status["NoNewPrivs"], status["Seccomp"]) == ("1", "2"), status
        agent_uid = int(_status(agent)["Uid"].split()[0])
        assert agent_uid != 0
        assert container.run("id", "-u", "drain-guard").stdout.strip() == str(agent_uid)
        assert int(_status(proxy)["Uid"].split()[0]) == 0

        # The agent is served through the proxy's socket: ready, then holds.
        try:
            await until(lambda: _ready(port))
        except TimeoutError:
            pytest.fail(f"the agent never got ready:\n{container.journal()}")
        await add_build_pod(admin, node)
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        assert held[protocol.HOLD_REASONS] == "build-pod"
        # Issue 34, item 7: the proxy knows its agent by the socket's peer credentials, which
        # name it as itself (with PrivateUsers=yes on the proxy they named it nobody, 65534).
        proxy_log = container.run(
            "journalctl", "--boot", "--no-pager", "--unit=drain-guard-node-proxy.service"
        ).stdout
        assert f"serving node {node} to UID {agent_uid} " in proxy_log
        assert "refused a request from UID" not in proxy_log

        # Stopped by systemd, the agent releases (--release-on-exit); the proxy and the
        # one-shot stop with it (PartOf=).
        stop = container.run("systemctl", "stop", "drain-guard.service")
        assert stop.returncode == 0, stop.stderr
        await wait_annotation(admin, node, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)

        states: list[str] = []

        async def all_stopped() -> bool:
            states[:] = container.run("systemctl", "is-active", *UNITS).stdout.split()
            return states == ["inactive"] * len(UNITS)

        try:
            await until(all_stopped)
        except TimeoutError:
            pytest.fail(
                f"not stopped: {dict(zip(UNITS, states, strict=False))}\n{container.journal()}"
            )

    assert _mounts_under(root) == before_mounts == []
    for hierarchy in CGROUP_HIERARCHIES:
        assert not list(hierarchy.glob(f"drain-guard-test-{os.getpid()}-{node}"))


def _mounts_under(root: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(str(root))]
