"""MachineOSConfig and MachineOSBuild, as each MCO from 4.16 on writes them (pure: no I/O).

A layered pool of MCO 4.16+ has a MachineOSConfig (``spec.machineConfigPool.name``; the
image its nodes are to run in ``status``), written by the administrator, and one
MachineOSBuild per build (kept after it ends), written by the build controller. Both are
cluster-scoped, group ``machineconfiguration.openshift.io``, each with a status
subresource. Their shape by version (read from the types MCO vendors from openshift/api):

- API version: ``v1alpha1`` on 4.16, 4.17 and 4.18 before its on-cluster-layering backport
  (``4.18-early``); ``v1`` from the backport and on 4.19;
- the build's name: ``<pool>-<rendered config>-builder`` on 4.16/4.17;
  ``<MachineOSConfig>-<hash>`` from 4.18-early;
- the config it builds: ``spec.desiredConfig.name`` (``v1alpha1``), ``spec.machineConfig.name``
  (``v1``);
- the image it pushed: ``status.finalImagePullspec`` (``v1alpha1``),
  ``status.digestedImagePushSpec`` (``v1``);
- the image of the pool's nodes: the MachineOSConfig's ``status.currentImagePullspec``
  (``v1alpha1``), ``status.currentImagePullSpec`` (``v1``);
- the current build: from 4.18-early, the MachineOSConfig's annotation
  ``machineconfiguration.openshift.io/current-machine-os-build`` names it.

4.18+ builds also carry the labels ``…/target-machine-config-pool``, ``…/rendered-machine-config``
and ``…/machine-os-config``, and the MachineOSConfig as owner. Every version writes the five
build conditions together, one of them True, in this order: ``Prepared``, ``Building``,
``Failed``, ``Interrupted``, ``Succeeded`` (:func:`build_conditions`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from drain_guard_sim.actors.mco import PREFIX, McoVersion

__all__ = [
    "BUILD_CONDITIONS",
    "CURRENT_BUILD_ANNOTATION",
    "api_version",
    "build_conditions",
    "build_image",
    "build_name",
    "build_state",
    "built_config",
    "config_image",
    "image_field",
    "machine_os_build",
    "machine_os_config",
]

JsonObj = dict[str, Any]

GROUP = "machineconfiguration.openshift.io"
#: On the MachineOSConfig, 4.18+: the MachineOSBuild whose image its nodes are to run (set
#: when a build starts, or when a revert reuses an old build).
CURRENT_BUILD_ANNOTATION = PREFIX + "current-machine-os-build"
TARGET_POOL_LABEL = PREFIX + "target-machine-config-pool"
RENDERED_CONFIG_LABEL = PREFIX + "rendered-machine-config"
MACHINE_OS_CONFIG_LABEL = PREFIX + "machine-os-config"

#: The build conditions in the order MCO writes them, with the reason and message of each.
BUILD_CONDITIONS: tuple[tuple[str, str, str], ...] = (
    ("Prepared", "Prepared", "Build Prepared and Pending"),
    ("Building", "Building", "Image Build In Progress"),
    ("Failed", "Failed", "Build Failed"),
    ("Interrupted", "Interrupted", "Build Interrupted"),
    ("Succeeded", "Ready", "Build Ready"),
)


def api_version(version: McoVersion) -> str:
    """The API version MCO ``version`` reads and writes the two kinds at."""
    return "v1" if version.checks_build_is_current else "v1alpha1"


def build_conditions(state: str, now: str) -> list[JsonObj]:
    """The five conditions with ``state`` (one of their types) True, the others False."""
    return [
        {
            "type": ctype,
            "status": "True" if ctype == state else "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        for ctype, reason, message in BUILD_CONDITIONS
    ]


def build_state(build: JsonObj) -> str:
    """The build's True condition (``Prepared`` … ``Succeeded``), or "" before any."""
    for cond in (build.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True":
            return str(cond.get("type"))
    return ""


def build_name(version: McoVersion, pool: str, config: str, mosc: str) -> str:
    """4.16/4.17: ``<pool>-<rendered>-builder``; 4.18+: ``<MachineOSConfig>-<hash>`` (MCO
    hashes the pool's configuration, the MachineOSConfig's spec and the OS images; here the
    rendered config stands for them all)."""
    if not version.job_builds:
        return f"{pool}-{config}-builder"
    digest = hashlib.md5(config.encode(), usedforsecurity=False).hexdigest()
    return f"{mosc}-{digest}"


def machine_os_build(
    version: McoVersion, pool: str, config: str, mosc: JsonObj, pushspec: str
) -> JsonObj:
    """The MachineOSBuild the build controller creates for ``pool``'s rendered ``config``."""
    mosc_name = mosc["metadata"]["name"]
    name = build_name(version, pool, config, mosc_name)
    meta: JsonObj = {"name": name}
    spec: JsonObj = {"machineOSConfig": {"name": mosc_name}}
    if version.job_builds:
        meta["labels"] = {
            TARGET_POOL_LABEL: pool,
            RENDERED_CONFIG_LABEL: config,
            MACHINE_OS_CONFIG_LABEL: mosc_name,
        }
        meta["ownerReferences"] = [
            {
                "apiVersion": mosc["apiVersion"],
                "kind": "MachineOSConfig",
                "name": mosc_name,
                "uid": mosc["metadata"].get("uid", ""),
                "controller": True,
            }
        ]
    if version.checks_build_is_current:
        spec |= {"machineConfig": {"name": config}, "renderedImagePushSpec": f"{pushspec}:{name}"}
    else:
        tag = name if version.job_builds else config
        spec |= {
            "desiredConfig": {"name": config},
            "renderedImagePushspec": f"{pushspec}:{tag}",
            "version": 1,
            "configGeneration": 1,
        }
    return {
        "apiVersion": f"{GROUP}/{api_version(version)}",
        "kind": "MachineOSBuild",
        "metadata": meta,
        "spec": spec,
    }


def machine_os_config(version: McoVersion, pool: str, pushspec: str) -> JsonObj:
    """The administrator's MachineOSConfig of ``pool`` (named after it), pushing to
    ``pushspec``; its image comes in ``status`` (:func:`config_image`)."""
    builder = "Job" if version.checks_build_is_current else "PodImageBuilder"
    secret = {"name": "builder-dockercfg"}
    if version.checks_build_is_current:
        spec: JsonObj = {
            "machineConfigPool": {"name": pool},
            "imageBuilder": {"imageBuilderType": builder},
            "renderedImagePushSecret": secret,
            "renderedImagePushSpec": f"{pushspec}:latest",
            "containerFile": [],
        }
    else:
        spec = {
            "machineConfigPool": {"name": pool},
            "buildInputs": {
                "imageBuilder": {"imageBuilderType": builder},
                "baseImagePullSecret": secret,
                "renderedImagePushSecret": secret,
                "renderedImagePushspec": f"{pushspec}:latest",
                "containerFile": [],
            },
            "buildOutputs": {"currentImagePullSecret": secret},
        }
    return {
        "apiVersion": f"{GROUP}/{api_version(version)}",
        "kind": "MachineOSConfig",
        "metadata": {"name": pool},
        "spec": spec,
    }


def image_field(version: McoVersion) -> tuple[str, str]:
    """The status fields of the image: the MachineOSConfig's, the MachineOSBuild's."""
    if version.checks_build_is_current:
        return "currentImagePullSpec", "digestedImagePushSpec"
    return "currentImagePullspec", "finalImagePullspec"


def config_image(version: McoVersion, mosc: JsonObj | None) -> str:
    """The image the MachineOSConfig names for its pool's nodes ("" before any)."""
    return str(((mosc or {}).get("status") or {}).get(image_field(version)[0]) or "")


def build_image(version: McoVersion, build: JsonObj | None) -> str:
    """The image a succeeded MachineOSBuild pushed ("" before it is written)."""
    return str(((build or {}).get("status") or {}).get(image_field(version)[1]) or "")


def built_config(build: JsonObj) -> str:
    """The rendered config a MachineOSBuild builds (either version's field)."""
    spec = build.get("spec") or {}
    ref = spec.get("machineConfig") or spec.get("desiredConfig") or {}
    return str(ref.get("name") or "")
