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

Why kube-proxy: pods reach the API server as they do in a cluster, through the ``kubernetes``
Service (10.0.0.1:443, in-cluster config): kube-proxy, from the same module, turns it into
the API server's advertised address on the bridge. Its iptables go with the rest at stop.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from drain_guard_sim.harness.controlplane import (
    SERVICE_CIDR,
    ControlPlane,
    ControlPlaneError,
    ManagedProcess,
    free_port,
    spawn,
    wait_ready,
)
from drain_guard_sim.harness.hoststate import HostState

__all__ = [
    "BRIDGE",
    "NODE_BINARIES",
    "NODE_NAME",
    "PAUSE_IMAGE",
    "POD_CIDR",
    "AddedNode",
    "Node",
    "NodeError",
    "missing_node_tools",
    "oci_archive",
    "user_kustomization",
]

#: Built by ``make control-plane`` beside the control plane's binaries.
NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy", "pause")
#: Debian's (scripts/system-deps.sh).
HOST_TOOLS = ("containerd", "ctr", "runc", "iptables", "iptables-save", "ip6tables-save", "ip")
CNI_BIN = Path("/usr/lib/cni")
NODE_NAME = "drain-guard-node"
BRIDGE = "dgnode0"
POD_CIDR = "10.85.0.0/24"
#: The host's address on the bridge: the node's InternalIP and the API server's.
HOST_ADDRESS = "10.85.0.1"
GUARD_CHAIN = "DRAIN-GUARD-NODE-GUARD"
PAUSE_IMAGE = "drain-guard.local/pause:1"
#: The image daemonset/components/kube-rbac-proxy pins (by digest).
KUBE_RBAC_PROXY = "quay.io/brancz/kube-rbac-proxy"
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI's images and containers
#: One node on a machine at a time: the sysctls, the bridge and the guard are host-wide.
LOCK_FILE = Path("/run/drain-guard-node.lock")
START_TIMEOUT = 180.0
#: The pod addresses of the node (``Node``) and of the one node beside it (``add_node``):
#: halves of ``POD_CIDR`` on the same bridge, each node's containerd allocating its own.
FIRST_POD_RANGE = ("10.85.0.10", "10.85.0.127")
ADDED_POD_RANGE = ("10.85.0.128", "10.85.0.254")
#: Where the kubelet puts its pods' processes (cgroupfs driver, cgroup root /): the pids
#: hierarchy is the one every process is in. An added node's is ``kubepods-NAME``.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PODS_CGROUP = CGROUP_ROOT / "pids" / "kubepods"
#: Where containerd pulls from, should a pod name an image that is not here: a closed port
#: of loopback (discard), through which no pull ever leaves this machine.
NO_PULL_PROXY = "http://127.0.0.1:9"


class NodeError(RuntimeError):
    """The node could not start safely, or not answer; nothing was left running."""


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


def oci_archive(path: Path, name: str, files: Mapping[str, Path], entrypoint: list[str]) -> Path:
    """An OCI image archive (one uncompressed layer of ``files``: path in the image to a file
    here, mode kept) named ``name`` for ``ctr images import``: a tiny image made with no tool
    and no registry."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for inside, source in sorted(files.items()):
            # A regular file owned by root, dated 1970 (TarInfo's defaults): the same bytes
            # make the same layer.
            info = tarfile.TarInfo(inside.lstrip("/"))
            info.size = source.stat().st_size
            info.mode = source.stat().st_mode & 0o7777
            with source.open("rb") as content:
                tar.addfile(info, content)
    layer_bytes = layer.getvalue()
    layer_digest = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_bytes = json.dumps(config).encode()
    blobs: dict[str, bytes] = {layer_digest: layer_bytes}
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    blobs[config_digest] = config_bytes
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": len(layer_bytes),
            }
        ],
    }
    manifest_bytes = json.dumps(manifest).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    blobs[manifest_digest] = manifest_bytes
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                },
            }
        ],
    }
    entries = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
        **{f"blobs/sha256/{digest.split(':')[1]}": data for digest, data in blobs.items()},
    }
    with tarfile.open(path, "w") as tar:
        for entry, data in entries.items():
            info = tarfile.TarInfo(entry)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _archive_image(archive: Path) -> tuple[str, str]:
    """The name and tag of the one image of an OCI archive (its index's reference name)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise NodeError(f"{archive}: no index.json")
        (manifest,) = json.load(member)["manifests"]
    name, tag = manifest["annotations"]["org.opencontainers.image.ref.name"].rsplit(":", 1)
    return name, tag


def user_kustomization(
    overlay: Path, archive: Path, directory: Path, proxy_archive: Path | None = None
) -> Path:
    """A user's kustomization in ``directory`` of ``overlay`` with the image ``drain-guard``
    set to ``archive``'s (the name and tag its index gives), and kube-rbac-proxy's to
    ``proxy_archive``'s when given, as docs/install.md writes one."""
    name, tag = _archive_image(archive)
    images = [{"name": "drain-guard", "newName": name, "newTag": tag}]
    if proxy_archive is not None:
        # The pinned name; a newTag drops the pin's digest (docs/install.md).
        proxy_name, proxy_tag = _archive_image(proxy_archive)
        images.append({"name": KUBE_RBAC_PROXY, "newName": proxy_name, "newTag": proxy_tag})
    directory.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, directory)],  # kustomize: never absolute
        "images": images,
    }
    (directory / "kustomization.yaml").write_text(json.dumps(kustomization))
    return directory


def _ip(*args: str) -> Any:
    done = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout) if done.stdout.strip() else []


def routed_via_bridge(address: str) -> bool:
    """Whether the kernel sends a packet for ``address`` out of the bridge, to no gateway."""
    (route,) = _ip("route", "get", address)
    return bool(route.get("dev") == BRIDGE and "gateway" not in route)


def _check_routes() -> None:
    """Fail closed unless an address of each range (the first and last pod address, the
    ``kubernetes`` Service's and the last Service address) is routed to the bridge."""
    samples = [
        str(host)
        for network in (ipaddress.ip_network(POD_CIDR), ipaddress.ip_network(SERVICE_CIDR))
        for host in (list(network.hosts())[1], network.broadcast_address - 1)
    ] + ["10.0.0.1"]
    for address in samples:
        if not routed_via_bridge(address):
            raise NodeError(f"{address} is not routed to {BRIDGE}: {_ip('route', 'get', address)}")


def _ranges_in_use() -> list[str]:
    """Routes or addresses of this host that overlap the pod or Service range."""
    ranges = [ipaddress.ip_network(POD_CIDR), ipaddress.ip_network(SERVICE_CIDR)]
    found = []
    for route in _ip("-4", "route", "show"):
        if route["dst"] == "default":
            continue
        network = ipaddress.ip_network(route["dst"], strict=False)
        if any(network.overlaps(r) for r in ranges):
            found.append(f"route {route['dst']} dev {route.get('dev')}")
    return found


def _iptables(*args: str) -> None:
    subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=True)


def _guard_rules() -> list[list[str]]:
    return [
        ["-o", "lo", "-j", "RETURN"],
        ["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"],
        ["!", "-o", BRIDGE, "-d", POD_CIDR, "-j", "DROP"],
        ["!", "-o", BRIDGE, "-d", SERVICE_CIDR, "-j", "DROP"],
    ]


def _install_guard() -> None:
    """The chain that keeps every packet of the node on this machine, first in FORWARD and
    OUTPUT (again, should kube-proxy have put its jumps before it)."""
    exists = subprocess.run(["iptables", "-w", "-n", "-L", GUARD_CHAIN], capture_output=True)
    if exists.returncode != 0:
        _iptables("-N", GUARD_CHAIN)
        for rule in _guard_rules():
            _iptables("-A", GUARD_CHAIN, *rule)
    for chain in ("FORWARD", "OUTPUT"):
        while (
            subprocess.run(
                ["iptables", "-w", "-D", chain, "-j", GUARD_CHAIN], capture_output=True
            ).returncode
            == 0
        ):
            pass
        _iptables("-I", chain, "1", "-j", GUARD_CHAIN)


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
            in_use = _ranges_in_use()
            if in_use:
                raise NodeError(f"the node's address ranges are in use here: {in_use}")
            _make_bridge()
            _install_guard()
            _check_routes()
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
            node._start_containerd()
            node._import_pause()
            node._start_kubelet()
            node._start_scheduler()
            node._start_kube_proxy()
            _install_guard()
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

    def _start_containerd(self) -> None:
        self._processes.append(
            _start_containerd(self.workdir, self.containerd_socket, FIRST_POD_RANGE)
        )

    def import_image(self, archive: Path) -> None:
        """Put an OCI archive's image into the node's containerd, where the kubelet finds it
        (pods name it with ``imagePullPolicy: Never`` or ``IfNotPresent``), and into every
        node added since (``add_node``)."""
        _import_image(self.containerd_socket, archive)
        self._archives.append(archive)
        for added in self._added:
            _import_image(added.containerd_socket, archive)

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
        process = _start_kubelet(self, NODE_NAME, self.workdir, self.containerd_socket, "/")
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
        wait_ready(process, _kube_proxy_synced, START_TIMEOUT)

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
            _stop_runtime(self._processes, PODS_CGROUP, self.containerd_socket)
            self.plane.stop()
            return left + self.host_before.restore()
        finally:
            os.close(self._lock)

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


# -- what each node runs: containerd and a kubelet ------------------------------------------


def _start_containerd(workdir: Path, socket: Path, pod_range: tuple[str, str]) -> ManagedProcess:
    """containerd with its root, state and socket under ``workdir``, its CNI config giving
    pods addresses in ``pod_range`` on the bridge, and every pull sent to a closed loopback
    port (``NO_PULL_PROXY``): an image that is not here fails to pull and nothing leaves."""
    root = workdir / "containerd"
    cni = workdir / "cni"
    (cni / "net.d").mkdir(parents=True, exist_ok=True)
    (cni / "net.d" / "10-drain-guard.conflist").write_text(json.dumps(_cni_config(cni, pod_range)))
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


def _import_image(socket: Path, archive: Path) -> None:
    done = _ctr(socket, "images", "import", "--no-unpack", str(archive))
    if done.returncode != 0:
        raise NodeError(f"ctr images import {archive}: {done.stderr.strip()}")


def _start_kubelet(
    node: Node, name: str, workdir: Path, socket: Path, cgroup_root: str
) -> ManagedProcess:
    """A kubelet for the Node ``name`` (client certificate ``system:node:NAME``) on
    ``socket``'s containerd, its state under ``workdir``, its pods under ``cgroup_root``."""
    plane = node.plane
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
            str(node.bin_dir / "kubelet"),
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


def _stop_runtime(processes: list[ManagedProcess], pods_cgroup: Path, socket: Path) -> None:
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
            _start_containerd(self.workdir, self.containerd_socket, ADDED_POD_RANGE)
        )
        for archive in self.node._archives:
            _import_image(self.containerd_socket, archive)
        kubelet = _start_kubelet(
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
        _stop_runtime(
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


def _pids_under(cgroup: Path) -> list[int]:
    pids: list[int] = []
    if not cgroup.is_dir():
        return pids
    for directory, _subdirectories, files in os.walk(cgroup):
        if "cgroup.procs" in files:
            text = (Path(directory) / "cgroup.procs").read_text()
            pids += [int(pid) for pid in text.split()]
    return pids


def _make_bridge() -> None:
    """The bridge with the host's address in the pod range, up, and the Service range
    routed to it: before any pod exists, so nothing for these ranges goes anywhere else."""
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    prefix = ipaddress.ip_network(POD_CIDR).prefixlen
    subprocess.run(["ip", "addr", "add", f"{HOST_ADDRESS}/{prefix}", "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
    subprocess.run(["ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE], check=True)


def _cni_config(cni: Path, pod_range: tuple[str, str]) -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": "drain-guard-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                # The bridge already has the host's address; no forwarding, no masquerade:
                # a pod reaches this host and the other pods, nothing else.
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(cni / "ipam"),
                    "ranges": [
                        [
                            {
                                "subnet": POD_CIDR,
                                "rangeStart": pod_range[0],
                                "rangeEnd": pod_range[1],
                                "gateway": HOST_ADDRESS,
                            }
                        ]
                    ],
                    "routes": [{"dst": SERVICE_CIDR, "gw": HOST_ADDRESS}],
                },
            }
        ],
    }


def _kube_proxy_synced() -> bool:
    """kube-proxy has written its Service rules (the kubernetes Service's among them)."""
    done = subprocess.run(
        ["iptables-save", "-t", "nat"], capture_output=True, text=True, check=False
    )
    return "default/kubernetes:https" in done.stdout
