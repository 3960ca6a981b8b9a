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
- :class:`OpenShiftBuildController` plays what runs the build pod, and the kubelet for it, on a
  chosen node, Pending → Running/Ready → Succeeded:

  - 4.15: openshift-controller-manager's build controller, for each Build: pod ``B-build``
    (label ``openshift.io/build.name=B``, owned by the Build); a pod deleted before it
    finishes ends the Build in phase Error, reason ``BuildPodDeleted``, as ``oc get build``
    shows in the seed;
  - 4.16/4.17: MCO's build pod ``build-<rendered>`` of each new MachineOSBuild (labels
    ``…/buildPod``, ``…/targetMachineConfigPool``, ``…/desiredConfig``; 4.17's
    ``…/on-cluster-layering`` labels are not modelled); the build controller reads its phase;
  - 4.18: the Job ``build-<MachineOSBuild>`` (``backoffLimit: 3``) whose pods carry
    ``batch.kubernetes.io/job-name`` and the Job as owner: a deleted (evicted) pod is
    replaced, and the build fails only after a fourth lost pod (BackoffLimitExceeded); it
    writes the Job's status (``active``, ``succeeded``, ``failed``), which the build
    controller reads.
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
from drain_guard_sim.actors.machineos import api_version, build_state, built_config
from drain_guard_sim.actors.mco import (
    BUILD_NAME_LABEL,
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

__all__ = [
    "MachineOSBuilder",
    "OpenShiftBuildController",
    "build_digest",
    "is_build_pod",
]

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

BUILD_CONTAINER = {"name": "docker-build", "image": "quay.io/openshift/origin-docker-builder"}
POD_DELETED_MESSAGE = "The pod for this build was deleted before the build completed."


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


class OpenShiftBuildController(Actor):
    """Runs each Build in its ``<build>-build`` pod on the node ``place(build)`` picks."""

    actor_name = "build-controller"

    def __init__(
        self,
        kubeconfig: Path,
        timeline: Timeline,
        timings: Timings,
        place: Callable[[str], str],
        version: McoVersion = McoVersion.V4_15,
    ) -> None:
        super().__init__(kubeconfig, timeline, timings, version)
        self.place = place
        self.builds: Informer | None = None
        self.pods: Informer | None = None
        self._running: dict[str, asyncio.Event] = {}
        self._pod_build: dict[str, str] = {}  # pod name → its build

    async def started(self) -> None:
        if self.version.gates_on_build:
            # 4.16+: MCO's build controller starts the build pod (4.18: the Job) of each new
            # MachineOSBuild; here this actor does, and plays the kubelet and the Job controller.
            self.builds = Informer(
                self.custom.list_cluster_custom_object,
                self._on_build,
                {"group": GROUP_MCO, "version": api_version(self.version),
                 "plural": "machineosbuilds"},
            )  # fmt: skip
        else:
            self.builds = Informer(
                self.custom.list_namespaced_custom_object,
                self._on_build,
                {"group": GROUP_BUILD, "version": "v1", "namespace": MCO_NAMESPACE,
                 "plural": "builds"},
            )  # fmt: skip
        self.pods = Informer(
            self.core.list_namespaced_pod, self._on_pod, {"namespace": MCO_NAMESPACE}
        )
        for inf, name in ((self.builds, "builds"), (self.pods, "pods")):
            self.spawn(inf.run(), f"build-controller-{name}")
            await inf.synced.wait()

    def _on_build(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        name = obj["metadata"]["name"]
        if etype == "DELETED":
            # Garbage collection of the owned pods follows the Build's deletion.
            for pod, build in list(self._pod_build.items()):
                if build == name:
                    self.spawn(self._delete_pod(pod), f"gc-{pod}")
            return
        status = obj.get("status") or {}
        started = build_state(obj) if self.version.gates_on_build else status.get("phase")
        if not started and name not in self._running:
            self._running[name] = asyncio.Event()
            self.spawn(self._run_build(obj), f"run-{name}")

    def _on_pod(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        name = obj["metadata"]["name"]
        if etype == "DELETED":
            gone = self._running.get(self._pod_build.get(name, ""))
            if gone is not None:
                gone.set()
        elif obj["metadata"].get("deletionTimestamp") and name in self._pod_build:
            # The kubelet's part on a real API server, which marks a bound pod deleted and
            # waits for its kubelet: the containers stop, the pod goes (grace period 0).
            # The simulator deletes at once and never sends this.
            self.spawn(self._delete_pod(name, grace_period=0), f"kubelet-{name}")

    def _pod(self, build: JsonObj, owner: JsonObj, attempt: int, node: str) -> JsonObj:
        """The build pod as each version's builder makes it."""
        name = build["metadata"]["name"]
        labels: dict[str, str] = {BUILD_NAME_LABEL: name}
        annotations: dict[str, str] = {BUILD_NAME_LABEL: name}
        pod_name = f"{name}-build"
        if self.version.job_builds:
            job = owner["metadata"]["name"]
            labels, annotations = {JOB_NAME_LABEL: job, "job-name": job}, {}
            pod_name = f"{job}-{attempt}"
        elif self.version.gates_on_build:
            config = built_config(build)
            pool = build["spec"]["machineOSConfig"]["name"]  # MachineOSConfigs named after pools
            labels = {BUILD_POD_LABEL: "", TARGET_POOL_LABEL: pool, DESIRED_CONFIG_LABEL: config}
            annotations, pod_name = {}, f"build-{config}"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": MCO_NAMESPACE,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": owner["metadata"]["name"],
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node,
                "serviceAccountName": "builder",
                "restartPolicy": "Never",
                "containers": [BUILD_CONTAINER],
            },
        }

    async def _job(self, build: JsonObj) -> JsonObj:
        """4.18: the build's Job ``build-<MachineOSBuild>`` (its pods are the Job controller's
        to replace)."""
        name = f"build-{build['metadata']['name']}"
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": MCO_NAMESPACE},
            "spec": {
                "backoffLimit": self.timings.build_backoff_limit,
                # A valid template (a real API server refuses a Job without one); nothing runs
                # it: this controller makes the Job's pods itself.
                "template": {
                    "metadata": {"labels": {JOB_NAME_LABEL: name}},
                    "spec": {"restartPolicy": "Never", "containers": [BUILD_CONTAINER]},
                },
            },
        }
        job: JsonObj = await read_json(
            await self.custom.create_namespaced_custom_object(
                "batch", "v1", MCO_NAMESPACE, "jobs", body, _preload_content=False
            )
        )
        return job

    async def _set_job(self, job: str, **counts: int) -> None:
        """The Job controller's status of the build's Job (``active``, ``succeeded``,
        ``failed``), from which 4.18's build controller reads the build's progress."""
        with contextlib.suppress(ApiException):  # cleaned up meanwhile
            await read_json(
                await self.custom.patch_namespaced_custom_object_status(
                    "batch",
                    "v1",
                    MCO_NAMESPACE,
                    "jobs",
                    job,
                    {"status": counts},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
            )

    async def _run_build(self, build: JsonObj) -> None:
        name = build["metadata"]["name"]
        node = self.place(name)
        owner = await self._job(build) if self.version.job_builds else build
        limit = self.timings.build_backoff_limit if self.version.job_builds else 0
        failures = 0
        while True:
            outcome = await self._run_pod(build, owner, failures, node)
            if outcome is None:
                if self.version.job_builds:
                    await self._set_job(owner["metadata"]["name"], active=0, succeeded=1)
                    await self._clean_up(name, owner)
                return
            failures += 1
            if self.version.job_builds:
                await self._set_job(owner["metadata"]["name"], active=0, failed=failures)
            if failures > limit:
                await self._pod_deleted(name, node)
                return
            self.log(node, f"Job {name}: pod {outcome} lost, retrying ({failures}/{limit})")
            await asyncio.sleep(self.timings.s(10.0 * 2 ** (failures - 1)))  # the Job's backoff

    async def _run_pod(self, build: JsonObj, owner: JsonObj, attempt: int, node: str) -> str | None:
        """One build pod to its end: None when the build completed, else the lost pod's name."""
        name = build["metadata"]["name"]
        deleted = self._running[name]
        deleted.clear()
        pod = self._pod(build, owner, attempt, node)
        pod_name = str(pod["metadata"]["name"])
        self._pod_build[pod_name] = name
        await read_json(
            await self.core.create_namespaced_pod(MCO_NAMESPACE, pod, _preload_content=False)
        )
        self.log(node, f"Build {name}: pod {MCO_NAMESPACE}/{pod_name} created on {node}")
        openshift_build = not self.version.gates_on_build
        if openshift_build:
            await self._set_build(
                name, {"phase": "Pending"}, {"openshift.io/build.pod-name": pod_name}
            )
        t = self.timings
        if await self._wait_deleted(deleted, t.s(t.build_pod_start)):
            return pod_name
        started = now_rfc3339()
        await self._set_pod_status(pod_name, "Running", ready=True, start=started)
        if self.version.job_builds:
            await self._set_job(owner["metadata"]["name"], active=1)
        if openshift_build:
            await self._set_build(name, {"phase": "Running", "startTimestamp": started})
        self.log(node, f"Build {name} is Running in pod {pod_name}")
        if await self._wait_deleted(deleted, t.s(t.build_duration)):
            return pod_name
        await self._set_pod_status(pod_name, "Succeeded", ready=False, start=started)
        if not openshift_build:
            self.log(
                node, f"Build {name}: pod {pod_name} Succeeded, pushed {build_image_of(build)}"
            )
            return None
        digest = build_digest(name)
        await self._set_build(
            name,
            {
                "phase": "Complete",
                "completionTimestamp": now_rfc3339(),
                "output": {"to": {"imageDigest": digest}},
            },
        )
        self.log(node, f"Build {name} Complete, pushed {OCB_IMAGE_REPO}@{digest}")
        return None

    @staticmethod
    async def _wait_deleted(deleted: asyncio.Event, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):
                await deleted.wait()
        except TimeoutError:
            return False
        return True

    async def _pod_deleted(self, name: str, node: str) -> None:
        if self.version.job_builds:
            message = "Job has reached the specified backoff limit"
            self.log(node, f"Build {name}: Failed (BackoffLimitExceeded): {message}")
            return
        if self.version.gates_on_build:
            # 4.16/4.17's build controller sees its pod go (MachineOSBuildController).
            self.log(node, f"Build {name}: its pod was deleted before the build completed")
            return
        await self._set_build(
            name, {"phase": "Error", "reason": "BuildPodDeleted", "message": POD_DELETED_MESSAGE}
        )
        self.log(node, f"Build {name}: Error (BuildPodDeleted): {POD_DELETED_MESSAGE}")

    async def _set_build(
        self, name: str, status: JsonObj, annotations: dict[str, str] | None = None
    ) -> None:
        if annotations:
            await read_json(
                await self.custom.patch_namespaced_custom_object(
                    GROUP_BUILD,
                    "v1",
                    MCO_NAMESPACE,
                    "builds",
                    name,
                    {"metadata": {"annotations": annotations}},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
            )
        await read_json(
            await self.custom.patch_namespaced_custom_object_status(
                GROUP_BUILD,
                "v1",
                MCO_NAMESPACE,
                "builds",
                name,
                {"status": status},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )

    async def _set_pod_status(self, pod_name: str, phase: str, *, ready: bool, start: str) -> None:
        status = {
            "phase": phase,
            "startTime": start,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"},
                {"type": "ContainersReady", "status": "True" if ready else "False"},
            ],
        }
        with contextlib.suppress(ApiException):  # deleted meanwhile: the event handler reports it
            await read_json(
                await self.core.patch_namespaced_pod_status(
                    pod_name,
                    MCO_NAMESPACE,
                    {"status": status},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
            )

    async def _clean_up(self, name: str, owner: JsonObj) -> None:
        """4.18+: a finished build's Job and its pods are deleted (the build controller's
        clean-up and the garbage collector); the MachineOSBuild stays."""
        with contextlib.suppress(ApiException):
            await read_json(
                await self.custom.delete_namespaced_custom_object(
                    "batch",
                    "v1",
                    MCO_NAMESPACE,
                    "jobs",
                    owner["metadata"]["name"],
                    _preload_content=False,
                )
            )
        for pod, build in list(self._pod_build.items()):
            if build == name:
                await self._delete_pod(pod)
        self.log(None, f"Build {name}: cleaned up its build pod")

    async def _delete_pod(self, pod_name: str, grace_period: int | None = None) -> None:
        with contextlib.suppress(ApiException):
            await read_json(
                await self.core.delete_namespaced_pod(
                    pod_name,
                    MCO_NAMESPACE,
                    grace_period_seconds=grace_period,
                    _preload_content=False,
                )
            )
