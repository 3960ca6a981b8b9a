"""MCO's MachineConfigPools, MachineOSBuilds and MachineOSConfigs on the real control plane,
with structural CRDs written for the tests (``mco_crds/``) as each MCO version serves them:
4.15 the pools alone, 4.16 (and 4.17, 4.18 before its on-cluster-layering backport) the build
objects in ``v1alpha1``, 4.18 from the backport (and 4.19) in ``v1``. The objects are written
as MCO's controllers write them: the spec at creation, the status through its subresource.

One control plane serves one version's CRDs at a time (a CRD has one schema per version, and
``v1alpha1`` and ``v1`` spell the same fields differently): ``install`` swaps them, so the
tests that use it have a control plane of their own (``control_plane_mco``).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.nodes import until

CRD_DIR = Path(__file__).with_name("mco_crds")
GROUP = "machineconfiguration.openshift.io"
POOLS = "machineconfigpools"
BUILDS = "machineosbuilds"
CONFIGS = "machineosconfigs"


class Mco(StrEnum):
    """Which of MCO's APIs the control plane serves."""

    V4_15 = "4.15"
    V4_16 = "4.16"
    V4_18 = "4.18"

    @property
    def files(self) -> tuple[str, ...]:
        machine_os = {Mco.V4_16: ("machineos-v1alpha1.yaml",), Mco.V4_18: ("machineos-v1.yaml",)}
        return ("machineconfigpools.yaml", *machine_os.get(self, ()))

    @property
    def build_version(self) -> str:
        """The API version of MachineOSBuilds and MachineOSConfigs (none on 4.15)."""
        return "v1" if self is Mco.V4_18 else "v1alpha1"


def definitions(version: Mco) -> list[Any]:
    return [
        crd
        for name in version.files
        for crd in yaml.safe_load_all((CRD_DIR / name).read_text())
        if crd
    ]


#: The version each control plane serves now (by its URL): swapped only when it changes.
_INSTALLED: dict[str, Mco] = {}
_ALL = tuple(f"{plural}.{GROUP}" for plural in (POOLS, BUILDS, CONFIGS))


async def install(plane: ControlPlane, admin: client.ApiClient, version: Mco) -> None:
    """Serve ``version``'s CRDs (and no other MCO CRD), each once it answers a list."""
    if _INSTALLED.get(plane.url) is version:
        return
    ext = client.ApiextensionsV1Api(admin)
    for name in _ALL:
        try:
            await ext.delete_custom_resource_definition(name)
        except ApiException as error:
            if error.status != 404:
                raise
    for name in _ALL:
        await until(functools.partial(_gone, ext, name))
    wanted = definitions(version)
    for crd in wanted:
        await ext.create_custom_resource_definition(crd)
    for crd in wanted:
        plural = crd["spec"]["names"]["plural"]
        served = crd["spec"]["versions"][0]["name"]
        await until(functools.partial(_lists, admin, plural, served))
    _INSTALLED[plane.url] = version


async def _gone(ext: client.ApiextensionsV1Api, name: str) -> bool:
    try:
        await ext.read_custom_resource_definition(name)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


async def _lists(admin: client.ApiClient, plural: str, version: str) -> bool:
    """A new CRD's storage answers 404 or 429 a moment after it is Established."""
    try:
        await client.CustomObjectsApi(admin).list_cluster_custom_object(GROUP, version, plural)
    except ApiException as error:
        if error.status not in (404, 429):
            raise
        return False
    return True


def condition(kind: str, status: bool = True, since: datetime | None = None) -> dict[str, Any]:
    """A condition as MCO writes one, changed now unless ``since``."""
    return {
        "type": kind,
        "status": "True" if status else "False",
        "lastTransitionTime": (since or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reason": "Test",
        "message": f"{kind} (test)",
    }


async def create(
    admin: client.ApiClient,
    plural: str,
    version: str,
    name: str,
    spec: dict[str, Any],
    status: dict[str, Any] | None = None,
) -> None:
    """Create the object, then write its status as MCO does (through the subresource)."""
    custom = client.CustomObjectsApi(admin)
    kinds = {POOLS: "MachineConfigPool", BUILDS: "MachineOSBuild", CONFIGS: "MachineOSConfig"}
    body = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": kinds[plural],
        "metadata": {"name": name},
        "spec": spec,
    }
    await custom.create_cluster_custom_object(GROUP, version, plural, body)
    if status is not None:
        await set_status(admin, plural, version, name, status)


async def set_status(
    admin: client.ApiClient, plural: str, version: str, name: str, status: dict[str, Any]
) -> None:
    await client.CustomObjectsApi(admin).patch_cluster_custom_object_status(
        GROUP, version, plural, name, [{"op": "add", "path": "/status", "value": status}]
    )


async def delete(admin: client.ApiClient, plural: str, version: str, name: str) -> None:
    try:
        await client.CustomObjectsApi(admin).delete_cluster_custom_object(
            GROUP, version, plural, name
        )
    except ApiException as error:
        if error.status != 404:
            raise


async def pool(
    admin: client.ApiClient, name: str, config: str, conditions: list[dict[str, Any]]
) -> None:
    """A pool whose spec and status name ``config`` (rolled out, or building it on 4.15)."""
    configuration = {"name": config}
    status = {"configuration": configuration, "conditions": conditions, "machineCount": 1}
    await create(admin, POOLS, "v1", name, {"configuration": configuration}, status)


async def machine_os_config(
    admin: client.ApiClient, version: Mco, name: str, pool_name: str, image: str
) -> None:
    """The pool's MachineOSConfig, naming ``image`` as its current one."""
    field = "currentImagePullSpec" if version is Mco.V4_18 else "currentImagePullspec"
    spec: dict[str, Any] = {"machineConfigPool": {"name": pool_name}}
    await create(admin, CONFIGS, version.build_version, name, spec, {field: image})


def build_spec(version: Mco, config: str, mosc: str) -> dict[str, Any]:
    """A MachineOSBuild's spec as each version's build controller writes it."""
    if version is Mco.V4_18:
        return {
            "machineConfig": {"name": config},
            "machineOSConfig": {"name": mosc},
            "renderedImagePushSpec": "registry.example.com/ocb/os-image:latest",
        }
    return {
        "configGeneration": 1,
        "version": 1,
        "desiredConfig": {"name": config},
        "machineOSConfig": {"name": mosc},
        "renderedImagePushspec": "registry.example.com/ocb/os-image:latest",
    }


def build_image(version: Mco, image: str) -> dict[str, str]:
    """A succeeded build's image, in the version's field."""
    return {"digestedImagePushSpec" if version is Mco.V4_18 else "finalImagePullspec": image}
