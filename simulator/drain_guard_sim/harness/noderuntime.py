"""The real node's runtime: containerd (every pull sent to a closed loopback port), a
kubelet for a Node identity, images imported into containerd, and stopping them with every
container and shim they left."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from drain_guard_sim.harness.nodeimages import PAUSE_IMAGE
from drain_guard_sim.harness.nodenet import HOST_ADDRESS, NodeError, cni_config
from drain_guard_sim.harness.processes import ManagedProcess, free_port, spawn, wait_ready

if TYPE_CHECKING:
    from drain_guard_sim.harness.controlplane import ControlPlane


CNI_BIN = Path("/usr/lib/cni")
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI's images and containers
#: Where the kubelet puts its pods' processes (cgroupfs driver, cgroup root /): the pids
#: hierarchy is the one every process is in. An added node's is ``kubepods-NAME``.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Where containerd pulls from, should a pod name an image that is not here: a closed port
#: of loopback (discard), through which no pull ever leaves this machine.
NO_PULL_PROXY = "http://127.0.0.1:9"


def start_containerd(workdir: Path, socket: Path, pod_range: tuple[str, str]) -> ManagedProcess:
    """containerd with its root, state and socket under ``workdir``, its CNI config giving
    pods addresses in ``pod_range`` on the bridge, and every pull sent to a closed loopback
    port (``NO_PULL_PROXY``): an image that is not here fails to pull and nothing leaves."""
    root = workdir / "containerd"
    cni = workdir / "cni"
    (cni / "net.d").mkdir(parents=True, exist_ok=True)
    (cni / "net.d" / "10-drain-guard.conflist").write_text(json.dumps(cni_config(cni, pod_range)))
    config = f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # runc cannot set a container's oom_score_adj below its own here (no CAP_SYS_RESOURCE):
  # without this every sandbox fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni / "net.d"}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{root / "runc"}"
"""
    path = workdir / "containerd.toml"
    path.write_text(config)
    no_pull = {
        name: NO_PULL_PROXY for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
    }
    process = spawn(
        "containerd",
        ["containerd", f"--config={path}"],
        workdir,
        env={**no_pull, "NO_PROXY": "", "no_proxy": ""},
    )
    wait_ready(process, lambda: _ctr(socket, "version").returncode == 0)
    return process


def _ctr(socket: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", f"--address={socket}", f"--namespace={NAMESPACE}", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def import_image(socket: Path, archive: Path) -> None:
    done = _ctr(socket, "images", "import", "--no-unpack", str(archive))
    if done.returncode != 0:
        raise NodeError(f"ctr images import {archive}: {done.stderr.strip()}")


def start_kubelet(
    plane: ControlPlane, bin_dir: Path, name: str, workdir: Path, socket: Path, cgroup_root: str
) -> ManagedProcess:
    """A kubelet for the Node ``name`` (client certificate ``system:node:NAME``) on
    ``socket``'s containerd, its state under ``workdir``, its pods under ``cgroup_root``."""
    kubeconfig = plane.user_kubeconfig(
        f"system:node:{name}", ["system:nodes"], workdir / "kubelet.kubeconfig"
    )
    resolv = workdir / "resolv.conf"
    # Pods' resolv.conf: no name server at all (nothing a pod looks up may leave).
    resolv.write_text("options ndots:1\n")
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": HOST_ADDRESS,
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(plane.ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{socket}",
        # This machine: cgroup v1, no swap accounting to speak of, no systemd as PID 1.
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "podLogsDir": str(workdir / "pod-logs"),
        "volumePluginDir": str(workdir / "volume-plugins"),
        "clusterDomain": "cluster.local",
        "resolvConf": str(resolv),
        # A test machine's disk is no node's: evict for nothing but memory, and never
        # collect the images imported for the tests.
        "evictionHard": {"memory.available": "100Mi"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
    }
    path = workdir / "kubelet.yaml"
    path.write_text(yaml.safe_dump(config))
    return spawn(
        "kubelet",
        [
            str(bin_dir / "kubelet"),
            f"--config={path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={workdir / 'kubelet'}",
            f"--cert-dir={workdir / 'kubelet-pki'}",
            f"--hostname-override={name}",
            f"--node-ip={HOST_ADDRESS}",
            "--v=1",
        ],
        workdir,
    )


def stop_runtime(processes: list[ManagedProcess], pods_cgroup: Path, socket: Path) -> None:
    """Stop a node's processes: the kubelet (and the rest) before containerd, then every
    process in its pods' cgroups, containerd, and the shims containerd left."""
    for process in reversed(processes):
        if process.name != "containerd":
            process.stop()
    _kill_containers(pods_cgroup)
    for process in processes:
        process.stop()
    processes.clear()
    _kill_shims(socket)


def _kill_containers(pods_cgroup: Path) -> None:
    """SIGKILL every process in the pods' cgroups (the containers' and sandboxes'):
    processes a node started, found by where its kubelet put them."""
    for pid in _pids_under(pods_cgroup):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _pids_under(pods_cgroup) and time.monotonic() < deadline:
        time.sleep(0.1)


def _kill_shims(socket: Path) -> None:
    """The runc shims a node's containerd started (their command line names its socket):
    they outlive containerd by design."""
    marker = str(socket).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and marker in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def _pids_under(cgroup: Path) -> list[int]:
    pids: list[int] = []
    if not cgroup.is_dir():
        return pids
    for directory, _subdirectories, files in os.walk(cgroup):
        if "cgroup.procs" in files:
            text = (Path(directory) / "cgroup.procs").read_text()
            pids += [int(pid) for pid in text.split()]
    return pids


START_TIMEOUT = 180.0
