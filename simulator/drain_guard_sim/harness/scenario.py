"""The seed's scenario, what ``SimCluster`` (the simulator) and ``RealCluster`` (the real
control plane) play alike: its objects, its records of what happened, and the actors both
servers run besides the MCO's own.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from dataclasses import dataclass
from pathlib import Path

from drain_guard_sim.actors.mcd import UpdateRecord
from drain_guard_sim.actors.mco import (
    CONTROL_PLANE_TOPOLOGY,
    CURRENT_CONFIG,
    CURRENT_IMAGE,
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    LAST_APPLIED_DRAIN,
    MCO_NAMESPACE,
    OCB_IMAGE_REPO,
    REASON,
    REGISTRY_NAMESPACE,
    ROLE_LABEL,
    STATE,
    STATE_DONE,
    WORKER_LABEL,
    Actor,
    Informer,
    JsonObj,
    Timings,
    read_json,
)
from drain_guard_sim.actors.timeline import Timeline

__all__ = [
    "BASE_CONFIGS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "INITIAL_IMAGE",
    "NFD_LABEL",
    "RACE_MARGIN",
    "RACE_WAIT",
    "READY",
    "BuildResult",
    "Cordon",
    "Outcome",
    "ReplicaSetController",
    "machine_config",
    "pool_label",
    "updated_pool_status",
    "worker_node",
]


INITIAL_IMAGE = (
    f"{OCB_IMAGE_REPO}@sha256:6498f333a29f6d3943e852b039e77d894e47ee29b0212af38cf120ca7c4b85ce"
)
BASE_CONFIGS = ("00-worker", "01-worker-container-runtime", "01-worker-kubelet")
DAEMONSETS = (
    (MCO_NAMESPACE, "machine-config-daemon"),
    ("openshift-dns", "dns-default"),
    ("openshift-dns", "node-resolver"),
    ("openshift-image-registry", "node-ca"),
    ("openshift-monitoring", "node-exporter"),
    ("openshift-multus", "multus"),
    ("openshift-cluster-node-tuning-operator", "tuned"),
)
# (namespace, deployment, labels): the pods the seed's drain evicted besides the build pod.
DEPLOYMENTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    (MCO_NAMESPACE, "machine-os-builder", {"k8s-app": "machine-os-builder"}),
    (REGISTRY_NAMESPACE, "image-registry", {"docker-registry": "default"}),
    ("openshift-monitoring", "openshift-state-metrics", {"k8s-app": "openshift-state-metrics"}),
)
READY = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
#: The seed's losing order (``SimCluster.lose_build_races``), in MCO seconds: a label written
#: this long after the MachineConfig queues the node controller's sync 5 s later, i.e. this
#: long after the render's write (5 s after the MachineConfig), and each of the build's two
#: ConfigMap creates takes this long, so the build is marked pending 2 x this after the
#: render: the sync lands in the middle of the window, this far from either end.
RACE_MARGIN = 2.0
#: How long (MCO seconds) a build arranged to lose waits at most for the node controller's
#: target before it is marked pending anyway (a node controller that targets nothing, such as
#: a paused pool's, does not stall the build).
RACE_WAIT = 120.0
NFD_LABEL = "feature.node.kubernetes.io/kernel-version.full"


def updated_pool_status(config: str, machines: int) -> JsonObj:
    """A layered pool's status with every machine on ``config`` and its build succeeded: the
    state each scenario starts from."""
    return {
        "configuration": {"name": config},
        "machineCount": machines,
        "updatedMachineCount": machines,
        "readyMachineCount": machines,
        "degradedMachineCount": 0,
        "conditions": [
            {"type": "BuildSuccess", "status": "True", "reason": "BuildSucceeded"},
            {"type": "Building", "status": "False"},
            {"type": "BuildPending", "status": "False"},
            {"type": "BuildFailed", "status": "False"},
            {"type": "Updated", "status": "True"},
        ],
    }


def _suffix(*parts: str, n: int = 5) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class BuildResult:
    """How the build ended, as ``oc get build`` shows it (phase and reason)."""

    name: str
    phase: str
    reason: str
    node: str | None
    started: float
    finished: float

    @property
    def succeeded(self) -> bool:
        return self.phase == "Complete"


@dataclass(frozen=True)
class Cordon:
    """The MCC cordoned a node: when, for which request, and what the node said then."""

    node: str
    t: float
    desired_drain: str
    desired_image: str
    current_image: str
    update: UpdateRecord | None  # the MCD update that asked for it (its planned transition)

    @property
    def unchanged_image(self) -> bool:
        """The node's desired image equals its booted one: a pointless drain."""
        return self.desired_image == self.current_image


@dataclass
class Outcome:
    """What happened, reconstructed from the simulator's write log and the actors' records."""

    build: BuildResult | None
    cordons: list[Cordon]
    evictions: list[tuple[float, str, str]]  # (t, node, namespace/name)
    updates: list[UpdateRecord]
    reboots: dict[str, int]

    def during_build(self) -> list[Cordon]:
        b = self.build
        if b is None:
            return []
        return [c for c in self.cordons if b.started <= c.t <= b.finished]

    def after_build(self) -> list[Cordon]:
        b = self.build
        return [c for c in self.cordons if b is None or c.t > b.finished]

    def unchanged_image_cordons(self) -> list[Cordon]:
        return [c for c in self.cordons if c.unchanged_image]

    def build_pod_evicted(self) -> bool:
        b = self.build
        prefix = f"{MCO_NAMESPACE}/{b.name}-" if b is not None else None
        return prefix is not None and any(p.startswith(prefix) for _, _, p in self.evictions)


class ReplicaSetController(Actor):
    """kube-controller-manager's ReplicaSet controller (and the kubelet) in miniature.

    A deleted ReplicaSet-owned pod comes back, Running, on a schedulable node, preferably
    another one: what happens to the image registry or machine-os-builder when drained.
    """

    actor_name = "replicaset-controller"

    def __init__(self, kubeconfig: Path, timeline: Timeline, timings: Timings) -> None:
        super().__init__(kubeconfig, timeline, timings)
        self.nodes: Informer | None = None
        self.pods: Informer | None = None
        self._serial = itertools.count()

    async def started(self) -> None:
        self.nodes = Informer(self.core.list_node)
        self.pods = Informer(self.core.list_pod_for_all_namespaces, self._on_pod)
        for inf, name in ((self.nodes, "nodes"), (self.pods, "pods")):
            self.spawn(inf.run(), f"rs-{name}")
            await inf.synced.wait()

    def _on_pod(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        owners = obj["metadata"].get("ownerReferences") or []
        if etype == "DELETED" and any(o.get("kind") == "ReplicaSet" for o in owners):
            self.spawn(self._replace(obj), f"rs-replace-{obj['metadata']['name']}")

    async def _replace(self, old: JsonObj) -> None:
        assert self.nodes is not None
        await asyncio.sleep(self.timings.s(self.timings.replicaset_delay))
        old_node = old["spec"].get("nodeName")
        schedulable = sorted(
            name
            for name, n in self.nodes.cache.items()
            if not (n.get("spec") or {}).get("unschedulable")
        )
        if not schedulable:
            return
        node = next((n for n in schedulable if n != old_node), schedulable[0])
        owner = old["metadata"]["ownerReferences"][0]["name"]
        ns = old["metadata"]["namespace"]
        name = f"{owner}-{_suffix(owner, str(next(self._serial)), node)}"
        pod = _pod(ns, name, node, old["metadata"].get("labels") or {}, "ReplicaSet", owner)
        # The old pod's owner, uid and all: a real garbage collector deletes a pod whose owner
        # reference names no object.
        pod["metadata"]["ownerReferences"] = old["metadata"]["ownerReferences"]
        await read_json(await self.core.create_namespaced_pod(ns, pod, _preload_content=False))
        await read_json(
            await self.core.patch_namespaced_pod_status(
                name,
                ns,
                {"status": {"phase": "Running", "conditions": READY}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )
        self.log(node, f"ReplicaSet {ns}/{owner}: created pod {name} on {node}")


def _pod(
    ns: str, name: str, node: str, labels: dict[str, str], owner_kind: str, owner: str
) -> JsonObj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": dict(labels),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner_kind,
                    "name": owner,
                    "uid": _suffix(ns, owner, n=32),
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "sim"}]},
        "status": {"phase": "Running", "conditions": READY},
    }


def worker_node(name: str, cfg: str, image: str) -> JsonObj:
    """An idle, layered worker Node booted into ``image`` with ``cfg`` applied, as after a
    finished update: the one Node the simulator, the tests and the benchmarks start from."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                WORKER_LABEL: "",
            },
            "annotations": {
                CURRENT_CONFIG: cfg,
                DESIRED_CONFIG: cfg,
                CURRENT_IMAGE: image,
                DESIRED_IMAGE: image,
                STATE: STATE_DONE,
                REASON: "",
                DESIRED_DRAIN: f"uncordon-{cfg}",
                LAST_APPLIED_DRAIN: f"uncordon-{cfg}",
                CONTROL_PLANE_TOPOLOGY: "HighlyAvailable",
            },
        },
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {
                "osImage": "Red Hat Enterprise Linux CoreOS 415.92",
                "kubeletVersion": "v1.28.7",
            },
        },
    }


def machine_config(name: str, kernel_arguments: tuple[str, ...] = ()) -> JsonObj:
    """A MachineConfig for the worker pool that writes one file (``/etc/<name>``);
    ``kernel_arguments`` adds those, which MCO 4.15's layered update never applies (the node
    then fails its boot-time validation and stays Degraded: the rollout stops there)."""
    spec: JsonObj = {
        "config": {
            "ignition": {"version": "3.4.0"},
            "storage": {
                "files": [
                    {
                        "path": f"/etc/{name}",
                        "mode": 420,
                        "contents": {"source": f"data:,{name}"},
                    }
                ]
            },
        }
    }
    if kernel_arguments:
        spec["kernelArguments"] = list(kernel_arguments)
    return {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {ROLE_LABEL: "worker"}},
        "spec": spec,
    }


def pool_label(pool: str) -> str:
    """The label that puts a Node in ``pool`` (its ``nodeSelector``)."""
    return f"node-role.kubernetes.io/{pool}"
