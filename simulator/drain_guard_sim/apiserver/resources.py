"""The resource types the simulated API server serves, and what each one's API looks like.

Adding a resource is one line in ``RESOURCES``. The fields mirror what a real kube-apiserver
shows in discovery (``/api/v1``, ``/apis/<group>/<version>``) and how it treats the type:
which field selectors it accepts, whether it has a status subresource (then status is
ignored on writes to the main resource and reset on create, as the real strategies do),
whether a PUT without ``metadata.resourceVersion`` is allowed, whether ``metadata.generation``
is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JsonObj = dict[str, Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def _get_path(obj: Mapping[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """A field's value as the API server's field-selector sets render it (strings)."""
    value = _get_path(obj, path)
    if value is None:
        # Booleans absent from the object are false in the Go structs; strings are empty.
        return "false" if path in _BOOL_FIELDS else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_BOOL_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})

# Field labels each kind's conversion function accepts (k8s pkg/apis/*/v1/conversion.go).
# A kind missing here gets apimachinery's default: metadata.name and metadata.namespace.
POD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
)
NODE_FIELDS = ("metadata.name", "spec.unschedulable")
EVENT_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
NAMESPACE_FIELDS = ("metadata.name", "status.phase")
DEFAULT_FIELDS = ("metadata.name", "metadata.namespace")
# Field labels that the conversion function renames (old clients send spec.host).
FIELD_ALIASES = {("Pod", "spec.host"): "spec.nodeName", ("Event", "source"): "source.component"}


@dataclass(frozen=True)
class Subresource:
    """A subresource such as ``pods/status`` or ``pods/eviction``."""

    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str = ""
    version: str = ""


@dataclass(frozen=True)
class ResourceType:
    """One API resource: ``group``/``version``/``plural`` and how the server treats it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = ()
    fields: tuple[str, ...] = DEFAULT_FIELDS
    custom: bool = False  # a CustomResourceDefinition: no strategic merge patch
    generation: bool = True  # metadata.generation is set and bumped on spec changes
    allow_unconditional_update: bool = True  # PUT without metadata.resourceVersion allowed
    reset_status_on_create: bool = False
    singular: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """``plural`` for the core group, ``plural.group`` otherwise (as kubectl writes it)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def has_status(self) -> bool:
        return any(s.name == "status" for s in self.subresources)

    def subresource(self, name: str) -> Subresource | None:
        for sub in self.subresources:
            if sub.name == name:
                return sub
        return None

    def singular_name(self) -> str:
        return self.singular or self.kind.lower()


def _status(kind: str) -> Subresource:
    return Subresource("status", kind, ("get", "patch", "update"))


def _rt(
    api_version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    *,
    status: bool = False,
    **kwargs: Any,
) -> ResourceType:
    group, _, version = api_version.rpartition("/")
    subs: tuple[Subresource, ...] = kwargs.pop("subresources", ())
    if status:
        subs = (_status(kind), *subs)
    return ResourceType(group, version, plural, kind, namespaced, subresources=subs, **kwargs)


# One line per resource. Order is discovery order.
# fmt: off
RESOURCES: tuple[ResourceType, ...] = (
    _rt("v1", "namespaces", "Namespace", False, status=True, short_names=("ns",),
        fields=NAMESPACE_FIELDS, generation=False),
    _rt("v1", "nodes", "Node", False, status=True, short_names=("no",), fields=NODE_FIELDS,
        generation=False),
    _rt("v1", "pods", "Pod", True, status=True, short_names=("po",), categories=("all",),
        fields=POD_FIELDS, reset_status_on_create=True, generation=False,
        subresources=(Subresource("eviction", "Eviction", ("create",), "policy", "v1"),)),
    _rt("v1", "events", "Event", True, short_names=("ev",), fields=EVENT_FIELDS,
        generation=False),
    _rt("v1", "configmaps", "ConfigMap", True, short_names=("cm",), generation=False),
    _rt("v1", "secrets", "Secret", True, generation=False),
    _rt("v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",), generation=False,
        subresources=(Subresource("token", "TokenRequest", ("create",),
                                  "authentication.k8s.io", "v1"),)),
    _rt("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True, status=True,
        short_names=("pdb",), reset_status_on_create=True),
    _rt("apps/v1", "daemonsets", "DaemonSet", True, status=True, short_names=("ds",),
        categories=("all",), reset_status_on_create=True),
    _rt("apps/v1", "deployments", "Deployment", True, status=True, short_names=("deploy",),
        categories=("all",), reset_status_on_create=True),
    _rt("batch/v1", "jobs", "Job", True, status=True, categories=("all",),
        reset_status_on_create=True),
    _rt("certificates.k8s.io/v1", "certificatesigningrequests", "CertificateSigningRequest",
        False, status=True, short_names=("csr",), reset_status_on_create=True,
        subresources=(Subresource("approval", "CertificateSigningRequest",
                                  ("get", "patch", "update")),)),
    _rt("rbac.authorization.k8s.io/v1", "roles", "Role", True, generation=False),
    _rt("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True, generation=False),
    _rt("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False, generation=False),
    _rt("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False,
        generation=False),
    _rt("machineconfiguration.openshift.io/v1", "machineconfigs", "MachineConfig", False,
        short_names=("mc",), custom=True, allow_unconditional_update=False),
    _rt("machineconfiguration.openshift.io/v1", "machineconfigpools", "MachineConfigPool",
        False, status=True, short_names=("mcp",), custom=True,
        allow_unconditional_update=False, reset_status_on_create=True),
    _rt("build.openshift.io/v1", "builds", "Build", True, status=True, custom=True,
        allow_unconditional_update=False),
)
# fmt: on


def machine_os_resources(version: str) -> tuple[ResourceType, ...]:
    """MachineOSConfig and MachineOSBuild (``machineconfiguration.openshift.io``, cluster-scoped,
    with a status subresource) at ``version``: ``v1alpha1`` as MCO 4.16, 4.17 and 4.18 before
    its on-cluster-layering backport serve them, ``v1`` from that backport and in 4.19. A
    server serves one of the two (a cluster runs one MCO); ``crds.py`` gives a real API server
    both."""
    group = f"machineconfiguration.openshift.io/{version}"
    return (
        _rt(group, "machineosconfigs", "MachineOSConfig", False, status=True, custom=True,
            allow_unconditional_update=False, reset_status_on_create=True),
        _rt(group, "machineosbuilds", "MachineOSBuild", False, status=True, custom=True,
            allow_unconditional_update=False, reset_status_on_create=True),
    )  # fmt: skip


# The Eviction kind a POST to pods/eviction carries.
EVICTION_API_VERSIONS = ("policy/v1", "policy/v1beta1")


class ResourceIndex:
    """Look resource types up by path coordinates, plural, ``plural.group``, kind or short name."""

    def __init__(self, resources: tuple[ResourceType, ...] = RESOURCES) -> None:
        self.resources = resources
        self._by_gvr = {(r.group, r.version, r.plural): r for r in resources}
        self._by_name: dict[str, ResourceType] = {}
        for r in resources:
            for name in (r.key, r.kind, r.kind.lower(), r.singular_name(), *r.short_names):
                self._by_name.setdefault(name, r)
            self._by_name.setdefault(r.plural, r)

    def by_gvr(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def lookup(self, name: str | ResourceType) -> ResourceType:
        if isinstance(name, ResourceType):
            return name
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"unknown resource {name!r}") from None

    def groups(self) -> dict[str, list[str]]:
        """Group name → versions, in discovery order (the core group is ``""``)."""
        out: dict[str, list[str]] = {}
        for r in self.resources:
            versions = out.setdefault(r.group, [])
            if r.version not in versions:
                versions.append(r.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [r for r in self.resources if r.group == group and r.version == version]
