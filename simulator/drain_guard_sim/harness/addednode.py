"""A second real node on the same machine (``Node.add_node``): its own containerd and
kubelet and cgroup root, sharing the first node's control plane, bridge, guard and
kube-proxy."""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from drain_guard_sim.harness.noderuntime import (
    CGROUP_ROOT,
    START_TIMEOUT,
    import_image,
    start_containerd,
    start_kubelet,
    stop_runtime,
)
from drain_guard_sim.harness.processes import ControlPlaneError, ManagedProcess, wait_ready

if TYPE_CHECKING:
    from drain_guard_sim.harness.node import Node

#: Its pods' addresses: the upper half of ``POD_CIDR`` (the first node has the lower).
ADDED_POD_RANGE = ("10.85.0.128", "10.85.0.254")


@dataclass
class AddedNode:
    """A second node on the machine of a ``Node`` (``Node.add_node``): its own containerd
    and kubelet, its pods under the cgroup root ``/kubepods-NAME`` (made here, in every
    hierarchy, and removed at stop) with addresses in ``ADDED_POD_RANGE``. It shares the
    first node's control plane, bridge, guard and kube-proxy (one network namespace: one
    kube-proxy serves both)."""

    node: Node
    name: str
    workdir: Path
    containerd_socket: Path
    _processes: list[ManagedProcess] = field(default_factory=list)
    #: The cgroup roots it made (one per hierarchy): only these are removed at stop.
    _made: list[Path] = field(default_factory=list)
    stopped: bool = False

    @property
    def cgroup_root(self) -> str:
        return f"/kubepods-{self.name}"

    def cgroups(self) -> list[Path]:
        """Its cgroup root in each hierarchy that has it."""
        return [
            hierarchy / self.cgroup_root.lstrip("/")
            for hierarchy in sorted(CGROUP_ROOT.iterdir())
            if not hierarchy.is_symlink() and (hierarchy / self.cgroup_root.lstrip("/")).is_dir()
        ]

    def start(self) -> None:
        self._make_cgroup_root()
        self._processes.append(
            start_containerd(self.workdir, self.containerd_socket, ADDED_POD_RANGE)
        )
        for archive in self.node._archives:
            import_image(self.containerd_socket, archive)
        kubelet = start_kubelet(
            self.node, self.name, self.workdir, self.containerd_socket, self.cgroup_root
        )
        self._processes.append(kubelet)
        wait_ready(kubelet, lambda: self.node.node_ready(self.name), START_TIMEOUT)

    def _make_cgroup_root(self) -> None:
        """The kubelet requires its cgroup root to exist in every hierarchy. A new cpuset
        has no CPU or memory node: it takes its parent's, as the kubelet's own do."""
        for hierarchy in sorted(CGROUP_ROOT.iterdir()):
            if hierarchy.is_symlink() or not (hierarchy / "cgroup.procs").exists():
                continue
            root = hierarchy / self.cgroup_root.lstrip("/")
            root.mkdir()  # one left by a killed run stops it here: never removed on a guess
            self._made.append(root)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (root / name).exists():
                    (root / name).write_text((hierarchy / name).read_text())

    def stop(self) -> list[str]:
        """Stop it: its processes, its Node, its cgroups and its mounts; what is left (on
        its own part of the host) is returned. The pods should be gone first (their network
        is put back by the CNI plugins then; the first node's stop removes what is left)."""
        if self.stopped:
            return []
        self.stopped = True
        stop_runtime(
            self._processes,
            CGROUP_ROOT / "pids" / self.cgroup_root.lstrip("/"),
            self.containerd_socket,
        )
        with contextlib.suppress(ControlPlaneError):
            self.node.kubectl("delete", "node", self.name, "--ignore-not-found", "--wait=true")
        mounts = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(f"{self.workdir}/")
        ]
        for point in reversed(mounts):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        for root in self._made:
            for directory, _subdirectories, _files in sorted(
                os.walk(root), key=lambda entry: len(entry[0]), reverse=True
            ):
                with contextlib.suppress(OSError):  # busy: said below
                    os.rmdir(directory)
        left = [f"cgroup left: {root}" for root in self.cgroups()]
        left += [
            f"mount left: {line.split()[4]}"
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(f"{self.workdir}/")
        ]
        if self.node.get_node(self.name) is not None:
            left.append(f"Node {self.name} left")
        return left
