"""CustomResourceDefinitions for the MCO's kinds the simulated actors use, written for this
project so that a real API server serves them as the simulator does (``resources.py``):
MachineConfig and MachineConfigPool (``machineconfiguration.openshift.io/v1``, cluster-scoped),
Build (``build.openshift.io/v1``, namespaced), and MachineOSConfig and MachineOSBuild
(cluster-scoped), served at ``v1alpha1`` (MCO 4.16, 4.17, 4.18 before its on-cluster-layering
backport) and ``v1`` (from it; the storage version), so that a simulated MCO of any version
runs on one shared control plane (no conversion: the fields are whatever the writer's version
wrote, as the simulator keeps them). No schema is copied: each is an open object
(``x-kubernetes-preserve-unknown-fields``), because the actors, not the API server, give the
fields their meaning; what the server adds is the status subresource where the simulator has
one, and the short names.
"""

from __future__ import annotations

from typing import Any

from drain_guard_sim.apiserver.resources import RESOURCES, ResourceType, machine_os_resources

__all__ = ["custom_resource_definitions"]

_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _version(rt: ResourceType, *, storage: bool = True) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": rt.version,
        "served": True,
        "storage": storage,
        "schema": {"openAPIV3Schema": _OPEN},
    }
    if rt.has_status:
        version["subresources"] = {"status": {}}
    return version


def _crd(rt: ResourceType, *older: ResourceType) -> dict[str, Any]:
    """``rt``'s CRD, its version the storage one, ``older`` served besides."""
    versions = [_version(o, storage=False) for o in older] + [_version(rt)]
    names: dict[str, Any] = {
        "plural": rt.plural,
        "singular": rt.singular_name(),
        "kind": rt.kind,
        "listKind": f"{rt.kind}List",
    }
    if rt.short_names:
        names["shortNames"] = list(rt.short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": rt.key},
        "spec": {
            "group": rt.group,
            "names": names,
            "scope": "Namespaced" if rt.namespaced else "Cluster",
            "versions": versions,
        },
    }


def custom_resource_definitions() -> list[dict[str, Any]]:
    """One CRD per custom kind the simulator serves, as it serves it."""
    machine_os = zip(machine_os_resources("v1"), machine_os_resources("v1alpha1"), strict=True)
    return [_crd(rt) for rt in RESOURCES if rt.custom] + [_crd(v1, old) for v1, old in machine_os]
