"""The node itself: nothing it runs can reach beyond this machine, it runs a pod from a
local image, and it leaves the host as it found it."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time

from drain_guard_sim.harness.controlplane import SERVICE_CIDR
from drain_guard_sim.harness.node import Node
from drain_guard_sim.harness.nodeimages import PAUSE_IMAGE
from drain_guard_sim.harness.nodenet import (
    BRIDGE,
    GUARD_CHAIN,
    HOST_ADDRESS,
    POD_CIDR,
    routed_via_bridge,
)
from drain_guard_sim.harness.noderuntime import NO_PULL_PROXY
from tests.node.helpers import delete_pod, kubectl, run_pod


def test_pod_and_service_ranges_are_routed_to_the_bridge(node: Node) -> None:
    """Every address a pod or a Service can have goes to the node's bridge, never to the
    default gateway (Node.start refuses to start the kubelet otherwise)."""
    for cidr in (POD_CIDR, SERVICE_CIDR):
        network = ipaddress.ip_network(cidr)
        for address in (network.network_address + 2, network.broadcast_address - 1):
            assert routed_via_bridge(str(address)), address


def test_the_guard_comes_first_in_forward_and_output(node: Node) -> None:
    """kube-proxy and the kubelet insert their chains at the top; the guard that drops what
    would leave the machine is still evaluated before any of them can accept a packet."""
    for chain in ("FORWARD", "OUTPUT"):
        rules = subprocess.run(
            ["iptables", "-w", "-S", chain], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        assert rules[1] == f"-A {chain} -j {GUARD_CHAIN}", rules
    guard = subprocess.run(
        ["iptables", "-w", "-S", GUARD_CHAIN], capture_output=True, text=True, check=True
    ).stdout
    assert f"-i {BRIDGE} ! -o {BRIDGE} -j DROP" in guard


def test_a_pod_runs_on_the_bridge_from_a_local_image(node: Node) -> None:
    """The scheduler places a pod on the node, the kubelet runs it through containerd from
    the image built here, and its address is in the pod range, on the bridge."""
    pod = run_pod(node, "pause-check", {"image": PAUSE_IMAGE, "imagePullPolicy": "Never"})
    try:
        assert pod["spec"]["nodeName"] == node.name
        ip = ipaddress.ip_address(pod["status"]["podIP"])
        assert ip in ipaddress.ip_network(POD_CIDR)
        assert str(ip) != HOST_ADDRESS
        neighbours = json.loads(
            subprocess.run(
                ["ip", "-j", "route", "get", str(ip)], capture_output=True, text=True, check=True
            ).stdout
        )
        assert neighbours[0]["dev"] == BRIDGE
    finally:
        delete_pod(node, "pause-check")
    assert "pause-check" not in kubectl(node, "get", "pods", "-o", "name")


def test_a_pull_goes_nowhere_but_a_closed_loopback_port(node: Node) -> None:
    """A pod naming an image that is not here: containerd's pull goes to its proxy, a closed
    port of loopback (NO_PULL_PROXY), and fails there; no registry is ever asked."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pull-check", "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "registry.invalid/none:1"}],
            "terminationGracePeriodSeconds": 1,
        },
    }
    kubectl(node, "apply", "-f", "-", stdin=json.dumps(pod))
    try:
        # The kubelet's Event of the failed pull carries containerd's error (the pod's status
        # soon says only "Back-off pulling image").
        deadline = time.monotonic() + 120
        while not (failed := _pull_failures(node, "pull-check")):
            assert time.monotonic() < deadline, "no failed pull reported"
            time.sleep(0.5)
        assert all(NO_PULL_PROXY.removeprefix("http://") in m for m in failed), failed
    finally:
        delete_pod(node, "pull-check")


def _pull_failures(node: Node, pod: str) -> list[str]:
    """The messages of the kubelet's Events of failed pulls for ``pod``."""
    events = json.loads(
        kubectl(
            node,
            "get",
            "events",
            f"--field-selector=involvedObject.name={pod},reason=Failed",
            "-o",
            "json",
        )
    )["items"]
    return [e["message"] for e in events if "Failed to pull image" in e["message"]]
