"""Stopping the node puts the host back as it was before the node started.

Run last in the node suite (tests/node/conftest.py orders it so): it stops the session's
node itself, so its check is of the real kubelet's, kube-proxy's and containerd's changes.
"""

from __future__ import annotations

import os
from pathlib import Path

from drain_guard_sim.harness.node import Node
from drain_guard_sim.harness.nodenet import BRIDGE, GUARD_CHAIN


def test_stopping_the_node_puts_the_host_back(node: Node) -> None:
    before = node.host_before
    running = before.differences(before.now())
    # What the node changed while it ran (the kubelet's sysctls, the bridge, the chains):
    # without these this test would prove nothing.
    assert f"link added: {BRIDGE}" in running, running
    assert (
        "sysctl vm/overcommit_memory: 0 -> 1" in running
        or before.sysctls["vm/overcommit_memory"] == "1"
    ), running
    assert any(line.startswith("iptables table filter") for line in running), running
    assert any(line.startswith("cgroup added:") for line in running), running

    assert node.stop() == []
    now = before.now()
    assert before.differences(now) == []
    assert now.sysctls == before.sysctls
    assert now.iptables == before.iptables
    assert GUARD_CHAIN not in "\n".join(now.iptables.values())
    assert not Path(f"/sys/class/net/{BRIDGE}").exists()
    assert not [p for p in now.mounts if p.startswith(str(node.workdir))]
    assert not os.path.exists("/sys/fs/cgroup/memory/kubepods") or (
        "/sys/fs/cgroup/memory/kubepods" in before.cgroups
    )
