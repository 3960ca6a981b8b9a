"""A NetworkPolicy enforcer on the real node (``harness.node``), whose bridge CNI plugin
enforces none: kube-router's network policy controller alone (``--run-firewall``, no routing,
no service proxy), built from the Go module proxy by ``scripts/build-kube-router.sh`` (``make
network-policy-enforcer``).

It runs as its DaemonSet's pod would (host network), as a process of this host, with a
ServiceAccount of its own that reads pods, namespaces, nodes and policies: for each pod of
the node (a pod whose host IP is the node's, ``--hostname-override``'s InternalIP: here both
kubelets', which share the bridge's host address) it keeps an iptables chain that admits what
the pod's policies admit, and the node's own addresses (the kubelet's probes, and the API
server here: kube-router admits a pod's own node always), and rejects the rest; ipsets hold
the peers. Why not kube-network-policies (the SIG's enforcer for any CNI): it queues packets
with nftables' ``queue`` expression, which this kernel is built without (``CONFIG_NFT_QUEUE``),
while kube-router's iptables, ``xt_set`` and ipsets are there.

``stop`` stops it and removes what it made: the rules that jump to its chains, its chains
(their names' prefixes, ``CHAIN_PREFIXES``) and the ipsets that were not there before it
started (its own ``--cleanup-config`` removes nothing in this version: it cleans up with a
controller it never set up); it returns what it could not remove.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from drain_guard_sim.harness.controlplane import SERVICE_CIDR
from drain_guard_sim.harness.node import Node
from drain_guard_sim.harness.nodenet import NodeError
from drain_guard_sim.harness.processes import ManagedProcess, spawn

__all__ = ["ENFORCER", "Enforcer", "enforcer_binary"]

ENFORCER = "kube-router"
NAMESPACE = "kube-system"
#: What its network policy controller reads (kube-router's own ClusterRole, less the writes
#: its router and service proxy make, which do not run here).
RBAC = f"""
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {ENFORCER}, namespace: {NAMESPACE}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {ENFORCER}}}
rules:
  - apiGroups: [""]
    resources: [pods, namespaces, nodes, services, endpoints]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {ENFORCER}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ENFORCER}}}
subjects:
  - {{kind: ServiceAccount, name: {ENFORCER}, namespace: {NAMESPACE}}}
"""
#: Its chain in the filter table's FORWARD, made at start.
TOP_CHAIN = "KUBE-ROUTER-FORWARD"
#: Its chains in the filter table: its hooks, one per pod it guards, one per policy.
CHAIN_PREFIXES = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-")
#: Seconds for it to start, and to stop once told to.
START_TIMEOUT = 60.0
STOP_GRACE = 10.0


def enforcer_binary(repo: Path) -> Path:
    """Where ``make network-policy-enforcer`` puts the binary."""
    return repo / "build" / "kube-router" / ENFORCER


def _filter() -> list[str]:
    saved = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout
    return saved.splitlines()


def _chains() -> set[str]:
    return {line.split()[0][1:] for line in _filter() if line.startswith(":")}


def _iptables(*args: str) -> str | None:
    """Run one iptables command on the filter table; its error, or None."""
    done = subprocess.run(
        ["iptables", "-t", "filter", *args], capture_output=True, text=True, check=False
    )
    return None if done.returncode == 0 else f"iptables {shlex.join(args)}: {done.stderr.strip()}"


def _ipsets() -> set[str]:
    listed = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=True)
    return set(listed.stdout.split())


@dataclass
class Enforcer:
    """kube-router's policy controller for the node's pods; ``stop`` puts the host back."""

    node: Node
    process: ManagedProcess
    chains: set[str]
    ipsets: set[str]

    @classmethod
    def start(cls, node: Node, binary: Path, workdir: Path) -> Enforcer:
        """Its account and grants, then the process, returned once its chains are in place."""
        if not binary.is_file():
            raise NodeError(f"{binary} is not built (make network-policy-enforcer)")
        chains, ipsets = _chains(), _ipsets()
        if TOP_CHAIN in chains:
            raise NodeError(f"another {ENFORCER} runs here ({TOP_CHAIN} exists)")
        workdir.mkdir(parents=True, exist_ok=True)
        node.kubectl("apply", "-f", "-", stdin=RBAC)
        token = node.kubectl("create", "token", "-n", NAMESPACE, ENFORCER).strip()
        kubeconfig = node.plane.token_kubeconfig(token, workdir / "kubeconfig")
        process = spawn(
            ENFORCER,
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={node.name}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--enable-cni=false",
                "--enable-ipv6=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--health-port=0",
                "--metrics-port=0",
                "--v=2",
            ],
            workdir,
        )
        enforcer = cls(node, process, chains, ipsets)
        deadline = time.monotonic() + START_TIMEOUT
        while TOP_CHAIN not in _chains():
            if process.popen.poll() is not None or time.monotonic() > deadline:
                left = enforcer.stop()
                raise NodeError(f"{ENFORCER} made no {TOP_CHAIN}:\n{process.tail()}\n{left}")
            time.sleep(0.2)
        return enforcer

    def stop(self) -> list[str]:
        """Stop it, remove what it made and its grants, and return what could not be removed
        (or was made meanwhile by something else)."""
        self.process.stop(STOP_GRACE)
        self.node.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=RBAC)
        made = _chains() - self.chains
        own = {c for c in made if c.startswith(CHAIN_PREFIXES)}
        errors = [f"a chain {c} that is not {ENFORCER}'s appeared" for c in sorted(made - own)]
        for line in _filter():  # the jumps to its chains, from chains not its own
            words = shlex.split(line)
            if words[:1] == ["-A"] and words[1] not in own and set(words) & own:
                errors.append(_iptables("-D", *words[1:]) or "")
        for step in ("-F", "-X"):  # flush all before deleting any: they jump to each other
            errors += [_iptables(step, chain) or "" for chain in sorted(own)]
        for name in sorted(_ipsets() - self.ipsets):
            done = subprocess.run(["ipset", "destroy", name], capture_output=True, text=True)
            errors.append(done.stderr.strip() and f"ipset destroy {name}: {done.stderr.strip()}")
        errors += [f"{ENFORCER}'s chain {c} is left" for c in sorted(own & _chains())]
        return [e for e in errors if e]
