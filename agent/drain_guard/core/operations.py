"""Every Kubernetes API call the programs make, and every resource they watch, as enums (pure).

One list for the call wrapper (``Kube.call`` takes an :class:`Operation`), the metrics (the
``operation`` and ``resource`` labels) and ``drain_guard.confine.permissions`` (each operation
is the request it grants): a call cannot name an operation the metrics do not know, and an operation
cannot be added without the right it needs.
"""

from __future__ import annotations

from enum import StrEnum


class Operation(StrEnum):
    """One kind of API call: its value is the metrics' ``operation`` label."""

    NODE_GET = "node_get"
    NODE_LIST = "node_list"
    NODE_WATCH = "node_watch"
    NODE_PATCH = "node_patch"
    POD_GET = "pod_get"
    POD_LIST = "pod_list"
    POD_WATCH = "pod_watch"
    EVENT_CREATE = "event_create"
    EVENT_PATCH = "event_patch"
    DAEMONSET_GET = "daemonset_get"
    DEPLOYMENT_GET = "deployment_get"
    #: The confinement self-check's dry-run TokenRequest, made expecting a refusal.
    TOKEN_CREATE = "token_create"
    PODDISRUPTIONBUDGET_LIST = "poddisruptionbudget_list"
    PODDISRUPTIONBUDGET_WATCH = "poddisruptionbudget_watch"
    PODDISRUPTIONBUDGET_CREATE = "poddisruptionbudget_create"
    PODDISRUPTIONBUDGET_DELETE = "poddisruptionbudget_delete"
    #: Its MachineConfigPool's uid, for the pool's Events (``oc describe mcp`` finds them by it).
    MACHINECONFIGPOOL_GET = "machineconfigpool_get"
    #: MCO's pools, MachineOSBuilds and MachineOSConfigs: whether a build will replace a
    #: same-image target (drain_guard.core.replacement).
    MACHINECONFIGPOOL_LIST = "machineconfigpool_list"
    MACHINECONFIGPOOL_WATCH = "machineconfigpool_watch"
    MACHINEOSBUILD_LIST = "machineosbuild_list"
    MACHINEOSBUILD_WATCH = "machineosbuild_watch"
    MACHINEOSCONFIG_LIST = "machineosconfig_list"
    MACHINEOSCONFIG_WATCH = "machineosconfig_watch"

    @property
    def request(self) -> tuple[str, str, str]:
        """The API group, resource and verb an authorizer sees for this call."""
        return _REQUESTS[self]


_MCO = "machineconfiguration.openshift.io"

_REQUESTS: dict[Operation, tuple[str, str, str]] = {
    Operation.NODE_GET: ("", "nodes", "get"),
    Operation.NODE_LIST: ("", "nodes", "list"),
    Operation.NODE_WATCH: ("", "nodes", "watch"),
    Operation.NODE_PATCH: ("", "nodes", "patch"),
    Operation.POD_GET: ("", "pods", "get"),
    Operation.POD_LIST: ("", "pods", "list"),
    Operation.POD_WATCH: ("", "pods", "watch"),
    Operation.EVENT_CREATE: ("", "events", "create"),
    Operation.EVENT_PATCH: ("", "events", "patch"),
    Operation.DAEMONSET_GET: ("apps", "daemonsets", "get"),
    Operation.DEPLOYMENT_GET: ("apps", "deployments", "get"),
    Operation.TOKEN_CREATE: ("", "serviceaccounts/token", "create"),
    Operation.PODDISRUPTIONBUDGET_LIST: ("policy", "poddisruptionbudgets", "list"),
    Operation.PODDISRUPTIONBUDGET_WATCH: ("policy", "poddisruptionbudgets", "watch"),
    Operation.PODDISRUPTIONBUDGET_CREATE: ("policy", "poddisruptionbudgets", "create"),
    Operation.PODDISRUPTIONBUDGET_DELETE: ("policy", "poddisruptionbudgets", "delete"),
    Operation.MACHINECONFIGPOOL_GET: (
        "machineconfiguration.openshift.io",
        "machineconfigpools",
        "get",
    ),
    Operation.MACHINECONFIGPOOL_LIST: (_MCO, "machineconfigpools", "list"),
    Operation.MACHINECONFIGPOOL_WATCH: (_MCO, "machineconfigpools", "watch"),
    Operation.MACHINEOSBUILD_LIST: (_MCO, "machineosbuilds", "list"),
    Operation.MACHINEOSBUILD_WATCH: (_MCO, "machineosbuilds", "watch"),
    Operation.MACHINEOSCONFIG_LIST: (_MCO, "machineosconfigs", "list"),
    Operation.MACHINEOSCONFIG_WATCH: (_MCO, "machineosconfigs", "watch"),
}


class Watched(StrEnum):
    """A resource the programs list and watch: its value is the metrics' ``resource`` label."""

    NODE = "node"
    POD = "pod"
    PODDISRUPTIONBUDGET = "poddisruptionbudget"
    MACHINECONFIGPOOL = "machineconfigpool"
    MACHINEOSBUILD = "machineosbuild"
    MACHINEOSCONFIG = "machineosconfig"

    @property
    def plural(self) -> str:
        return f"{self.value}s"

    @property
    def list_operation(self) -> Operation:
        return Operation(f"{self.value}_list")

    @property
    def watch_operation(self) -> Operation:
        return Operation(f"{self.value}_watch")
