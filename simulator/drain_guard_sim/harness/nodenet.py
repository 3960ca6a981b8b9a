"""The real node's network and what keeps its packets on this machine: the bridge and its
address, the routes checked before anything starts, the guard chain, the pods' CNI config,
and whether kube-proxy's rules are in."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

from drain_guard_sim.harness.controlplane import SERVICE_CIDR

BRIDGE = "dgnode0"
POD_CIDR = "10.85.0.0/24"
#: The host's address on the bridge: the node's InternalIP and the API server's.
HOST_ADDRESS = "10.85.0.1"
GUARD_CHAIN = "DRAIN-GUARD-NODE-GUARD"


class NodeError(RuntimeError):
    """The node could not start safely, or not answer; nothing was left running."""


def _ip(*args: str) -> Any:
    done = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout) if done.stdout.strip() else []


def routed_via_bridge(address: str) -> bool:
    """Whether the kernel sends a packet for ``address`` out of the bridge, to no gateway."""
    (route,) = _ip("route", "get", address)
    return bool(route.get("dev") == BRIDGE and "gateway" not in route)


def check_routes() -> None:
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


def ranges_in_use() -> list[str]:
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


def install_guard() -> None:
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


def make_bridge() -> None:
    """The bridge with the host's address in the pod range, up, and the Service range
    routed to it: before any pod exists, so nothing for these ranges goes anywhere else."""
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    prefix = ipaddress.ip_network(POD_CIDR).prefixlen
    subprocess.run(["ip", "addr", "add", f"{HOST_ADDRESS}/{prefix}", "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
    subprocess.run(["ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE], check=True)


def cni_config(cni: Path, pod_range: tuple[str, str]) -> dict[str, Any]:
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


def kube_proxy_synced() -> bool:
    """kube-proxy has written its Service rules (the kubernetes Service's among them)."""
    done = subprocess.run(
        ["iptables-save", "-t", "nat"], capture_output=True, text=True, check=False
    )
    return "default/kubernetes:https" in done.stdout
