"""A real node beside the real control plane: containerd, a kubelet, kube-scheduler and
kube-proxy, on a bridge of this machine's own.

The control plane (``harness.controlplane``) has no kubelet: its tests set a pod's phase
themselves. This one runs pods. The kubelet, kube-scheduler and kube-proxy are built from the
same ``k8s.io/kubernetes`` module as the API server (``make control-plane``); containerd,
runc and the CNI plugins are Debian's (``scripts/system-deps.sh``). No registry is reached:
the sandbox (pause) image is a static binary built here, put into containerd as an OCI
archive made here (``oci_archive``), and pods use local images only.

Safety first. Pods get addresses in ``POD_CIDR`` on the bridge ``BRIDGE``, which carries the
host's address in that range *before* anything starts, with a route for the Service range to
the bridge too; ``Node.start`` checks that the kernel routes both ranges to the bridge, not
to a gateway, and stops there if not. A guard chain (``GUARD_CHAIN``), first in FORWARD and
OUTPUT, drops anything from the bridge to another interface and anything for the pod or
Service range that would leave by another; so no pod, probe or Service packet leaves this
machine, whatever kube-proxy or the CNI plugins do. Every change to the host (sysctls,
iptables, mounts, cgroups, links, routes, directories) is recorded before and put back after
(``hoststate``); ``Node.stop`` returns what it could not put back.

Its parts: ``nodenet`` (the bridge, the routes' check, the guard chain), ``noderuntime``
(containerd and the kubelet), ``nodeimages`` (the pause image, the user's kustomization),
and a second node beside this one (``AddedNode``); this module starts and stops them.

Why kube-proxy: pods reach the API server as they do in a cluster, through the ``kubernetes``
Service (10.0.0.1:443, in-cluster config): kube-proxy, from the same module, turns it into
the API server's advertised address on the bridge. Its iptables go with the rest at stop.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from drain_guard_sim.harness.controlplane import ControlPlane
from drain_guard_sim.harness.hoststate import HostState
from drain_guard_sim.harness.nodeimages import PAUSE_IMAGE, oci_archive, user_kustomization
from drain_guard_sim.harness.nodenet import (
    BRIDGE,
    HOST_ADDRESS,
    POD_CIDR,
    NodeError,
    check_routes,
    install_guard,
    kube_proxy_synced,
    make_bridge,
    ranges_in_use,
)
from drain_guard_sim.harness.noderuntime import (
    CGROUP_ROOT,
    CNI_BIN,
    START_TIMEOUT,
    import_image,
    start_containerd,
    start_kubelet,
    stop_runtime,
)
from drain_guard_sim.harness.processes import (
    ControlPlaneError,
    ManagedProcess,
    free_port,
    spawn,
    wait_ready,
)

__all__ = [
    "NODE_BINARIES",
    "NODE_NAME",
    "Node",
    "missing_node_tools",
]

#: Built by ``make control-plane`` beside the control plane's binaries.
NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy", "pause")
#: Debian's (scripts/system-deps.sh).
HOST_TOOLS = ("containerd", "ctr", "runc", "iptables", "iptables-save", "ip6tables-save", "ip")
NODE_NAME = "drain-guard-node"
#: One node on a machine at a time: the sysctls, the bridge and the guard are host-wide.
LOCK_FILE = Path("/run/drain-guard-node.lock")
#: The pod addresses of the node (``Node``) and of the one node beside it (``add_node``):
#: halves of ``POD_CIDR`` on the same bridge, each node's containerd allocating its own.
FIRST_POD_RANGE = ("10.85.0.10", "10.85.0.127")
PODS_CGROUP = CGROUP_ROOT / "pids" / "kubepods"


def missing_node_tools(bin_dir: Path) -> list[str]:
    """What the node needs and this machine lacks."""
    missing = [name for name in NODE_BINARIES if not os.access(bin_dir / name, os.X_OK)]
    missing += [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
    missing += [
        f"{CNI_BIN}/{plugin}"
        for plugin in ("bridge", "host-local", "loopback")
        if not (CNI_BIN / plugin).exists()
    ]
    return missing


@dataclass
class Node:
    """A running node: its name, its plane, its containerd and how to reach them."""

    plane: ControlPlane
    workdir: Path
    bin_dir: Path
    host_before: HostState
    containerd_socket: Path
    _lock: int
    _processes: list[ManagedProcess] = field(default_factory=list)
    _added: list[AddedNode] = field(default_factory=list)
    #: Every image imported (the pause image first), for the nodes added later.
    _archives: list[Path] = field(default_factory=list)
    #: Set by ``stop``: the host is back as it was (or as near as it could be put).
    stopped: bool = False
    name: str = NODE_NAME

    @classmethod
    def start(cls, bin_dir: Path, workdir: Path) -> Node:
        """Record the host, set up the bridge and the guard and check them, then start the
        control plane on the bridge's host address, containerd, the kubelet, kube-scheduler
        and kube-proxy, and return once the Node is Ready. On any failure, everything is
        stopped and the host put back before the error is raised."""
        missing = missing_node_tools(bin_dir)
        if missing:
            raise NodeError(f"missing: {', '.join(missing)} (make system-deps control-plane)")
        workdir.mkdir(parents=True, exist_ok=True)
        lock = os.open(LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)  # another node on this machine: wait for its end
        host_before = HostState.read(BRIDGE, (workdir,))
        node: Node | None = None
        try:
            in_use = ranges_in_use()
            if in_use:
                raise NodeError(f"the node's address ranges are in use here: {in_use}")
            make_bridge()
            install_guard()
            check_routes()
            plane = ControlPlane.start(
                bin_dir,
                workdir / "plane",
                node_address=HOST_ADDRESS,
                extra_controllers=(
                    "daemonset-controller",
                    "deployment-controller",
                    "replicaset-controller",
                    "endpointslice-controller",
                    # Takes the not-ready taint off the Node once its kubelet is Ready.
                    "node-lifecycle-controller",
                ),
            )
            node = cls(plane, workdir, bin_dir, host_before, workdir / "containerd.sock", lock)
            node.start_containerd()
            node._import_pause()
            node._start_kubelet()
            node._start_scheduler()
            node._start_kube_proxy()
            install_guard()
            node._wait_ready()
        except BaseException:
            if node is not None:
                node.stop()
            else:
                host_before.restore()
                os.close(lock)
            raise
        return node

    # -- containerd --------------------------------------------------------------------

    def start_containerd(self) -> None:
        self._processes.append(
            start_containerd(self.workdir, self.containerd_socket, FIRST_POD_RANGE)
        )

    def import_image(self, archive: Path) -> None:
        """Put an OCI archive's image into the node's containerd, where the kubelet finds it
        (pods name it with ``imagePullPolicy: Never`` or ``IfNotPresent``), and into every
        node added since (``add_node``)."""
        import_image(self.containerd_socket, archive)
        self._archives.append(archive)
        for added in self._added:
            import_image(added.containerd_socket, archive)

    def _import_pause(self) -> None:
        archive = oci_archive(
            self.workdir / "pause.tar",
            PAUSE_IMAGE,
            {"/pause": self.bin_dir / "pause"},
            ["/pause"],
        )
        self.import_image(archive)

    # -- a second node -----------------------------------------------------------------

    def add_node(self, name: str) -> AddedNode:
        """A second node on this machine, for what needs two (a required pod anti-affinity):
        a containerd and a kubelet of its own (its own root, state, socket, ports, pod
        addresses on the same bridge, ``system:node:`` certificate and cgroup root), with
        every image imported so far. Returns once its Node is Ready; ``AddedNode.stop`` (or
        this node's ``stop``) stops it and puts back what it changed."""
        if self._added:
            raise NodeError("one node beside this one at most (ADDED_POD_RANGE)")
        workdir = self.workdir / name
        workdir.mkdir()
        added = AddedNode(self, name, workdir, workdir / "containerd.sock")
        self._added.append(added)
        try:
            added.start()
        except BaseException:
            added.stop()
            raise
        return added

    # -- kubelet, scheduler, proxy -----------------------------------------------------

    def _start_kubelet(self) -> None:
        process = start_kubelet(
            self.plane, self.bin_dir, NODE_NAME, self.workdir, self.containerd_socket, "/"
        )
        self._processes.append(process)
        wait_ready(process, lambda: self.get_node(NODE_NAME) is not None, START_TIMEOUT)

    def _start_scheduler(self) -> None:
        kubeconfig = self.plane.user_kubeconfig(
            "system:kube-scheduler", (), self.workdir / "kube-scheduler.kubeconfig"
        )
        process = spawn(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
            self.workdir,
        )
        self._processes.append(process)

    def _start_kube_proxy(self) -> None:
        kubeconfig = self.plane.user_kubeconfig(
            "system:kube-proxy", (), self.workdir / "kube-proxy.kubeconfig"
        )
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "bindAddress": HOST_ADDRESS,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            # Node ports only on the bridge's address: no route_localnet, nothing on eth0.
            "nodePortAddresses": [f"{HOST_ADDRESS}/32"],
            # Leave the host's conntrack table and timeouts as they are.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "oomScoreAdj": 0,
        }
        path = self.workdir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        process = spawn(
            "kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={path}"], self.workdir
        )
        self._processes.append(process)
        wait_ready(process, kube_proxy_synced, START_TIMEOUT)

    def get_node(self, name: str) -> dict[str, Any] | None:
        """The Node ``name``, or None while there is none."""
        try:
            return self.plane_get(f"/api/v1/nodes/{name}")
        except ControlPlaneError:
            return None

    def node_ready(self, name: str) -> bool:
        node = self.get_node(name) or {}
        conditions = node.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _wait_ready(self) -> None:
        wait_ready(self._processes[1], lambda: self.node_ready(NODE_NAME), START_TIMEOUT)

    def plane_get(self, path: str) -> dict[str, Any]:
        """GET ``path`` from the API server as its admin."""
        result: dict[str, Any] = json.loads(self.kubectl("get", "--raw", path))
        return result

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """kubectl as the cluster's admin; its output, or ControlPlaneError with its errors."""
        done = subprocess.run(
            ["kubectl", f"--kubeconfig={self.plane.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def install(self, overlay: Path, archive: Path, directory: Path) -> Path:
        """Import ``archive``'s image (``make image``'s OCI archive) and ``kubectl apply -k``
        a kustomization in ``directory`` of ``overlay`` with its image set to that one, as
        docs/install.md has a user do (``kustomize edit set image``): the overlay as shipped.
        Returns once the DaemonSet's pod is Ready; the directory is for ``kubectl delete -k``."""
        self.import_image(archive)
        user_kustomization(overlay, archive, directory)
        self.kubectl("apply", "-k", str(directory))
        self.kubectl("rollout", "status", "-n", "drain-guard", "ds/drain-guard", "--timeout=180s")
        return directory

    # -- stop --------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Stop everything, put the host back as it was, and return what could not be put
        back (nothing, when all went well)."""
        self.stopped = True
        try:
            left = [line for added in self._added for line in added.stop()]
            stop_runtime(self._processes, PODS_CGROUP, self.containerd_socket)
            self.plane.stop()
            return left + self.host_before.restore()
        finally:
            os.close(self._lock)

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


# -- what each node runs: containerd and a kubelet ------------------------------------------


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
            self.node.plane,
            self.node.bin_dir,
            self.name,
            self.workdir,
            self.containerd_socket,
            self.cgroup_root,
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
