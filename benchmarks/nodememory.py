"""The agent's (or the 4.15 webhook's) memory as a real kubelet runs it: the container's
cgroup against the process.

Starts the node of the tests (``drain_guard_sim.harness.node``: containerd, kubelet,
kube-scheduler, kube-proxy beside a control plane; root, and it puts the host back), applies
the kubernetes overlay with ``make image``'s image (``Node.install``), waits ``--settle``
seconds for the agent to be at rest (its probes running, nothing else asked of it), then
samples every ``--interval`` seconds, ``--samples`` times: the container's memory cgroup
(``memory.usage_in_bytes``, what the kubelet compares with the 128 MiB limit and reports as
the pod's usage, and ``memory.stat``'s ``rss`` and ``cache``) and the agent process's
resident set (``VmRSS``: the 47.5 MiB of the footprint benchmark, which counts shared pages
of the interpreter's files that the cgroup charged to whoever read them first).

``--workload webhook``: the ``openshift-4.15`` overlay's webhook Deployment instead, on two
nodes (``Node.add_node``; ``harness.nodewebhook``: its certificate as the service CA would
issue it), beside the kubernetes overlay's agents it confines; each replica's container is
sampled, at rest (the kubelet's HTTPS probes, no admission asked of it).

``python -m benchmarks.nodememory [--workload agent|webhook] [--settle S] [--samples N]
[--interval S]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from drain_guard_sim.harness.controlplane import default_bin_dir
from drain_guard_sim.harness.node import Node
from drain_guard_sim.harness.nodewebhook import WEBHOOK, apply_webhook, webhook_objects

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "build" / "image" / "drain-guard.oci.tar"
OVERLAY = REPO / "daemonset" / "overlays" / "kubernetes"
WEBHOOK_OVERLAY = REPO / "daemonset" / "overlays" / "openshift-4.15"
#: The memory hierarchy: the first node's pods under kubepods, an added node's under
#: kubepods-NAME/kubepods.
CGROUP = Path("/sys/fs/cgroup/memory")
MIB = 2**20


def _container_cgroups(node: Node, app: str) -> list[Path]:
    """The memory cgroup of the one container of each pod of ``app`` in drain-guard."""
    pods = json.loads(node.kubectl("get", "pods", "-n", "drain-guard", "-o", "json"))["items"]
    found = []
    for pod in pods:
        if pod["metadata"]["labels"].get("app.kubernetes.io/name") != app:
            continue
        (status,) = pod["status"]["containerStatuses"]
        container = status["containerID"].split("://", 1)[1]
        (cgroup,) = CGROUP.glob(f"kubepods*/**/pod{pod['metadata']['uid']}/{container}")
        found.append(cgroup)
    return found


def _start_webhook(node: Node, tmp: Path) -> None:
    """The second node, both labelled control-plane, the agents' overlay (their namespaces
    and account) with its policies deleted, and the webhook's two replicas Ready."""
    second = node.add_node("drain-guard-node-2")
    for name in (node.name, second.name):
        node.kubectl("label", "node", name, "node-role.kubernetes.io/master=")
    node.install(OVERLAY, ARCHIVE, tmp / "install")
    node.kubectl("delete", "validatingadmissionpolicy,validatingadmissionpolicybinding", "--all")
    apply_webhook(node, webhook_objects(WEBHOOK_OVERLAY, ARCHIVE, tmp))


def _sample(cgroup: Path) -> dict[str, float]:
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    (pid,) = (int(p) for p in (cgroup / "cgroup.procs").read_text().split())
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    (rss_kib,) = (int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {
        "cgroup_usage_mib": int((cgroup / "memory.usage_in_bytes").read_text()) / MIB,
        "cgroup_rss_mib": int(stat["rss"]) / MIB,
        "cgroup_cache_mib": int(stat["cache"]) / MIB,
        "process_rss_mib": rss_kib / 1024,
    }


def measure(workload: str, settle: float, samples: int, interval: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-nodememory-") as tmp:
        node = Node.start(default_bin_dir(), Path(tmp) / "node")
        try:
            if workload == "webhook":
                _start_webhook(node, Path(tmp))
            else:
                node.install(OVERLAY, ARCHIVE, Path(tmp) / "install")
            time.sleep(settle)  # at rest: started, listed, probed
            cgroups = _container_cgroups(node, WEBHOOK if workload == "webhook" else "drain-guard")
            taken: list[list[dict[str, float]]] = [[] for _ in cgroups]
            for _ in range(samples):
                for each, cgroup in zip(taken, cgroups, strict=True):
                    each.append(_sample(cgroup))
                time.sleep(interval)
        finally:
            left = node.stop()
    if left:
        raise SystemExit("the node left the host changed:\n" + "\n".join(left))
    return {
        "params": {
            "workload": workload,
            "settle_s": settle,
            "samples": samples,
            "interval_s": interval,
        },
        "median": [{k: round(statistics.median(s[k] for s in t), 1) for k in t[0]} for t in taken],
        "range": [
            {k: [round(min(s[k] for s in t), 1), round(max(s[k] for s in t), 1)] for k in t[0]}
            for t in taken
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.nodememory", description=__doc__
    )
    p.add_argument("--workload", choices=("agent", "webhook"), default="agent")
    p.add_argument("--settle", type=float, default=60.0)
    p.add_argument("--samples", type=int, default=12)
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    if not ARCHIVE.exists():
        raise SystemExit(f"{ARCHIVE} is not built (make image)")
    result = measure(a.workload, a.settle, a.samples, a.interval)
    print(json.dumps(result["median"]))
    name = "nodememory" if a.workload == "agent" else "webhookmemory"
    print(f"wrote {write_result(name, result, a.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
