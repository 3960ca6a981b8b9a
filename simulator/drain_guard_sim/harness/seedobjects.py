"""The seed's objects, as either server stores them: the worker Node, MachineConfigs, the
pool's status after a rollout, the DaemonSets and Deployments whose pods a drain meets, and
the labels that keep clusters sharing a control plane apart."""

from __future__ import annotations

import hashlib

from drain_guard_sim.actors.machineos import build_state
from drain_guard_sim.actors.mco import (
    CONTROL_PLANE_TOPOLOGY,
    CURRENT_CONFIG,
    CURRENT_IMAGE,
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    GROUP_MCO,
    LAST_APPLIED_DRAIN,
    MCO_NAMESPACE,
    OCB_IMAGE_REPO,
    REASON,
    REGISTRY_NAMESPACE,
    ROLE_LABEL,
    STATE,
    STATE_DONE,
    WORKER_LABEL,
    JsonObj,
    McoVersion,
)

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
NFD_LABEL = "feature.node.kubernetes.io/kernel-version.full"


def updated_pool_status(config: str, machines: int, version: McoVersion) -> JsonObj:
    """A layered pool's status with every machine on ``config`` and its build succeeded: the
    state each scenario starts from (4.15's build conditions are the pool's; 4.16+'s are
    the MachineOSBuild's)."""
    builds = [
        {"type": "BuildSuccess", "status": "True", "reason": "BuildSucceeded"},
        {"type": "Building", "status": "False"},
        {"type": "BuildPending", "status": "False"},
        {"type": "BuildFailed", "status": "False"},
    ]
    return {
        "configuration": {"name": config},
        "machineCount": machines,
        "updatedMachineCount": machines,
        "readyMachineCount": machines,
        "degradedMachineCount": 0,
        "conditions": [
            *([] if version.gates_on_build else builds),
            {"type": "Updated", "status": "True"},
        ],
    }


def machine_os_build_result(version: McoVersion, build: JsonObj) -> tuple[str, str] | None:
    """A 4.16+ MachineOSBuild's end as :class:`BuildResult` names it (phase, reason), as the
    4.15 Build's would read: Complete; Error, BuildPodDeleted (its pod deleted); Failed,
    BackoffLimitExceeded (4.18+: its Job's fourth pod lost). None before it ended."""
    state = build_state(build)
    if state == "Succeeded":
        return "Complete", ""
    if state in ("Failed", "Interrupted"):
        return ("Failed", "BackoffLimitExceeded") if version.job_builds else (
            "Error", "BuildPodDeleted")  # fmt: skip
    return None


def suffix(*parts: str, n: int = 5) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


def owner_reference(owner: JsonObj) -> JsonObj:
    """The controller reference to ``owner`` (a DaemonSet or ReplicaSet) its pods carry."""
    meta = owner["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def pod_object(ns: str, name: str, node: str, labels: dict[str, str], owner: JsonObj) -> JsonObj:
    """A Running pod on ``node`` controlled by ``owner`` (an owner reference)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": dict(labels),
            "ownerReferences": [owner],
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


def machine_config(
    name: str, kernel_arguments: tuple[str, ...] = (), *, pool: str = "worker"
) -> JsonObj:
    """A MachineConfig for ``pool`` that writes one file (``/etc/<name>``);
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
    return machine_config_object(name, spec, pool)


def machine_config_object(name: str, spec: JsonObj, pool: str | None) -> JsonObj:
    """A MachineConfig, an input of ``pool``'s rendered config (None: none's, a rendered one)."""
    return {
        "apiVersion": f"{GROUP_MCO}/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {ROLE_LABEL: pool} if pool else {}},
        "spec": spec,
    }


def pool_label(pool: str) -> str:
    """The label that puts a Node in ``pool`` (its ``nodeSelector``)."""
    return f"node-role.kubernetes.io/{pool}"


def cluster_label(pool: str) -> str:
    """The label of every Node of the cluster named after its layered ``pool`` (both pools'),
    which its drain controller selects: clusters sharing a control plane never meet."""
    return f"sim.drain-guard.io/cluster-{pool}"


#: The taint of a control-plane Node; MCO's build pods tolerate it.
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}
#: The OS image a Node of a pool without layering boots.
BASE_OS_IMAGE = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:" + "5" * 64
EMPTY_CONFIG: JsonObj = {"config": {"ignition": {"version": "3.4.0"}}}
