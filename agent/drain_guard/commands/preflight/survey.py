"""What the cluster runs (Kubernetes, OpenShift, MCO's API, on-cluster layering, the build-pod forms
served) and the overlay that fits it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from drain_guard.confine.rights import fitting_overlay

if TYPE_CHECKING:
    from drain_guard.kube.client import Kube

MCO_GROUP = "machineconfiguration.openshift.io"
#: OpenShift 4.15's on-cluster layering: a pool opted in by this label (before MachineOSConfig).
LAYERING_LABEL = "machineconfiguration.openshift.io/layering-enabled"


@dataclass(frozen=True)
class Fit:
    """What the cluster runs, and the overlay that fits it (None: none does)."""

    kubernetes: str
    openshift: str | None
    mco_resources: frozenset[str]
    layering: str
    build_forms: tuple[str, ...]
    overlay: str | None
    why: str


async def survey(kube: Kube) -> Fit:
    """The cluster's versions and MCO's API, and the overlay that fits them."""
    from drain_guard.kube.call import KubeError, call_api

    version = await call_api(_version_api(kube).get_code)
    minor = int(re.sub(r"\D.*", "", str(version.get("minor", "0"))) or 0)
    kubernetes = str(version.get("gitVersion", "?"))
    try:
        cluster = await call_api(
            kube.custom.get_cluster_custom_object,
            "config.openshift.io",
            "v1",
            "clusterversions",
            "version",
        )
        openshift: str | None = str(
            ((cluster.get("status") or {}).get("desired") or {}).get("version", "?")
        )
    except KubeError as exc:
        if exc.status != 404:
            raise
        openshift = None
    resources: set[str] = set()
    for api_version in ("v1", "v1alpha1"):
        try:
            found = await call_api(kube.custom.get_api_resources, MCO_GROUP, api_version)
        except KubeError as exc:
            if exc.status != 404:
                raise
            continue
        resources |= {
            f"{r['name']}.{api_version}"
            for r in found.get("resources") or ()
            if "/" not in r["name"]
        }
    layering = await _layering(kube, resources)
    overlay, why = fitting_overlay(minor, openshift)
    forms = await _build_forms(kube, resources)
    return Fit(kubernetes, openshift, frozenset(resources), layering, forms, overlay, why)


async def _build_forms(kube: Kube, resources: set[str]) -> tuple[str, ...]:
    """The forms a build pod can take here, by the APIs served: an OpenShift Build's pod
    (4.15's on-cluster layering), a MachineOSBuild's Job pod (4.16+); the default build-pod
    selectors match both."""
    from drain_guard.kube.call import KubeError, call_api

    forms = []
    try:
        builds = await call_api(kube.custom.get_api_resources, "build.openshift.io", "v1")
    except KubeError as exc:
        if exc.status != 404:
            raise
        builds = {}
    if any(r.get("name") == "builds" for r in builds.get("resources") or ()):
        forms.append("OpenShift Builds (build.openshift.io)")
    if any(r.startswith("machineosbuilds.") for r in resources):
        forms.append("MachineOSBuild jobs")
    return tuple(forms)


def _version_api(kube: Kube) -> Any:
    from kubernetes_asyncio.client.api.version_api import VersionApi

    return VersionApi(kube.api)


async def _layering(kube: Kube, resources: set[str]) -> str:
    """Whether on-cluster layering is on: a MachineOSConfig (4.16+), or a pool with 4.15's
    layering label."""
    from drain_guard.kube.call import call_api

    for api_version in ("v1", "v1alpha1"):
        if f"machineosconfigs.{api_version}" in resources:
            configs = await call_api(
                kube.custom.list_cluster_custom_object, MCO_GROUP, api_version, "machineosconfigs"
            )
            names = [c["metadata"]["name"] for c in configs.get("items") or ()]
            return f"MachineOSConfig {', '.join(names)}" if names else "off (no MachineOSConfig)"
    if "machineconfigpools.v1" in resources:
        pools = await call_api(
            kube.custom.list_cluster_custom_object,
            MCO_GROUP,
            "v1",
            "machineconfigpools",
            label_selector=LAYERING_LABEL,
        )
        names = [p["metadata"]["name"] for p in pools.get("items") or ()]
        return f"pools labelled {LAYERING_LABEL}: {', '.join(names)}" if names else "off"
    return "no MCO"
