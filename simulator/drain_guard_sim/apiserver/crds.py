"""CustomResourceDefinitions for the MCO's kinds the simulated actors use, written for this
project so that a real API server serves them as the simulator does (``resources.py``):
MachineConfig and MachineConfigPool (``machineconfiguration.openshift.io/v1``, cluster-scoped)
and Build (``build.openshift.io/v1``, namespaced). No schema is copied: each is an open object
(``x-kubernetes-preserve-unknown-fields``), because the actors, not the API server, give the
fields their meaning; what the server adds is the status subresource where the simulator has
one, and the short names.
"""

from __future__ import annotations

from typing import Any

from drain_guard_sim.apiserver.resources import RESOURCES, ResourceType

__all__ = ["custom_resource_definitions"]

_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _crd(rt: ResourceType) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": rt.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": _OPEN},
    }
    if rt.has_status:
        version["subresources"] = {"status": {}}
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
            "versions": [version],
        },
    }


def custom_resource_definitions() -> list[dict[str, Any]]:
    """One CRD per custom kind the simulator serves, as it serves it."""
    return [_crd(rt) for rt in RESOURCES if rt.custom]
