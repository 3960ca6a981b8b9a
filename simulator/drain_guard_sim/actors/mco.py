"""What the simulated MCO actors share: names, timings, the API client, the actor's base class.

Each actor (``mcd.py``, ``drain.py``, ``nodecontroller.py``, ``build.py``) is a client of the
simulated API server through kubernetes_asyncio over HTTP, with its own identity, like the real
controllers. Names and default durations are MCO release-4.15's (see ``docs`` in each module).
Their client-go parts: the work queue in ``workqueue``, informers in ``informer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.timeline import Timeline, TimelineEntry

__all__ = ["Actor", "JsonObj", "McoVersion", "Timings"]

log = logging.getLogger(__name__)

JsonObj = dict[str, Any]

MCO_NAMESPACE = "openshift-machine-config-operator"
REGISTRY_NAMESPACE = "openshift-image-registry"
PREFIX = "machineconfiguration.openshift.io/"
CURRENT_CONFIG = PREFIX + "currentConfig"
DESIRED_CONFIG = PREFIX + "desiredConfig"
CURRENT_IMAGE = PREFIX + "currentImage"
DESIRED_IMAGE = PREFIX + "desiredImage"
STATE = PREFIX + "state"
REASON = PREFIX + "reason"
DESIRED_DRAIN = PREFIX + "desiredDrain"
LAST_APPLIED_DRAIN = PREFIX + "lastAppliedDrain"
CONTROL_PLANE_TOPOLOGY = PREFIX + "controlPlaneTopology"
LAYERING_LABEL = PREFIX + "layering-enabled"
POOL_IMAGE = PREFIX + "newestImageEquivalentConfig"
BUILD_POD_LABEL = PREFIX + "buildPod"
TARGET_POOL_LABEL = PREFIX + "targetMachineConfigPool"
DESIRED_CONFIG_LABEL = PREFIX + "desiredConfig"
POOL_ANNOTATION = PREFIX + "pool"
ROLE_LABEL = PREFIX + "role"
WORKER_LABEL = "node-role.kubernetes.io/worker"
BUILD_NAME_LABEL = "openshift.io/build.name"
OCB_IMAGE_REPO = (
    "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/ocb-image"
)

STATE_DONE = "Done"
STATE_WORKING = "Working"
STATE_DEGRADED = "Degraded"

MCD_USER = "system:serviceaccount:openshift-machine-config-operator:machine-config-daemon"
MCC_USER = "system:serviceaccount:openshift-machine-config-operator:machine-config-controller"
BUILDER_USER = "system:serviceaccount:openshift-machine-config-operator:machine-os-builder"
# openshift-controller-manager's build controller runs the build pods.
BUILD_CONTROLLER_USER = "system:serviceaccount:openshift-infra:build-controller"
# kube-controller-manager's ReplicaSet controller (and the kubelet, for pod status).
KCM_USER = "system:serviceaccount:kube-system:replicaset-controller"
ADMIN_USER = "system:admin"

GROUP_MCO = "machineconfiguration.openshift.io"
GROUP_BUILD = "build.openshift.io"


class McoVersion(StrEnum):
    """Which MCO the actors play; where the versions differ is in docs/mco-versions.md.

    ``4.16-early``: 4.16 before PR 4484 (release-4.16, 2024-07-27), whose drain controller
    queues a node on every Node update, as 4.15's does; ``4.16``: 4.16 from then, and 4.17;
    ``4.18-early``: 4.18 before the on-cluster-layering backport (PR 5025, 2025-05-27): as
    4.16/4.17, with Job builds; ``4.18``: 4.18's latest z-stream (the backport, which brought
    OCPBUGS-53408's check, and the drain controller's cordon management of PRs 5322 and 6101)
    and 4.19.
    """

    V4_15 = "4.15"
    V4_16_EARLY = "4.16-early"
    V4_16 = "4.16"
    V4_18_EARLY = "4.18-early"
    V4_18 = "4.18"

    @property
    def gates_on_build(self) -> bool:
        """4.16+: nodes are targeted only once the build of the pool's rendered config is done."""
        return self is not McoVersion.V4_15

    @property
    def drain_on_annotation_only(self) -> bool:
        """4.16 from PR 4484: the drain controller queues a node only when ``desiredDrain``
        changes (and, with ``manages_cordon``, ``spec.unschedulable``)."""
        return self not in (McoVersion.V4_15, McoVersion.V4_16_EARLY)

    @property
    def job_builds(self) -> bool:
        """4.18+: a build runs as a Job (``backoffLimit: 3``), whose evicted pod is retried."""
        return self in (McoVersion.V4_18_EARLY, McoVersion.V4_18)

    @property
    def checks_build_is_current(self) -> bool:
        """4.18 from the backport, 4.19: the node controller also waits until the pool's image
        is its build's (``MachineOSBuildIsCurrent``, OCPBUGS-53408)."""
        return self is McoVersion.V4_18

    @property
    def manages_cordon(self) -> bool:
        """4.18's latest, 4.19: the drain controller cordons again a node uncordoned during
        its drain, queues the node when ``spec.unschedulable`` changes, and then writes no
        ``lastAppliedDrain`` (PRs 5322, 6101)."""
        return self is McoVersion.V4_18


@dataclass(frozen=True)
class Timings:
    """Every duration the actors use, in MCO's seconds; ``s()`` scales by ``time_factor``.

    Defaults are MCO 4.15's (daemon/drain.go, controller/drain/drain_controller.go,
    kubectl's drain helper); the build and reboot durations are typical values.
    """

    time_factor: float = 1.0
    # machine-config-daemon (performDrain, completeUpdate)
    mcd_poll: float = 10.0
    mcd_drain_timeout: float = 3600.0
    mcd_uncordon_timeout: float = 600.0
    #: daemon.go's queue: AddRateLimited on every Node event, whose per-item exponential
    #: limiter starts at 1 s (the bucket limiter at rate.Limit(updateDelay) never waits).
    mcd_sync_delay: float = 1.0
    mcd_max_backoff: float = 60.0
    #: runPreflightConfigDriftCheck before an update (the seed's took 0.42 s after
    #: ``rpm-ostree kargs``): drawn in this range, so a request lands 1.5-3 s after the
    #: node controller's write and the 4.15 MCC acts 2-3.5 s after the request.
    mcd_drift_check: tuple[float, float] = (0.5, 2.0)
    #: the daemon DaemonSet's terminationGracePeriodSeconds; the MCD ignores SIGTERM mid-update
    mcd_termination_grace: float = 600.0
    reboot: float = 60.0
    # machine-config-controller drain controller
    mcc_update_delay: float = 5.0
    mcc_drain_helper_timeout: float = 90.0
    mcc_requeue: float = 60.0
    mcc_requeue_failing_threshold: float = 600.0
    mcc_requeue_failing_delay: float = 300.0
    mcc_drain_timeout: float = 3600.0
    mcc_max_retries: int = 15
    mcc_drop_requeue: float = 60.0
    mcc_workers: int = 5
    #: Real seconds, not scaled: the least time the drain controller lets pass between seeing
    #: a new ``drain-`` request and the sync that acts on it (0: none). MCO's own gap is
    #: seconds (its 5 s timer, a request 1.5 to 3 s after the target), but one queued by an
    #: earlier Node event lands any time after the request: 0.7 MCO s is 7 ms of real time at
    #: a time factor of 0.01, under an agent's own reaction, where on a cluster it is 0.7 s,
    #: a hundred times it. ``benchmarks.pool`` sets it; the tests keep MCO's gaps as they are.
    drain_request_floor: float = 0.0
    rate_limit_base: float = 0.005
    rate_limit_max: float = 1000.0
    eviction_retry: float = 5.0
    wait_for_delete_interval: float = 1.0
    cordon_backoff: float = 10.0
    # render controller (renderDelay) and node controller (defaultUpdateDelay)
    render_delay: float = 5.0
    node_controller_delay: float = 5.0
    # builds: the build controller starts a build in its pool event handler, at once.
    build_backoff_limit: int = 3
    build_pod_start: float = 3.0
    build_duration: float = 120.0
    #: the kubelet's nodeStatusReportFrequency (MCO's kubelet.yaml): a Node status write
    kubelet_status_report: float = 300.0
    # ReplicaSet controller re-creating an evicted pod
    replicaset_delay: float = 1.0

    def s(self, seconds: float) -> float:
        """MCO seconds → simulated seconds."""
        return seconds * self.time_factor

    def scaled(self, time_factor: float) -> Timings:
        return replace(self, time_factor=time_factor)


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def condition_true(obj: Mapping[str, Any], ctype: str) -> bool:
    """Whether ``obj``'s status condition ``ctype`` is True (absent: False)."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return bool(cond.get("status") == "True")
    return False


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotation_patch(old: Mapping[str, str], new: Mapping[str, str | None]) -> JsonObj | None:
    """The strategic-merge patch client-go's CreateTwoWayMergePatch makes for annotations.

    Only changed keys go in (``None`` deletes); no resourceVersion, so last writer wins.
    ``None`` when nothing changes (MCO would send ``{}``, which the server ignores).
    """
    changes = {k: v for k, v in new.items() if old.get(k) != v and not (v is None and k not in old)}
    if not changes:
        return None
    return {"metadata": {"annotations": changes}}


async def api_client(kubeconfig: Path) -> k8s.ApiClient:
    cfg = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return k8s.ApiClient(configuration=cfg)


async def read_json(resp: Any) -> Any:
    """Body of a ``_preload_content=False`` response, released; ApiException if not 2xx.

    (kubernetes_asyncio only raises for error statuses when it preloads the content.)
    """
    try:
        body = await resp.read()
    finally:
        resp.release()
    if not 200 <= resp.status <= 299:
        raise api_exception(resp.status, body)
    return json.loads(body)


def api_exception(status: int, body: bytes) -> ApiException:
    """An ApiException carrying the Status message as its reason."""
    try:
        reason = str(json.loads(body).get("message", ""))
    except ValueError:
        reason = body.decode(errors="replace")
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    return exc


class Actor:
    """One simulated component: an identity, an ApiClient, background tasks, timeline lines."""

    actor_name = "actor"

    def __init__(
        self,
        kubeconfig: Path,
        timeline: Timeline,
        timings: Timings,
        version: McoVersion = McoVersion.V4_15,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.timeline = timeline
        self.timings = timings
        #: The MCO release whose behaviour this actor plays.
        self.version = version
        self._api: k8s.ApiClient | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def api(self) -> k8s.ApiClient:
        if self._api is None:
            raise RuntimeError(f"{self.actor_name} is not started")
        return self._api

    # The generated clients are typed with models; the actors speak raw JSON (dict bodies,
    # ``_content_type``, ``_preload_content=False``), so they are handled as ``Any``.
    @property
    def core(self) -> Any:
        return k8s.CoreV1Api(self.api)

    @property
    def apps(self) -> Any:
        return k8s.AppsV1Api(self.api)

    @property
    def custom(self) -> Any:
        return k8s.CustomObjectsApi(self.api)

    def log(self, node: str | None, message: str) -> TimelineEntry:
        return self.timeline.add(self.actor_name, node, message)

    async def start(self) -> None:
        self._api = await api_client(self.kubeconfig)
        await self.started()

    async def started(self) -> None:
        """Start the actor's informers and workers (overridden)."""

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "%s task %s failed", self.actor_name, task.get_name(), exc_info=task.exception()
            )

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def get_node(self, name: str) -> JsonObj:
        result: JsonObj = await read_json(await self.core.read_node(name, _preload_content=False))
        return result

    async def patch_node(self, name: str, body: JsonObj) -> JsonObj:
        """Strategic-merge patch without resourceVersion, as MCO's UpdateNodeRetry sends."""
        result: JsonObj = await read_json(
            await self.core.patch_node(
                name,
                body,
                _content_type="application/strategic-merge-patch+json",
                _preload_content=False,
            )
        )
        return result

    async def event(self, node: str, etype: str, reason: str, message: str, component: str) -> None:
        """Record a core/v1 Event on the Node, as client-go's event recorder does."""
        body = {
            "metadata": {"generateName": f"{node}.", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": component, "host": node},
            "count": 1,
        }
        try:
            await read_json(
                await self.core.create_namespaced_event("default", body, _preload_content=False)
            )
        except ApiException as exc:
            log.warning("event %s on %s not recorded: %s", reason, node, exc.status)
