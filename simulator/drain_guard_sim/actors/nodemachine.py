"""The machine around a simulated node's daemon: its host tree, and a reboot that switches the
tree to the new deployment, restarts the node's other pods (the reboot hooks) during its
downtime and starts the daemon again (as the DaemonSet pod restarts)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.mcd import MachineConfigDaemon, Reboot, UpdateRecord
from drain_guard_sim.actors.mco import McoVersion, Timings
from drain_guard_sim.actors.timeline import Timeline

RebootHook = Callable[[str], Awaitable[None]]


@dataclass
class NodeMachine:
    """A simulated machine: its host tree and its daemon, restarted by reboots."""

    name: str
    host: HostFS
    kubeconfig: Path
    timeline: Timeline
    timings: Timings
    version: McoVersion = McoVersion.V4_15
    on_reboot: list[RebootHook] = field(default_factory=list)
    updates: list[UpdateRecord] = field(default_factory=list)
    reboots: int = 0
    daemon: MachineConfigDaemon | None = None
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _restart: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _daemon_created: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"machine-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def wait_daemon_synced(self) -> None:
        """Until the current daemon has finished its first sync (startup writes done)."""
        await self._daemon_created.wait()
        assert self.daemon is not None
        await self.daemon.first_sync_done.wait()

    def restart_daemon(self, *, graceful: bool = False) -> None:
        """Delete the daemon pod; a new one re-runs checkStateOnFirstRun.

        Not graceful: a SIGKILL (force delete, OOM), at once. Graceful: SIGTERM, which the
        MCD ignores while it updates, so the pod goes when its grace period (600 s) ends.
        """
        daemon = self.daemon
        if graceful and daemon is not None and daemon.updating:
            grace = self.timings.mcd_termination_grace
            self.timeline.add(
                "machine-config-daemon",
                self.name,
                f"SIGTERM ignored mid-update: killed in {grace:g}s",
            )
            asyncio.get_running_loop().call_later(self.timings.s(grace), self._restart.set)
            return
        self._restart.set()

    async def _run(self) -> None:
        while True:
            self._restart.clear()
            daemon = MachineConfigDaemon(
                self.kubeconfig,
                self.timeline,
                self.timings,
                self.name,
                self.host,
                self.updates,
                self.version,
            )
            self.daemon = daemon
            self._daemon_created.set()
            try:
                await daemon.start()
                assert daemon.reboot_requested is not None
                restart: asyncio.Future[object] = asyncio.ensure_future(self._restart.wait())
                reboot: asyncio.Future[object] = daemon.reboot_requested  # type: ignore[assignment]
                try:
                    done, _ = await asyncio.wait(
                        {reboot, restart}, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    # Also when this node is stopped mid-wait: a waiter left pending is
                    # destroyed with it ("Task was destroyed but it is pending!").
                    restart.cancel()
            finally:
                await daemon.stop()
                self.daemon = None
                self._daemon_created.clear()
            if daemon.reboot_requested in done:
                await self._reboot(daemon.reboot_requested.result())
            else:
                self.timeline.add("machine-config-daemon", self.name, "daemon pod restarted")

    async def _reboot(self, reboot: Reboot) -> None:
        """The node is down for the reboot's duration, then comes up in the new deployment.

        Its other pods go down and start again with it: the ``on_reboot`` hooks (the node's
        agent, stopped and started again) run from the start of the downtime, on the new
        deployment, and the daemon starts once both the downtime and the hooks are over. On a
        real node the agent's pod and the daemon's start together after the boot, each ready
        within seconds; an agent process's start here is about a second of real time, a
        hundred MCO seconds at a time factor of 0.01, so it is overlapped with the downtime
        rather than added after it (or left to race a daemon a hundred times quicker).
        """
        self.host.reboot_into(reboot.image)
        hooks = asyncio.ensure_future(self._run_hooks())
        try:
            await asyncio.sleep(self.timings.s(self.timings.reboot))
        except asyncio.CancelledError:
            hooks.cancel()
            raise
        self.reboots += 1
        self.timeline.add("node", self.name, f"rebooted into {reboot.image}")
        await hooks

    async def _run_hooks(self) -> None:
        for hook in self.on_reboot:
            await hook(self.name)
