"""The machine-config-daemon of one node, as in MCO 4.15 to 4.18 (layered / on-cluster-build path).

Modelled on pkg/daemon/daemon.go (``syncNode``, ``checkStateOnFirstRun``,
``prepUpdateFromCluster``, ``triggerUpdate``, ``completeUpdate``, ``handleErr``),
pkg/daemon/update.go (``updateOnClusterBuild``) and pkg/daemon/drain.go (``performDrain``):

- every Node event is queued rate-limited (1 s after a success, 1 s·2ⁿ up to 60 s after n
  errors); an update runs the preflight config drift check first (0.5-2 s), so the drain
  request lands 1.5-3 s after the node controller's write;
- an update's target (config *and image*) is taken from the Node when the sync starts; the
  daemon then blocks in ``performDrain``, so a ``desiredImage`` that changes meanwhile is only
  seen after the reboot: MCO 4.15 finishes the stale same-image update, then starts the real one
  (whose drain is skipped: ``lastAppliedDrain`` already says ``drain-<config>``); every
  version to 4.19 (``updateOnClusterLayering``) drains and reboots for an equal image too:
  only the node controller (4.18's ``MachineOSBuildIsCurrent``) keeps such a target away;
- an update starts when config or image differ, or when they are equal but the state is not
  Done (``prepUpdateFromCluster``);
- ``performDrain`` writes ``desiredDrain=drain-<desiredConfig>`` by strategic merge patch
  computed from its informer cache (no resourceVersion), unless ``lastAppliedDrain`` already
  equals it, then polls every 10 s for up to 1 h until ``desiredDrain == lastAppliedDrain``
  (the two annotations only); on timeout: Event ``FailedToDrain``, state Degraded, and a
  rate-limited retry: a later sync keeps waiting ("A previously requested drain has not yet
  completed"), but a failed *first* run (``booting`` is cleared only after success) runs
  ``checkStateOnFirstRun`` again and re-writes ``drain-<config>`` over whatever is there;
- the layered update always reboots; 4.15 does not apply kernel arguments on that path (4.16
  does), so the boot-time validation then fails ("missing expected kernel arguments"); after
  the reboot (a new daemon process) the node is validated against the on-disk config and,
  when in its desired state, ``uncordon-<config>`` is requested and the state set to Done.

``nodemachine.NodeMachine`` plays the machine around the daemon: a reboot switches the host
tree to the new deployment, runs the ``on_reboot`` hooks (a real reboot restarts the node's
DaemonSet pods, the agent among them) during its downtime, and starts a fresh daemon after
both. A daemon pod deleted
gracefully while it updates ignores SIGTERM and goes only when its 600 s grace period ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.mco import (
    CONTROL_PLANE_TOPOLOGY,
    CURRENT_CONFIG,
    CURRENT_IMAGE,
    DESIRED_CONFIG,
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    GROUP_MCO,
    LAST_APPLIED_DRAIN,
    REASON,
    STATE,
    STATE_DEGRADED,
    STATE_DONE,
    STATE_WORKING,
    Actor,
    JsonObj,
    McoVersion,
    Timings,
    annotation_patch,
    annotations_of,
    read_json,
)
from drain_guard_sim.actors.timeline import Timeline

__all__ = ["MachineConfigDaemon", "UpdateRecord"]


class UpdateError(Exception):
    """An update step failed; the daemon marks the node Degraded (MCO's updateErrorState)."""


@dataclass
class UpdateRecord:
    """One update the daemon started: its target as computed at the start, and how it went."""

    node: str
    started: float
    from_image: str
    to_image: str
    drain_value: str
    drain_requested: bool = False
    drain_skipped: bool = False
    rebased: bool = False

    @property
    def same_image(self) -> bool:
        """A layered update to the image the node runs (a non-layered one has no image)."""
        return bool(self.to_image) and self.from_image == self.to_image


@dataclass
class Reboot:
    image: str
    rationale: str


class MachineConfigDaemon(Actor):
    """One run of the daemon pod on ``node``; it ends by asking for a reboot."""

    actor_name = "machine-config-daemon"

    def __init__(
        self,
        kubeconfig: Path,
        timeline: Timeline,
        timings: Timings,
        node: str,
        host: HostFS,
        updates: list[UpdateRecord],
        version: McoVersion = McoVersion.V4_15,
    ) -> None:
        super().__init__(kubeconfig, timeline, timings, version)
        self.node_name = node
        self.host = host
        self.updates = updates
        #: In an update (from its start to the reboot): SIGTERM is ignored meanwhile.
        self.updating = False
        self.informer: Informer | None = None
        self.reboot_requested: asyncio.Future[Reboot] | None = None
        self._changed = asyncio.Event()
        self.first_sync_done = asyncio.Event()
        self._last_message: str | None = None

    async def started(self) -> None:
        self.reboot_requested = asyncio.get_running_loop().create_future()
        self.informer = Informer(
            self.core.list_node,
            self._on_node,
            {"field_selector": f"metadata.name={self.node_name}"},
        )
        self.spawn(self.informer.run(), f"mcd-{self.node_name}-informer")
        self.spawn(self._loop(), f"mcd-{self.node_name}")

    def _on_node(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        self._changed.set()

    def say(self, message: str) -> None:
        self.log(self.node_name, message)

    @property
    def cached(self) -> dict[str, str]:
        assert self.informer is not None
        node = self.informer.cache.get(self.node_name)
        return annotations_of(node) if node else {}

    async def _loop(self) -> None:
        assert self.informer is not None
        assert self.reboot_requested is not None
        await self.informer.synced.wait()
        booting = True
        failures = 0
        t = self.timings
        while True:
            # AddRateLimited: the per-item limiter's delay, reset (Forget) after a success.
            await asyncio.sleep(t.s(min(t.mcd_sync_delay * 2**failures, t.mcd_max_backoff)))
            self._changed.clear()
            try:
                if booting:
                    await self._check_state_on_first_run()
                    booting = False  # only after success: a failed first run runs again
                else:
                    await self._sync_node()
                failures = 0
            except _RebootNow as reboot:
                self.reboot_requested.set_result(reboot.reboot)
                return
            except (UpdateError, ApiException) as exc:
                await self._set_degraded(str(exc))
                failures += 1
                self.first_sync_done.set()
                continue  # handleErr: requeued rate-limited, no Node event needed
            self.first_sync_done.set()
            await self._changed.wait()

    # -- daemon.go -------------------------------------------------------------------------

    async def _check_state_on_first_run(self) -> None:
        ann = self.cached
        current_config = ann.get(CURRENT_CONFIG, "")
        current_image = ann.get(CURRENT_IMAGE, "")
        on_disk = self.host.read_mcd_current_config()
        if on_disk is not None:
            if on_disk[0] != current_config:
                self.say(
                    f'Disk currentConfig "{on_disk[0]}" overrides node\'s currentConfig '
                    f'annotation "{current_config}"'
                )
            if on_disk[1] != current_image:
                self.say(
                    f'Disk currentImage "{on_disk[1]}" overrides node\'s currentImage '
                    f'annotation "{current_image}"'
                )
            current_config, current_image = on_disk
        booted = self.host.booted_image
        if current_image and booted != current_image:
            await self.node_event(
                "Warning",
                "OnDiskStateValidationFailed",
                f"expected target osImageURL {current_image!r}, have {booted!r}",
            )
            raise UpdateError(
                f"unexpected on-disk state: booted {booted}, expected {current_image}"
            )
        await self._validate_kernel_arguments(current_config, current_image)
        self.say("Validated on-disk state")
        desired_config = ann.get(DESIRED_CONFIG, "")
        desired_image = ann.get(DESIRED_IMAGE, "")
        if current_config == desired_config and current_image == desired_image:
            await self._complete_update(current_config)
            await self._set(
                {
                    STATE: STATE_DONE,
                    CURRENT_CONFIG: current_config,
                    CURRENT_IMAGE: current_image,
                    REASON: "",
                }
            )
            self.say(f"In desired state MachineConfig: {current_config} / Image: {current_image}")
            return
        await self.node_event(
            "Normal",
            "BootResync",
            f"Booting node {self.node_name}, currentConfig {current_config}, "
            f"desiredConfig {desired_config}",
        )
        await self._trigger_update(current_config, desired_config, current_image, desired_image)

    async def _sync_node(self) -> None:
        ann = self.cached
        desired_drain = ann.get(DESIRED_DRAIN, "")
        if desired_drain and desired_drain != ann.get(LAST_APPLIED_DRAIN, ""):
            self._say_once(
                "A previously requested drain has not yet completed. Waiting for "
                "machine-config-controller to finish draining node."
            )
            return
        current_config = ann.get(CURRENT_CONFIG, "")
        current_image = ann.get(CURRENT_IMAGE, "")
        on_disk = self.host.read_mcd_current_config()
        if on_disk is not None:
            current_config, current_image = on_disk
        desired_config = ann.get(DESIRED_CONFIG, "")
        desired_image = ann.get(DESIRED_IMAGE, "")
        if desired_config == current_config and desired_image == current_image:
            state = ann.get(STATE, "")
            if state == STATE_DONE:
                return
            self._say_once(
                f"current+desiredConfig is {current_config}, current+desiredImage is "
                f"{current_image} but state is {state}"
            )
        took = random.uniform(*self.timings.mcd_drift_check)
        await asyncio.sleep(self.timings.s(took))
        self.say(f"Preflight config drift check successful (took {took:.3f}s)")
        await self._trigger_update(current_config, desired_config, current_image, desired_image)

    async def _validate_kernel_arguments(self, config: str, image: str) -> None:
        """validateKernelArguments: the config's kernel arguments must be on the booted cmdline."""
        expected = await self._kernel_arguments(config)
        booted = self.host.kernel_args.split()
        missing = [k for k in expected if k not in booted]
        if missing:
            raise UpdateError(
                f"unexpected on-disk state validating against {image or config}: "
                f"missing expected kernel arguments: [{' '.join(missing)}]"
            )

    async def _kernel_arguments(self, config: str) -> list[str]:
        if not config:
            return []
        try:
            mc = await read_json(
                await self.custom.get_cluster_custom_object(
                    GROUP_MCO, "v1", "machineconfigs", config, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return [str(k) for k in (mc.get("spec") or {}).get("kernelArguments") or []]

    async def _trigger_update(
        self, old_config: str, new_config: str, old_image: str, new_image: str
    ) -> None:
        if not new_image:
            if old_image:
                raise UpdateError(
                    "rolling back from a layered to non-layered configuration is not currently "
                    "supported"
                )
            await self._update_non_layered(old_config, new_config)
            return
        started = self.log(self.node_name, "Performing layered OS update").t
        await self._update_on_cluster_build(started, old_config, new_config, old_image, new_image)

    # -- update.go -------------------------------------------------------------------------

    async def _update_on_cluster_build(
        self, started: float, old_config: str, new_config: str, old_image: str, new_image: str
    ) -> None:
        self.updating = True
        if self.cached.get(STATE) not in (STATE_DEGRADED, "Unreconcilable"):
            await self._set({STATE: STATE_WORKING})
        record = UpdateRecord(
            node=self.node_name,
            started=started,
            from_image=old_image,
            to_image=new_image,
            drain_value=f"drain-{self.cached.get(DESIRED_CONFIG, '')}",
        )
        self.updates.append(record)
        if old_image == new_image:
            self.say(f'Starting transition from "{old_image}" to "{new_image}"')
        await self._perform_drain(record)
        if old_image != new_image:
            self.say(f'Updating OS to layered image "{new_image}"')
            record.rebased = True
        else:
            self.say("Image pullspecs equal, skipping rpm-ostree rebase")
        if self.version is not McoVersion.V4_15:
            # 4.16+ applies the config's kernel arguments on the layered path; 4.15 does not.
            wanted = await self._kernel_arguments(new_config)
            have = self.host.kernel_args.split()
            self.host.kernel_args = " ".join(have + [k for k in wanted if k not in have])
        self.host.write_mcd_current_config(new_config, new_image)
        rationale = f"Node will reboot into image {new_image} / MachineConfig {new_config}"
        self.log(self.node_name, f"initiating reboot: {rationale}")
        raise _RebootNow(Reboot(new_image if record.rebased else self.host.booted.image, rationale))

    async def _update_non_layered(self, old_config: str, new_config: str) -> None:
        """update(): a pool without layering (the control-plane pool): drain, write the new
        config's files, reboot into the same OS image (this model's configs change files only;
        MCO reboots for them)."""
        started = self.log(self.node_name, f"Updating from {old_config} to {new_config}").t
        self.updating = True
        if self.cached.get(STATE) not in (STATE_DEGRADED, "Unreconcilable"):
            await self._set({STATE: STATE_WORKING})
        record = UpdateRecord(
            node=self.node_name,
            started=started,
            from_image="",
            to_image="",
            drain_value=f"drain-{self.cached.get(DESIRED_CONFIG, '')}",
        )
        self.updates.append(record)
        await self._perform_drain(record)
        self.host.write_mcd_current_config(new_config, "")
        rationale = f"Node will reboot into config {new_config}"
        self.log(self.node_name, f"initiating reboot: {rationale}")
        raise _RebootNow(Reboot(self.host.booted.image, rationale))

    # -- drain.go --------------------------------------------------------------------------

    async def _perform_drain(self, record: UpdateRecord) -> None:
        ann = self.cached
        if ann.get(CONTROL_PLANE_TOPOLOGY) == "SingleReplica":
            self.say("Drain not required, skipping")
            record.drain_skipped = True
            return
        value = record.drain_value
        if ann.get(LAST_APPLIED_DRAIN) == value:
            self.say("drain is already completed on this node")
            record.drain_skipped = True
            return
        self.say("Update prepared; requesting cordon and drain via annotation to controller")
        await self.node_event("Normal", "Cordon", "Cordoned node to apply update")
        await self.node_event("Normal", "Drain", "Draining node to update config.")
        await self._set({DESIRED_DRAIN: value})
        record.drain_requested = True
        started = time.monotonic()
        if not await self._poll_drainer(self.timings.mcd_drain_timeout):
            msg = (
                f"failed to drain node: {self.node_name} after 1 hour. Please see "
                "machine-config-controller logs for more information"
            )
            await self.node_event("Warning", "FailedToDrain", msg)
            raise UpdateError(msg)
        self.log(self.node_name, "drain complete")
        took = (time.monotonic() - started) / self.timings.time_factor
        self.say(f"Successful drain took {took:.1f} seconds")

    async def _complete_update(self, config: str) -> None:
        await self._set({DESIRED_DRAIN: f"uncordon-{config}"})
        if not await self._poll_drainer(self.timings.mcd_uncordon_timeout):
            msg = (
                f"failed to uncordon node: {self.node_name} after 10 minutes. Please see "
                "machine-config-controller logs for more information"
            )
            await self.node_event("Warning", "FailedToUncordon", msg)
            raise UpdateError(msg)
        self.say(f"Update completed for config {config} and node has been successfully uncordoned")

    async def _poll_drainer(self, limit: float) -> bool:
        """wait.PollUntilContextTimeout(10 s, timeout, immediate=false) on the two annotations."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timings.s(limit)
        interval = self.timings.s(self.timings.mcd_poll)
        while loop.time() + interval <= deadline:
            await asyncio.sleep(interval)
            try:
                ann = annotations_of(await self.get_node(self.node_name))
            except ApiException:
                continue
            if ann.get(DESIRED_DRAIN) == ann.get(LAST_APPLIED_DRAIN):
                return True
        return False

    # -- writer.go -------------------------------------------------------------------------

    async def _set(self, values: dict[str, str | None]) -> None:
        """The node writer: a patch computed against the informer cache, no resourceVersion."""
        patch = annotation_patch(self.cached, values)
        if patch is not None:
            await self.patch_node(self.node_name, patch)

    async def _set_degraded(self, reason: str) -> None:
        self.say(f"Marking Degraded due to: {reason}")
        with contextlib.suppress(ApiException):
            await self._set({STATE: STATE_DEGRADED, REASON: reason[:1024]})

    async def node_event(self, etype: str, reason: str, message: str) -> None:
        await self.event(self.node_name, etype, reason, message, "machineconfigdaemon")

    def _say_once(self, message: str) -> None:
        if self._last_message != message:
            self.say(message)
        self._last_message = message


class _RebootNow(Exception):  # noqa: N818 - a control-flow signal, not an error
    def __init__(self, reboot: Reboot) -> None:
        super().__init__(reboot.rationale)
        self.reboot = reboot
