"""On-cluster image builds: MCO 4.15's "OpenShift Build" mode (the seed's), 4.16/4.17's build
pods and 4.18's build Jobs.

Two actors, as in a real cluster:

- :class:`MachineOSBuilder` is MCO 4.15's build controller (pkg/controller/build/
  build_controller.go, running as machine-os-builder): when a layered pool's
  ``spec.configuration.name`` changes it prepares the build (ConfigMaps), creates the Build
  ``build-<rendered>`` (labels ``…/buildPod``, ``…/targetMachineConfigPool``,
  ``…/desiredConfig``; annotation ``…/pool``) and marks the pool BuildPending, in its event
  handler; it follows the Build's phase (Running → Building; Complete → the new pullspec
  ``ocb-image@sha256:<digest>`` in the pool's ``newestImageEquivalentConfig`` and BuildSuccess,
  then the Build is cleaned up; Failed/Error/Cancelled → BuildFailed and Degraded). 4.16+'s,
  with MachineOSConfigs and MachineOSBuilds, is its subclass in ``osbuilder.py``.
- ``buildrunner.OpenShiftBuildController`` plays what runs the build pod, and the kubelet for
  it (4.15's Builds, 4.16/4.17's build pods, 4.18's build Jobs).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.machineos import built_config
from drain_guard_sim.actors.mco import (
    BUILD_POD_LABEL,
    DESIRED_CONFIG_LABEL,
    GROUP_BUILD,
    GROUP_MCO,
    LAYERING_LABEL,
    MCO_NAMESPACE,
    OCB_IMAGE_REPO,
    POOL_ANNOTATION,
    POOL_IMAGE,
    TARGET_POOL_LABEL,
    Actor,
    JsonObj,
    McoVersion,
    Timings,
    condition_true,
    labels_of,
    read_json,
)
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.timestamps import rfc3339

__all__ = ["MachineOSBuilder", "build_digest", "is_build_pod"]


def now_rfc3339() -> str:
    return rfc3339(datetime.now(UTC))


def is_build_pod(pod: JsonObj) -> bool:
    """A build pod of any version: in the MCO namespace, named after its ``build-`` object."""
    meta = pod.get("metadata") or {}
    return meta.get("namespace") == MCO_NAMESPACE and str(meta.get("name", "")).startswith("build-")


def build_digest(build_name: str) -> str:
    """The digest a build of ``build_name`` pushes (deterministic, so tests can predict it)."""
    return "sha256:" + hashlib.sha256(f"ocb:{build_name}".encode()).hexdigest()


def build_image_of(build: JsonObj) -> str:
    """The image a MachineOSBuild (4.16+) pushes: :func:`built_image` of its config."""
    return built_image(built_config(build))


def built_image(config: str) -> str:
    """The image a successful build of ``config`` has its pool name: whoever waits for a
    rollout of ``config`` knows the image its nodes must end on before the build is done."""
    return f"{OCB_IMAGE_REPO}@{build_digest(f'build-{config}')}"


def _conditions(**status: bool) -> list[JsonObj]:
    reasons = {
        "BuildPending": "BuildPending",
        "BuildSuccess": "BuildSucceeded",
        "BuildFailed": "BuildFailed",
    }
    out = []
    for ctype, value in status.items():
        cond: JsonObj = {
            "type": ctype,
            "status": "True" if value else "False",
            "lastTransitionTime": now_rfc3339(),
        }
        if value and ctype in reasons:
            cond["reason"] = reasons[ctype]
        out.append(cond)
    return out


async def _created(request: Awaitable[Any]) -> None:
    """A create whose object may exist already (a build started again): 409 is fine."""
    try:
        await read_json(await request)
    except ApiException as exc:
        if exc.status != 409:
            raise


class MachineOSBuilder(Actor):
    """MCO's 4.15 build controller for layered pools."""

    actor_name = "machine-os-builder"

    def __init__(
        self,
        kubeconfig: Path,
        timeline: Timeline,
        timings: Timings,
        version: McoVersion = McoVersion.V4_15,
    ) -> None:
        super().__init__(kubeconfig, timeline, timings, version)
        self.pools: Informer | None = None
        self.builds: Informer | None = None
        self._phases: dict[str, str] = {}
        #: MCO seconds each of a build's ConfigMap creates takes (a slow API server; 0: as
        #: fast as the simulator answers). ``SimCluster.lose_build_races`` sets it.
        self.slow_start = 0.0
        #: Awaited with the new rendered config before the build is marked pending: the end
        #: of the slow start comes after the node controller's sync, however loaded the
        #: machine (``SimCluster.lose_build_races``); None: no wait.
        self.pending_after: Callable[[str], Awaitable[None]] | None = None

    async def started(self) -> None:
        c = self.custom
        self.pools = Informer(
            c.list_cluster_custom_object,
            self._on_pool,
            {"group": GROUP_MCO, "version": "v1", "plural": "machineconfigpools"},
        )
        self.builds = Informer(
            c.list_namespaced_custom_object,
            self._on_build,
            {
                "group": GROUP_BUILD,
                "version": "v1",
                "namespace": MCO_NAMESPACE,
                "plural": "builds",
                "label_selector": BUILD_POD_LABEL,
            },
        )
        for inf, name in ((self.pools, "pools"), (self.builds, "builds")):
            self.spawn(inf.run(), f"machine-os-builder-{name}")
            await inf.synced.wait()

    def _on_pool(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        """updateMachineConfigPool: a layered pool's new rendered config starts its build here,
        in the event handler (shouldWeDoABuild), not 5 s later from the work queue, unless
        canPoolBuild refuses it (:meth:`_refusal`); 4.18 reuses the build of a config built
        before (:meth:`_reuse`)."""
        if etype != "MODIFIED" or old is None or LAYERING_LABEL not in labels_of(obj):
            return
        new_config = ((obj.get("spec") or {}).get("configuration") or {}).get("name")
        old_config = ((old.get("spec") or {}).get("configuration") or {}).get("name")
        if not new_config or new_config == old_config:
            return
        pool = obj["metadata"]["name"]
        refusal = self._refusal(obj, new_config)
        if refusal is not None:
            self.log(None, f"No build for MachineConfigPool {pool}, config {new_config}: {refusal}")
            return
        existing = self._build_of(new_config) if self.version.job_builds else None
        if existing is not None:
            self.spawn(self._reuse(pool, existing), f"reuse-{new_config}")
            return
        self.spawn(self._start_build(pool, new_config), f"build-{new_config}")

    def _build_of(self, config: str) -> JsonObj | None:
        """The Build (4.16+: standing for the MachineOSBuild) of ``config``, if it exists."""
        assert self.builds is not None
        return self.builds.cache.get(f"{MCO_NAMESPACE}/build-{config}")

    def _refusal(self, pool: JsonObj, config: str) -> str | None:
        """canPoolBuild: why no build starts for ``config`` (None: one may).

        Every version refuses while the pool is degraded (4.15's ``IsAnyDegraded``, 4.16+'s
        ``IsPoolAnyDegraded``: Degraded, NodeDegraded or RenderDegraded). 4.15 also refuses
        while its conditions say a build is pending, running or failed: a MachineConfig
        created during a build gets none (OCPBUGS-18344). 4.16 and 4.17 refuse when the
        MachineOSBuild of ``config`` exists, whatever its state: a revert to a config built
        before starts nothing, and the node controller goes on with that old build and the
        MachineOSConfig's current image (docs/mco-versions.md, D1).
        """
        if any(condition_true(pool, c) for c in ("Degraded", "NodeDegraded", "RenderDegraded")):
            return "the pool is degraded"
        if self.version is McoVersion.V4_15:
            for ctype, why in (
                ("BuildPending", "a build is pending"),
                ("Building", "a build is running"),
                ("BuildFailed", "the last build failed"),
            ):
                if condition_true(pool, ctype):
                    return why
            return None
        if not self.version.job_builds and self._build_of(config) is not None:
            return f"its MachineOSBuild build-{config} exists"
        return None

    async def _reuse(self, pool: str, build: JsonObj) -> None:
        """4.18+'s reuse of a config's existing build (``MachineOSBuildController``)."""
        raise NotImplementedError

    async def _start_build(self, pool: str, config: str) -> None:
        """startBuildForMachineConfigPool: the build's ConfigMaps, the Build, then BuildPending.

        Until the last write the pool still says BuildSuccess (of the previous build): the
        window in which MCO 4.15's node controller may target a node with the old image.
        """
        name = f"build-{config}"
        await self._config_maps(config)
        body = {
            "apiVersion": f"{GROUP_BUILD}/v1",
            "kind": "Build",
            "metadata": {
                "name": name,
                "namespace": MCO_NAMESPACE,
                "labels": {
                    BUILD_POD_LABEL: "",
                    TARGET_POOL_LABEL: pool,
                    DESIRED_CONFIG_LABEL: config,
                },
                "annotations": {POOL_ANNOTATION: ""},
            },
            "spec": {
                "source": {"type": "Dockerfile", "dockerfile": "FROM scratch"},
                "strategy": {
                    "type": "Docker",
                    "dockerStrategy": {"imageOptimizationPolicy": "SkipLayers"},
                },
                "output": {"to": {"kind": "DockerImage", "name": f"{OCB_IMAGE_REPO}:latest"}},
            },
        }
        await _created(
            self.custom.create_namespaced_custom_object(
                GROUP_BUILD, "v1", MCO_NAMESPACE, "builds", body, _preload_content=False
            )
        )
        if self.pending_after is not None:
            await self.pending_after(config)
        self.log(
            None,
            f"Build for {pool} marked pending with object reference Build {MCO_NAMESPACE}/{name}",
        )
        await self._set_pool(
            pool,
            conditions=_conditions(
                BuildFailed=False, BuildSuccess=False, Building=False, BuildPending=True
            ),
        )

    async def _config_maps(self, config: str) -> None:
        """The build's two ConfigMaps (its MachineConfig, its Dockerfile), each create
        ``slow_start`` MCO seconds slow."""
        for cm_name, key in (
            (f"mc-{config}", "machineconfig.json.gz"),
            (f"dockerfile-{config}", "Dockerfile"),
        ):
            cm = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": cm_name, "namespace": MCO_NAMESPACE},
                "data": {key: ""},
            }
            await asyncio.sleep(self.timings.s(self.slow_start))
            await _created(
                self.core.create_namespaced_config_map(MCO_NAMESPACE, cm, _preload_content=False)
            )

    def _on_build(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        if etype == "DELETED":
            return
        name = obj["metadata"]["name"]
        phase = (obj.get("status") or {}).get("phase") or "New"
        if self._phases.get(name) == phase:
            return
        self._phases[name] = phase
        self.spawn(self._build_updated(obj, phase), f"build-update-{name}")

    async def _build_updated(self, build: JsonObj, phase: str) -> None:
        name = build["metadata"]["name"]
        pool = labels_of(build).get(TARGET_POOL_LABEL, "worker")
        self.log(None, f"Build ({name}) is {phase}")
        if phase == "Running":
            await self._set_pool(
                pool,
                conditions=_conditions(
                    BuildFailed=False, BuildSuccess=False, Building=True, BuildPending=False
                ),
            )
        elif phase == "Complete":
            config = labels_of(build).get(DESIRED_CONFIG_LABEL)
            target = self._target(pool)
            if self.version is McoVersion.V4_15 and config != target:
                # FinalPullspec reads the build named after the pool's *current* config: one
                # created during this build (which canPoolBuild refused to build) has none,
                # and the pool stays Building, its image the old one (OCPBUGS-18344).
                self.log(
                    None,
                    f"could not get final image pullspec for pool {pool}: "
                    f"could not get build build-{target} for pool {pool}: not found",
                )
                return
            digest = (
                ((build.get("status") or {}).get("output") or {}).get("to", {}).get("imageDigest")
            )
            pullspec = f"{OCB_IMAGE_REPO}@{digest}"
            self.log(
                None,
                f"Build succeeded for MachineConfigPool {pool}, "
                f"config {labels_of(build).get(DESIRED_CONFIG_LABEL)}",
            )
            await self._set_pool(pool, image=pullspec)
            await self._set_pool(
                pool,
                conditions=_conditions(
                    BuildFailed=False, BuildSuccess=True, Building=False, Degraded=False
                ),
            )
            with contextlib.suppress(ApiException):
                await read_json(
                    await self.custom.delete_namespaced_custom_object(
                        GROUP_BUILD, "v1", MCO_NAMESPACE, "builds", name, _preload_content=False
                    )
                )
            self.log(None, f"Deleted build object {name}")
        elif phase in ("Failed", "Error", "Cancelled"):
            # 4.15's markBuildFailed degrades the pool too (the node controller's next status
            # sync recomputes Degraded from the nodes); BuildFailed alone stops new builds.
            await self._set_pool(
                pool,
                conditions=_conditions(
                    BuildFailed=True,
                    BuildSuccess=False,
                    Building=False,
                    BuildPending=False,
                    Degraded=True,
                ),
            )

    def _target(self, pool: str) -> str | None:
        """The pool's rendered config, as this controller's cache has it."""
        assert self.pools is not None
        obj = self.pools.cache.get(pool) or {}
        name = ((obj.get("spec") or {}).get("configuration") or {}).get("name")
        return str(name) if name else None

    async def _set_pool(
        self, pool: str, *, image: str | None = None, conditions: list[JsonObj] | None = None
    ) -> None:
        if image is not None:
            await read_json(
                await self.custom.patch_cluster_custom_object(
                    GROUP_MCO,
                    "v1",
                    "machineconfigpools",
                    pool,
                    {"metadata": {"annotations": {POOL_IMAGE: image}}},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
            )
        if conditions is not None:
            current = await read_json(
                await self.custom.get_cluster_custom_object_status(
                    GROUP_MCO, "v1", "machineconfigpools", pool, _preload_content=False
                )
            )
            kept = [
                c
                for c in (current.get("status") or {}).get("conditions") or []
                if c.get("type") not in {n["type"] for n in conditions}
            ]
            await read_json(
                await self.custom.patch_cluster_custom_object_status(
                    GROUP_MCO,
                    "v1",
                    "machineconfigpools",
                    pool,
                    {"status": {"conditions": kept + conditions}},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
            )
