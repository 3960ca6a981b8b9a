"""MCO 4.16+'s build controller: a MachineOSBuild per build, the image on the MachineOSConfig.

What it writes, in the order MCO writes it (``machineos.py`` has the objects' shape):

- a layered pool's new rendered config (``updateMachineConfigPool``; canPoolBuild's refusals
  are :meth:`MachineOSBuilder._refusal`'s): the build's ConfigMaps, then the MachineOSBuild
  (no status; 4.18+: the MachineOSConfig's ``current-machine-os-build`` annotation names it);
  the build pod (4.18: its Job) is started by ``OpenShiftBuildController``;
- 4.16/4.17 (``customBuildPodUpdater``, from the build pod): Pending → ``Prepared``, with
  ``status.builderReference``; Running → ``Building``; Succeeded → ``markBuildSucceeded``:
  the pod deleted, the MachineOSConfig's ``status.currentImagePullspec``, *then* the build's
  ``Succeeded`` and ``status.finalImagePullspec`` (release-4.16 build_controller.go
  ``updateConfigAndBuild``: D5); the pod deleted before it ended → ``Failed`` (MCO 4.16/4.17
  may leave such a build Building; the simulator fails it, as 4.15's build does);
- 4.18+ (``MapJobStatusToBuildStatus``, from the Job's status): no pod yet → ``Prepared``;
  active or failed at most ``backoffLimit`` times → ``Building``; succeeded → ``Succeeded``
  with ``status.digestedImagePushSpec`` (4.18-early: ``finalImagePullspec``), *then* the
  MachineOSConfig's image (``updateMachineOSConfigStatus``, after the clean-up); failed more
  often → ``Failed``. A revert to a config built before reuses its MachineOSBuild: the
  annotation names it again and the MachineOSConfig's image is its image.

The pool gets no build conditions from 4.16 on, nor a degraded condition for a failed build.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.build import MachineOSBuilder, build_image_of, now_rfc3339
from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.machineos import (
    CURRENT_BUILD_ANNOTATION,
    GROUP,
    api_version,
    build_conditions,
    build_image,
    build_state,
    built_config,
    image_field,
    machine_os_build,
)
from drain_guard_sim.actors.mco import (
    BUILD_POD_LABEL,
    DESIRED_CONFIG_LABEL,
    MCO_NAMESPACE,
    OCB_IMAGE_REPO,
    JsonObj,
    labels_of,
    read_json,
)

__all__ = ["MachineOSBuildController"]

_TERMINAL = ("Succeeded", "Failed", "Interrupted")


class MachineOSBuildController(MachineOSBuilder):
    """The build controller of MCO 4.16, 4.17, 4.18 and 4.19 (``version``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.configs: Informer | None = None
        self.progress: Informer | None = None
        #: Builds whose success this controller is writing: their pod's deletion (its own
        #: clean-up) is no failure.
        self._succeeding: set[str] = set()

    # -- API -------------------------------------------------------------------------------

    def _kind(self, plural: str) -> dict[str, str]:
        return {"group": GROUP, "version": api_version(self.version), "plural": plural}

    async def _patch(self, plural: str, name: str, body: JsonObj, *, status: bool) -> None:
        fn = (
            self.custom.patch_cluster_custom_object_status
            if status
            else self.custom.patch_cluster_custom_object
        )
        k = self._kind(plural)
        await read_json(
            await fn(
                k["group"],
                k["version"],
                plural,
                name,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )

    async def started(self) -> None:
        c = self.custom
        self.pools = Informer(
            c.list_cluster_custom_object,
            self._on_pool,
            {"group": GROUP, "version": "v1", "plural": "machineconfigpools"},
        )
        self.configs = Informer(c.list_cluster_custom_object, None, self._kind("machineosconfigs"))
        self.builds = Informer(c.list_cluster_custom_object, None, self._kind("machineosbuilds"))
        if self.version.job_builds:
            self.progress = Informer(
                c.list_namespaced_custom_object,
                self._on_job,
                {"group": "batch", "version": "v1", "namespace": MCO_NAMESPACE, "plural": "jobs"},
            )
        else:
            self.progress = Informer(
                self.core.list_namespaced_pod,
                self._on_pod,
                {"namespace": MCO_NAMESPACE, "label_selector": BUILD_POD_LABEL},
            )
        informers = (self.configs, self.builds, self.progress, self.pools)
        for inf, name in zip(informers, ("moscs", "mosbs", "progress", "pools"), strict=True):
            self.spawn(inf.run(), f"machine-os-builder-{name}")
            await inf.synced.wait()

    # -- lookups ---------------------------------------------------------------------------

    def _config_of(self, pool: str) -> JsonObj | None:
        """The pool's MachineOSConfig (``spec.machineConfigPool.name``)."""
        assert self.configs is not None
        for mosc in self.configs.cache.values():
            if ((mosc.get("spec") or {}).get("machineConfigPool") or {}).get("name") == pool:
                return mosc
        return None

    def _build_of(self, config: str) -> JsonObj | None:
        """The MachineOSBuild of the rendered ``config``, if one exists."""
        assert self.builds is not None
        for mosb in self.builds.cache.values():
            if built_config(mosb) == config:
                return mosb
        return None

    # -- starting a build ------------------------------------------------------------------

    async def _start_build(self, pool: str, config: str) -> None:
        mosc = self._config_of(pool)
        if mosc is None:
            self.log(None, f"No MachineOSConfig for MachineConfigPool {pool}: no build")
            return
        await self._config_maps(config)
        body = machine_os_build(self.version, pool, config, mosc, OCB_IMAGE_REPO)
        name = body["metadata"]["name"]
        with contextlib.suppress(ApiException):  # 409: it exists (a build started again)
            await read_json(
                await self.custom.create_cluster_custom_object(
                    GROUP,
                    api_version(self.version),
                    "machineosbuilds",
                    body,
                    _preload_content=False,
                )
            )
        self.log(None, f"New MachineOSBuild created: {name} for pool {pool}, config {config}")
        if self.version.job_builds:
            await self._name_current(mosc, name)

    async def _name_current(self, mosc: JsonObj, build: str) -> None:
        """4.18+: the MachineOSConfig's ``current-machine-os-build`` annotation."""
        mosc_name = mosc["metadata"]["name"]
        meta = {"annotations": {CURRENT_BUILD_ANNOTATION: build}}
        await self._patch("machineosconfigs", mosc_name, {"metadata": meta}, status=False)
        self.log(None, f"Set current build on MachineOSConfig {mosc_name} to {build}")

    async def _reuse(self, pool: str, build: JsonObj) -> None:
        """4.18's reuseExistingMachineOSBuildIfPossible: a succeeded build (or one still in
        progress) is the MachineOSConfig's current build again, and a succeeded one's image
        its image; a failed one is left alone."""
        mosc = self._config_of(pool)
        name = build["metadata"]["name"]
        state = build_state(build)
        if mosc is None or state in ("Failed", "Interrupted"):
            self.log(None, f"Existing MachineOSBuild {name} is {state}: neither reused nor built")
            return
        self.log(None, f"Existing MachineOSBuild {name} found ({state or 'New'}), reused")
        await self._name_current(mosc, name)
        if state == "Succeeded":
            await self._set_config_image(mosc["metadata"]["name"], build_image(self.version, build))

    async def _set_config_image(self, mosc: str, image: str) -> None:
        field = image_field(self.version)[0]
        await self._patch("machineosconfigs", mosc, {"status": {field: image}}, status=True)
        self.log(None, f"Updated status on MachineOSConfig {mosc}: {field} {image}")

    async def _set_state(self, name: str, state: str, extra: JsonObj | None = None) -> None:
        """The build's five conditions with ``state`` True (and ``extra`` status fields)."""
        status: JsonObj = {"conditions": build_conditions(state, now_rfc3339()), **(extra or {})}
        if state in _TERMINAL:
            status["buildEnd"] = now_rfc3339()
        await self._patch("machineosbuilds", name, {"status": status}, status=True)
        self.log(None, f"MachineOSBuild {name} is {state}")

    # -- progress, 4.16/4.17: the build pod --------------------------------------------------

    def _on_pod(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        build = self._build_of(labels_of(obj).get(DESIRED_CONFIG_LABEL, ""))
        if build is None:
            return
        name = build["metadata"]["name"]
        state = build_state(build)
        phase = (obj.get("status") or {}).get("phase")
        if etype == "DELETED":
            if state not in _TERMINAL and name not in self._succeeding:
                self.spawn(self._set_state(name, "Failed"), f"failed-{name}")
        elif phase == "Pending" and state == "":
            pod = obj["metadata"]["name"]
            ref = {
                "imageBuilderType": "PodImageBuilder",
                "buildPod": {"group": "", "resource": "pods", "namespace": MCO_NAMESPACE,
                             "name": pod},
            }  # fmt: skip
            extra = {"builderReference": ref, "buildStart": now_rfc3339()}
            self.spawn(self._set_state(name, "Prepared", extra), f"prepared-{name}")
        elif phase == "Running" and state in ("", "Prepared"):
            self.spawn(self._set_state(name, "Building"), f"building-{name}")
        elif phase == "Succeeded" and name not in self._succeeding:
            self._succeeding.add(name)
            self.spawn(self._pod_succeeded(build, obj["metadata"]["name"]), f"succeeded-{name}")

    async def _pod_succeeded(self, build: JsonObj, pod: str) -> None:
        """markBuildSucceeded: the clean-up, the MachineOSConfig's image, then the build's
        success (4.16/4.17's node controller waits for it: the image is there first)."""
        name = build["metadata"]["name"]
        image = build_image_of(build)
        with contextlib.suppress(ApiException):
            await read_json(
                await self.core.delete_namespaced_pod(pod, MCO_NAMESPACE, _preload_content=False)
            )
        await self._set_config_image(build["spec"]["machineOSConfig"]["name"], image)
        await self._set_state(name, "Succeeded", {image_field(self.version)[1]: image})

    # -- progress, 4.18+: the build's Job ----------------------------------------------------

    def _on_job(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        if etype == "DELETED":
            return  # the clean-up after a success, or of a failed build's objects
        assert self.builds is not None
        job = obj["metadata"]["name"]
        build = self.builds.cache.get(job.removeprefix("build-"))
        if build is None:
            return
        name = build["metadata"]["name"]
        status = obj.get("status") or {}
        active, failed = int(status.get("active") or 0), int(status.get("failed") or 0)
        if int(status.get("succeeded") or 0) > 0:
            state = "Succeeded"
        elif failed > self.timings.build_backoff_limit:
            state = "Failed"
        elif active or failed:
            state = "Building"
        else:
            state = "Prepared"
        if state == build_state(build) or name in self._succeeding:
            return
        if state == "Succeeded":
            self._succeeding.add(name)
            self.spawn(self._job_succeeded(build), f"succeeded-{name}")
            return
        extra: JsonObj = {}
        if state == "Prepared":
            ref = {"group": "batch", "resource": "jobs", "namespace": MCO_NAMESPACE, "name": job}
            builder = (
                {"builder": {"imageBuilderType": "Job", "job": ref}}
                if self.version.checks_build_is_current
                # 4.18-early's v1alpha1: the Job in the field that names a build pod.
                else {"builderReference": {"imageBuilderType": "PodImageBuilder", "buildPod": ref}}
            )
            extra = {**builder, "buildStart": now_rfc3339()}
        self.spawn(self._set_state(name, state, extra), f"{state.lower()}-{name}")

    async def _job_succeeded(self, build: JsonObj) -> None:
        """The build's success with its image first, then the MachineOSConfig's image
        (``updateMachineOSConfigStatus``, after the clean-up): 4.18-early's node controller,
        which does not check that the two agree, may target nodes in between (its residual
        race)."""
        name = build["metadata"]["name"]
        image = build_image_of(build)
        await self._set_state(name, "Succeeded", {image_field(self.version)[1]: image})
        await self._set_config_image(build["spec"]["machineOSConfig"]["name"], image)
