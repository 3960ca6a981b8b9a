"""The administrator of the seed's cluster on a real API server: it creates the seed's objects
and reads what happened from watches (each cordon, each Build's start and end)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from drain_guard_sim.actors.informer import Informer
from drain_guard_sim.actors.machineos import api_version
from drain_guard_sim.actors.mco import (
    GROUP_MCO,
    MCO_NAMESPACE,
    TARGET_POOL_LABEL,
    Actor,
    JsonObj,
    McoVersion,
    Timings,
    annotations_of,
)
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.harness.seedobjects import cluster_label, machine_os_build_result


class Observer(Actor):
    """The administrator: creates the seed's objects, then watches the pool's Nodes (each
    cordon, with the node's annotations then) and Builds (created, ended)."""

    actor_name = "observer"

    def __init__(
        self, kubeconfig: Path, timeline: Timeline, timings: Timings, pool: str, version: McoVersion
    ) -> None:
        super().__init__(kubeconfig, timeline, timings, version)
        self.pool = pool
        self.nodes: Informer | None = None
        self.pools: Informer | None = None
        self.os_configs: Informer | None = None
        self.cordons: list[tuple[float, str, dict[str, str]]] = []
        self.builds: list[tuple[str, float, JsonObj | None, float]] = []  # name, t0, end, t1
        self.changed = asyncio.Event()

    async def watch(self) -> None:
        c = self.custom
        self.nodes = Informer(
            self.core.list_node, self._on_node, {"label_selector": cluster_label(self.pool)}
        )
        self.pools = Informer(
            c.list_cluster_custom_object,
            self._on_any,
            {"group": GROUP_MCO, "version": "v1", "plural": "machineconfigpools",
             "field_selector": f"metadata.name={self.pool}"},
        )  # fmt: skip
        informers = [(self.nodes, "nodes"), (self.pools, "pools")]
        if self.version.gates_on_build:
            kind = {"group": GROUP_MCO, "version": api_version(self.version)}
            self.os_configs = Informer(
                c.list_cluster_custom_object,
                self._on_any,
                {
                    **kind,
                    "plural": "machineosconfigs",
                    "field_selector": f"metadata.name={self.pool}",
                },
            )
            builds = Informer(
                c.list_cluster_custom_object, self._on_build, {**kind, "plural": "machineosbuilds"}
            )
            informers += [(self.os_configs, "moscs"), (builds, "mosbs")]
        else:
            builds = Informer(
                c.list_namespaced_custom_object,
                self._on_build,
                {"group": "build.openshift.io", "version": "v1", "namespace": MCO_NAMESPACE,
                 "plural": "builds", "label_selector": f"{TARGET_POOL_LABEL}={self.pool}"},
            )  # fmt: skip
            informers.append((builds, "builds"))
        for inf, name in informers:
            self.spawn(inf.run(), f"observer-{name}")
            await inf.synced.wait()

    def _now(self) -> float:
        return self.timeline.since_start(time.monotonic())

    def _on_any(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        self.changed.set()

    def _on_node(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        was = bool(((old or {}).get("spec") or {}).get("unschedulable"))
        if bool((obj.get("spec") or {}).get("unschedulable")) and not was:
            self.cordons.append((self._now(), obj["metadata"]["name"], annotations_of(obj)))
        self.changed.set()

    def _on_build(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        name = obj["metadata"]["name"]
        if self.version.gates_on_build:
            if (obj.get("spec") or {}).get("machineOSConfig", {}).get("name") != self.pool:
                return  # another cluster's (MachineOSConfigs are named after their pools)
            ended = machine_os_build_result(self.version, obj) is not None
        else:
            phase = (obj.get("status") or {}).get("phase")
            ended = phase in ("Complete", "Failed", "Error", "Cancelled")
        if etype == "ADDED" and not any(b[0] == name and b[2] is None for b in self.builds):
            self.builds.append((name, self._now(), None, 0.0))
        if ended:
            for i, (bname, t0, end, _) in enumerate(self.builds):
                if bname == name and end is None:
                    self.builds[i] = (bname, t0, obj, self._now())
        self.changed.set()
