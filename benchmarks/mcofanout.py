"""MCO's objects fanned out to every agent: what the API server sends the fleet's agents for
one status write of a MachineConfigPool, a MachineOSBuild or a MachineOSConfig.

Every agent reads its own pool, by name (``metadata.name``), and every MachineOSBuild and
MachineOSConfig (``drain_guard.node.mcowatch``). A status write of a pool is therefore sent to
the agents of that pool's nodes, and one of a build object to every agent; before the pool's
read was narrowed, every pool's every write was sent to every agent. MCO writes a pool's status
several times for each node it updates (its machine counts and conditions), so a pool's
rollout is the write that fans out most.

The cluster: ``--nodes`` Nodes, ``--masters`` of them in the master pool and the rest in the
worker pool, with pools, a MachineOSConfig and a MachineOSBuild shaped and sized as MCO writes
them (``--sources`` MachineConfigs named in a pool's configuration). Two real ``drain-guard run``
processes, one in each pool, show what one agent is sent (the simulator's count of the objects
and bytes it served each user); the other nodes' agents are the watches the agent opens, held
open by the simulator itself with the agent's selectors (as ``benchmarks.fleet`` holds its
phantom watches), and so are, for the comparison, the watches of every pool an agent held before
(``whole``). Each write's events are counted in the watches' queues; bytes are those events as
a watch stream sends them (one JSON line each).

``python -m benchmarks.mcofanout [--nodes 2000] [--masters 3] [--writes 10] [--sources 15]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import IMAGE_A, WAIT, seed_api, start_agent, stop_agent, write_result
from drain_guard_sim.apiserver.resources import RESOURCES, machine_os_resources
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.watchcache import Watcher
from drain_guard_sim.harness.agentproc import agent_user
from drain_guard_sim.harness.seedobjects import worker_node

POOLS = "machineconfigpools"
BUILDS = "machineosbuilds"
CONFIGS = "machineosconfigs"
GROUP = "machineconfiguration.openshift.io"
CONDITIONS = ("RenderDegraded", "NodeDegraded", "Degraded", "Updated", "Updating")


@dataclass(frozen=True)
class Params:
    nodes: int = 2000
    masters: int = 3
    writes: int = 10
    sources: int = 15


def rendered(pool: str) -> str:
    return f"rendered-{pool}-{'0' * 32}"


def pool_object(name: str, sources: int, machines: int) -> dict[str, Any]:
    """A pool as MCO keeps one: its rendered config and the MachineConfigs it came from, its
    selectors, its machine counts and conditions."""
    configuration = {
        "name": rendered(name),
        "source": [
            {"apiVersion": f"{GROUP}/v1", "kind": "MachineConfig", "name": f"{i:02d}-{name}-c{i}"}
            for i in range(sources)
        ],
    }
    selector = {"matchLabels": {f"{GROUP}/role": name}}
    role = {"matchLabels": {f"node-role.kubernetes.io/{name}": ""}}
    conditions = [
        {
            "type": kind,
            "status": "True" if kind == "Updated" else "False",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "reason": "",
            "message": f"All nodes are updated with {rendered(name)}" if kind == "Updated" else "",
        }
        for kind in CONDITIONS
    ]
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": name, "labels": {f"pools.operator.{GROUP}/{name}": ""}},
        "spec": {
            "configuration": configuration,
            "machineConfigSelector": selector,
            "nodeSelector": role,
            "paused": False,
        },
        "status": {
            "configuration": configuration,
            "machineCount": machines,
            "updatedMachineCount": machines,
            "readyMachineCount": machines,
            "unavailableMachineCount": 0,
            "degradedMachineCount": 0,
            "observedGeneration": 2,
            "conditions": conditions,
        },
    }


def build_objects(pool: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pool's MachineOSConfig and a MachineOSBuild of its config (``v1``)."""
    registry = "image-registry.openshift-image-registry.svc:5000/ocb"
    image = f"{registry}/os-image@sha256:{'a' * 64}"
    mosc = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "MachineOSConfig",
        "metadata": {"name": pool},
        "spec": {
            "machineConfigPool": {"name": pool},
            "imageBuilder": {"imageBuilderType": "Job"},
            "renderedImagePushSecret": {"name": "push-secret"},
            "renderedImagePushSpec": f"{registry}/os:latest",
            "containerFile": [
                {"containerfileArch": "NoArch", "content": "RUN dnf -y install tmux"}
            ],
        },
        "status": {"currentImagePullSpec": image, "observedGeneration": 1},
    }
    mosb = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "MachineOSBuild",
        "metadata": {
            "name": f"{pool}-{rendered(pool)}",
            "labels": {
                f"{GROUP}/target-machine-config-pool": pool,
                f"{GROUP}/rendered-machine-config": rendered(pool),
                f"{GROUP}/machine-os-config": pool,
            },
        },
        "spec": {
            "machineConfig": {"name": rendered(pool)},
            "machineOSConfig": {"name": pool},
            "renderedImagePushSpec": f"{registry}/os:latest",
        },
        "status": {
            "conditions": [
                {
                    "type": kind,
                    "status": "False",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "reason": "Prepared",
                    "message": "",
                }
                for kind in ("Prepared", "Building", "Failed", "Interrupted", "Succeeded")
            ],
            "buildStart": "2026-01-01T00:00:00Z",
        },
    }
    return mosc, mosb


def node_pools(params: Params) -> dict[str, str]:
    """Each node's pool, the masters first."""
    nodes = {f"master-{i}": "master" for i in range(params.masters)}
    nodes.update({f"worker-{i:04d}": "worker" for i in range(params.nodes - params.masters)})
    return nodes


def phantom_watches(
    api: SimApiServer, pools: dict[str, str], *, whole: bool
) -> dict[str, list[Watcher]]:
    """Per resource, the watches each agent holds (``whole``: of every pool, as before)."""
    rv = str(api.resource_version)
    out: dict[str, list[Watcher]] = {POOLS: [], BUILDS: [], CONFIGS: []}
    for node, pool in pools.items():
        user = ("whole:" if whole else "") + agent_user(node)
        selector = "" if whole else f"metadata.name={pool}"
        out[POOLS].append(
            api.store.watch(POOLS, resource_version=rv, user=user, field_selector=selector)
        )
        if not whole:
            for resource in (BUILDS, CONFIGS):
                out[resource].append(api.store.watch(resource, resource_version=rv, user=user))
    return out


def drained(watchers: Sequence[Watcher]) -> tuple[int, int]:
    """Events queued to ``watchers`` since the last call, and their bytes as streamed."""
    events = size = 0
    for watcher in watchers:
        while not watcher.queue.empty():
            item = watcher.queue.get_nowait()
            if item is None:
                continue
            kind, obj = item
            events += 1
            size += len(json.dumps({"type": kind, "object": obj}, separators=(",", ":"))) + 1
    return events, size


def status_write(api: SimApiServer, resource: str, name: str) -> Callable[[int], None]:
    def write(i: int) -> None:
        obj = api.get(resource, name)
        status = dict(obj["status"])
        if resource == POOLS:
            status["updatedMachineCount"] = i  # a rollout's count, one node at a time
        else:
            status["observedGeneration"] = i + 2
        api.patch(resource, name, {"status": status}, patch_type="merge", subresource="status")

    return write


async def measure(params: Params, workdir: Path) -> dict[str, Any]:
    pools = node_pools(params)
    resources = RESOURCES + machine_os_resources("v1")
    async with SimApiServer(resources=resources, history=10_000) as api:
        seed_api(api, [])
        for node, pool in pools.items():
            api.create("nodes", worker_node(node, rendered(pool), IMAGE_A))
        machines = {"master": params.masters, "worker": params.nodes - params.masters}
        for pool, count in machines.items():
            api.create(POOLS, pool_object(pool, params.sources, count))
        mosc, mosb = build_objects("worker")
        api.create(CONFIGS, mosc)
        api.create(BUILDS, mosb)
        sampled = ["master-0", f"worker-{0:04d}"]
        agents = [await start_agent(api, node, workdir) for node in sampled]
        try:
            for agent in agents:
                await agent.wait_synced(WAIT)
            # Each has listed its pool (its watch starts once the agent has seen its Node).
            await api.wait_for(lambda: all(_served(api, n, POOLS)[0] for n in sampled), WAIT)
            fleet = phantom_watches(api, {n: p for n, p in pools.items() if n not in sampled},
                                    whole=False)  # fmt: skip
            before = phantom_watches(api, pools, whole=True)
            writes = {
                "worker pool": (POOLS, "worker"),
                "master pool": (POOLS, "master"),
                "MachineOSBuild": (BUILDS, mosb["metadata"]["name"]),
                "MachineOSConfig": (CONFIGS, mosc["metadata"]["name"]),
            }
            rows = {}
            for what, (resource, name) in writes.items():
                served = {n: _served(api, n, resource) for n in sampled}
                write = status_write(api, resource, name)
                for i in range(params.writes):
                    write(i)
                await asyncio.sleep(0.5)  # the real agents' streams deliver
                events, size = drained(fleet[resource])
                whole_events, whole_size = drained(before[POOLS]) if resource == POOLS else (0, 0)
                sent = {n: _minus(_served(api, n, resource), served[n]) for n in sampled}
                for objects, sent_bytes in sent.values():
                    events += objects
                    size += sent_bytes
                if resource != POOLS:  # read whole before as now
                    whole_events, whole_size = events, size
                n = params.writes
                rows[what] = {
                    "events_per_write": events / n,
                    "bytes_per_write": size / n,
                    "before_events_per_write": whole_events / n,
                    "before_bytes_per_write": whole_size / n,
                    "sampled_agents": {
                        node: {"objects": s[0] / n, "bytes": s[1] / n} for node, s in sent.items()
                    },
                }
                print(what, json.dumps(rows[what]), flush=True)
        finally:
            for agent in agents:
                await stop_agent(agent)
    return {"params": asdict(params), "writes": rows}


def _served(api: SimApiServer, node: str, resource: str) -> tuple[int, int]:
    key = (agent_user(node), f"{resource}.{GROUP}")
    return api.served[key], api.served_bytes[key]


def _minus(after: tuple[int, int], before: tuple[int, int]) -> tuple[int, int]:
    return after[0] - before[0], after[1] - before[1]


def parse_args(argv: Sequence[str] | None) -> tuple[Params, Path | None]:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.mcofanout", description=__doc__
    )
    d = Params()
    p.add_argument("--nodes", type=int, default=d.nodes)
    p.add_argument("--masters", type=int, default=d.masters)
    p.add_argument("--writes", type=int, default=d.writes)
    p.add_argument("--sources", type=int, default=d.sources)
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    return Params(a.nodes, a.masters, a.writes, a.sources), a.out


def main(argv: Sequence[str] | None = None) -> int:
    params, out = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-mcofanout-") as tmp:
        result = asyncio.run(measure(params, Path(tmp)))
    print(f"wrote {write_result('mcofanout', result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
