"""What runs an on-cluster image build: :class:`OpenShiftBuildController` plays what runs
the build pod, and the kubelet for it, on a chosen node, Pending → Running/Ready → Succeeded:

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
from collections.abc import Callable
from pathlib import Path

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.build import build_digest, build_image_of, now_rfc3339
from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.machineos import api_version, build_state, built_config
from drain_guard_sim.actors.mco import (
    BUILD_NAME_LABEL,
    BUILD_POD_LABEL,
    DESIRED_CONFIG_LABEL,
    GROUP_BUILD,
    GROUP_MCO,
    MCO_NAMESPACE,
    OCB_IMAGE_REPO,
    TARGET_POOL_LABEL,
    Actor,
    JsonObj,
    McoVersion,
    Timings,
    read_json,
)
from drain_guard_sim.actors.timeline import Timeline

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
BUILD_CONTAINER = {"name": "docker-build", "image": "quay.io/openshift/origin-docker-builder"}
POD_DELETED_MESSAGE = "The pod for this build was deleted before the build completed."


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
