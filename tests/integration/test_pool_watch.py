"""The agent watches its own MachineConfigPool, by name, and no other (issue 38 item 3): every
agent watching every pool would be sent each pool's every status write, and MCO writes a
pool's status several times for each node of a rollout. When the node's rendered config names
another pool, the watch moves there. Counted by what the simulator sent the agent's user."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import AGENT_USER, IMAGE_A, WAIT, StartAgent

POOLS = "machineconfigpools"
SERVED = f"{POOLS}.machineconfiguration.openshift.io"  # the simulator's key
#: The node's pool: CONFIG_A (``rendered-worker-…``) names it.
WORKER = "worker"
MASTER = "master"
CONFIG_MASTER = "rendered-master-" + "d" * 32


def pool(name: str, config: str) -> dict[str, Any]:
    return {
        "apiVersion": protocol.POOL_API_VERSION,
        "kind": protocol.POOL_KIND,
        "metadata": {"name": name},
        "spec": {"configuration": {"name": config}},
        "status": {"configuration": {"name": config}, "machineCount": 0},
    }


class Sent:
    """The pools the simulator sends the agent, by name, in lists and watch events."""

    def __init__(self, api: SimApiServer) -> None:
        self.names: list[str] = []
        self.changed = asyncio.Event()
        api.serve_hooks.append(self._served)

    def _served(self, user: str, resource: str, obj: Any) -> None:
        if (user, resource) == (AGENT_USER, SERVED):
            self.names.append(obj["metadata"]["name"])
            self.changed.set()

    async def until(self, count: int) -> list[str]:
        """The names once ``count`` were sent."""
        async with asyncio.timeout(WAIT):
            while len(self.names) < count:
                self.changed.clear()
                await self.changed.wait()
        return self.names


def count_status_write(api: SimApiServer, name: str) -> Callable[[int], None]:
    """A pool status write, as MCO's controller makes for each node it counts."""

    def write(count: int) -> None:
        body = {"status": {"machineCount": count}}
        api.patch(POOLS, name, body, patch_type="merge", subresource="status")

    return write


async def test_the_agent_is_sent_its_own_pool_alone_and_follows_the_node_to_another(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    api.create(POOLS, pool(WORKER, "rendered-worker-" + "a" * 32))
    api.create(POOLS, pool(MASTER, CONFIG_MASTER))
    sent = Sent(api)
    await start_agent()
    assert await sent.until(1) == [WORKER]  # its pool's list
    master, worker = count_status_write(api, MASTER), count_status_write(api, WORKER)
    for count in range(1, 6):
        master(count)  # another pool's rollout: five writes the agent is not sent
    worker(1)
    assert await sent.until(2) == [WORKER, WORKER]  # the worker's one write alone
    # The node moves to the master pool (its config named by MCO's render of that pool).
    moved = {"metadata": {"annotations": {protocol.DESIRED_CONFIG: CONFIG_MASTER}}}
    api.patch("nodes", "worker-0", moved)
    assert await sent.until(3) == [WORKER, WORKER, MASTER]  # the master pool's list
    for count in range(2, 7):
        worker(count)  # the pool it left: not sent any more
    master(6)
    assert await sent.until(4) == [WORKER, WORKER, MASTER, MASTER]


async def test_a_node_in_no_pool_watches_none(api: SimApiServer, start_agent: StartAgent) -> None:
    """A Node whose configs are not MCO's rendered names: no pool is read, and the guard says
    the node's pool is not known (noop-image holds, bounded by --max-hold)."""
    api.create(POOLS, pool(WORKER, "rendered-worker-" + "a" * 32))
    unnamed = {
        "metadata": {
            "annotations": {protocol.DESIRED_CONFIG: "custom", protocol.CURRENT_CONFIG: "custom"}
        }
    }
    api.patch("nodes", "worker-0", unnamed)
    sent = Sent(api)
    agent = await start_agent()
    drain = {protocol.DESIRED_DRAIN: "drain-custom", protocol.DESIRED_IMAGE: IMAGE_A}
    api.patch("nodes", "worker-0", {"metadata": {"annotations": drain}})
    record = await agent.wait_log(lambda r: r.get("outcome") == "hold")
    assert "the node's pool is not known" in str(record.get("why")), record
    assert sent.names == []
