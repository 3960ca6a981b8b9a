"""The seed's cluster on a real API server: each MCO actor's service account and the rights
it is bound to (a ClusterRole of what it calls, nothing more)."""

from __future__ import annotations

from drain_guard_sim.actors.mco import GROUP_MCO, MCO_NAMESPACE, JsonObj

#: The namespace of the actors' service accounts (MCO's own; openshift-infra's build
#: controller and kube-system's ReplicaSet controller live here too, for one place).
ACTOR_NAMESPACE = MCO_NAMESPACE
_NODES_RW = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}
_EVENTS = {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
_POOLS = {"apiGroups": [GROUP_MCO], "resources": ["machineconfigpools"],
          "verbs": ["get", "list", "watch", "patch"]}  # fmt: skip
_POOL_STATUS = {"apiGroups": [GROUP_MCO], "resources": ["machineconfigpools/status"],
                "verbs": ["get", "patch"]}  # fmt: skip
_BUILDS_READ = {"apiGroups": ["build.openshift.io"], "resources": ["builds"],
                "verbs": ["get", "list", "watch"]}  # fmt: skip
_MACHINE_OS_READ = {"apiGroups": [GROUP_MCO], "resources": ["machineosconfigs", "machineosbuilds"],
                    "verbs": ["get", "list", "watch"]}  # fmt: skip


#: Each actor's service account and what it calls, nothing more.
ACTOR_RULES: dict[str, list[JsonObj]] = {
    "machine-config-daemon": [
        _NODES_RW,
        _EVENTS,
        {"apiGroups": [GROUP_MCO], "resources": ["machineconfigs"], "verbs": ["get"]},
    ],
    # The drain controller and the render and node controllers: the machine-config-controller.
    "machine-config-controller": [
        _NODES_RW,
        _EVENTS,
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
        {
            "apiGroups": [GROUP_MCO],
            "resources": ["machineconfigs"],
            "verbs": ["get", "list", "watch", "create"],
        },
        _POOLS,
        _POOL_STATUS,
        _BUILDS_READ,
        _MACHINE_OS_READ,
    ],
    "machine-os-builder": [
        _POOLS,
        _POOL_STATUS,
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {
            "apiGroups": ["build.openshift.io"],
            "resources": ["builds"],
            "verbs": ["get", "list", "watch", "create", "delete"],
        },
        # 4.16+: the MachineOSBuilds it creates, their status and the MachineOSConfig's
        # (image, 4.18+'s current-build annotation); the build pods and Jobs it follows.
        {
            "apiGroups": [GROUP_MCO],
            "resources": ["machineosbuilds", "machineosconfigs"],
            "verbs": ["get", "list", "watch", "create", "patch"],
        },
        {
            "apiGroups": [GROUP_MCO],
            "resources": ["machineosbuilds/status", "machineosconfigs/status"],
            "verbs": ["patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "delete"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]},
    ],
    # openshift-controller-manager's build controller, 4.16+'s build pods, 4.18's Job
    # controller, and the kubelet for the build pod (its status, the end of its deletion).
    "build-controller": [
        {
            "apiGroups": ["build.openshift.io"],
            "resources": ["builds", "builds/status"],
            "verbs": ["get", "list", "watch", "patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "watch", "create", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete"]},
        {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["patch"]},
        {"apiGroups": [GROUP_MCO], "resources": ["machineosbuilds"], "verbs": ["list", "watch"]},
    ],
    "replicaset-controller": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    ],
    "kubelet": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "delete"]},
    ],
}
