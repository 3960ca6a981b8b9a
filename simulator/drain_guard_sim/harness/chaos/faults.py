"""What a chaos run does to the cluster: each scheduled action (rollouts, API faults, watches
cut, agents killed, MCD restarts, operators' releases, failed builds, corrupted hosts, refused
and hung Node writes, edge-of-calendar hold requests), and the windows it impaired an agent."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from drain_guard_sim.actors.mco import ADMIN_USER, DESIRED_DRAIN, MCO_NAMESPACE, annotations_of
from drain_guard_sim.apiserver.writelog import WriteRecord
from drain_guard_sim.harness.agentproc import agent_user
from drain_guard_sim.harness.chaos.agents import AgentFleet, Note, Spawn
from drain_guard_sim.harness.chaos.schedule import Action
from drain_guard_sim.harness.checker import HOLD_REQUEST
from drain_guard_sim.harness.cluster import SimCluster
from drain_guard_sim.harness.intervals import Interval

#: After a fault that hit an agent, how long it may take to be current again: a watch's
#: backoff after a few failed attempts (``drain_guard.kube.retry.Backoff``: 0.5 s doubling,
#: jittered).
RECOVERY = 4.0


class FaultPlayer:
    """Plays a schedule's actions; counts them (``faults``) and the requests their rules hit
    (``fired``), and keeps per node the windows in which its agent was impaired."""

    def __init__(
        self, cluster: SimCluster, fleet: AgentFleet, faults: Counter[str], note: Note, spawn: Spawn
    ) -> None:
        self.cluster = cluster
        self.fleet = fleet
        self.faults = faults
        self.note = note
        self.spawn = spawn
        self.max_hold = fleet.config.max_hold
        self.fired: Counter[str] = Counter()
        self.impaired: dict[str, list[Interval]] = {}
        self.rollouts = 0
        #: The agents' writes to their own Node that a refusal burst refused: each a decision
        #: (hold, release, clean-up) the agent made, which the write log does not show.
        self.refused_decisions = 0
        #: When the scheduled actions are over (monotonic): a burst not armed by then is not.
        self.schedule_end = 0.0

    @property
    def nodes(self) -> list[str]:
        return self.cluster.node_names

    def impair(self, nodes: Sequence[str], start: float, end: float) -> None:
        for node in nodes:
            self.impaired.setdefault(node, []).append((start, end + RECOVERY))

    async def rollout(self) -> str:
        """A new MachineConfig (a build, then every node's update); the rendered config."""
        self.rollouts += 1
        return await self.cluster.create_machine_config(f"99-chaos-{self.rollouts}")

    def _users(self, action: Action) -> tuple[list[str | None], list[str]]:
        """(fault users, impaired nodes) for a target of ``agent``, ``agents``, ``everyone``."""
        target = action.param("target", "agent")
        assert action.node is not None
        if target == "agent":
            return [agent_user(action.node)], [action.node]
        if target == "agents":
            return [agent_user(n) for n in self.nodes], list(self.nodes)
        return [None], list(self.nodes)

    async def act(self, action: Action) -> None:
        api = self.cluster.api
        node = action.node
        now = time.monotonic()
        self.faults[action.kind] += 1
        if action.kind == "rollout":
            config = await self.rollout()
            self.note(None, f"rollout {self.rollouts}: MachineConfig renders {config}")
        elif action.kind in ("latency", "error"):
            users, hit = self._users(action)
            seconds = float(action.param("seconds"))
            rules = []
            for user in users:
                if action.kind == "latency":
                    rules.append(
                        api.faults.latency(
                            float(action.param("delay")),
                            user=user,
                            probability=float(action.param("probability")),
                        )
                    )
                else:
                    status = int(action.param("status"))
                    rules.append(
                        api.faults.error(
                            status,
                            retry_after=1 if status == 429 else None,
                            user=user,
                            verb=action.param("verb"),
                            probability=float(action.param("probability")),
                        )
                    )
            self.impair(hit, now, now + seconds)
            self.note(node, f"fault on: {action}")
            self.spawn(self._lift(rules, seconds, action))
        elif action.kind in ("cut-watches", "expire-watches"):
            users, hit = self._users(action)
            for user in users:
                if action.kind == "expire-watches":
                    api.faults.expire_watches(times=2, user=user)
                api.cut_watches(abort=bool(action.param("abort")), user=user)
            self.impair(hit, now, now)
            self.note(node, f"{action.kind} ({action.param('target')})")
        elif action.kind == "kill-agent":
            assert node is not None
            self.spawn(self.fleet.restart(node, float(action.param("down"))))
        elif action.kind == "restart-mcd":
            assert node is not None
            self.cluster.restart_mcd(node)
            self.note(node, "MCD restarted")
        elif action.kind == "release":
            assert node is not None
            self.spawn(self._release(node))
        elif action.kind == "fail-build":
            self._fail_build()
        elif action.kind == "corrupt-host":
            assert node is not None
            await self._corrupt(node, str(action.param("how")))
        elif action.kind == "refuse-writes":
            self.spawn(self._refuse_from_next_request(action))
        elif action.kind == "hang-write":
            # Only the node's agent's Node writes, as a webhook's outage. Given up by the
            # agent after its 8 s write timeout (drain_guard.kube.client.NODE_WRITE_TIMEOUT:
            # the simulator does not import the agent), and retried.
            assert node is not None
            rule = api.faults.latency(
                30.0, user=agent_user(node), verb="patch", resource="nodes", times=1
            )
            hung_for = 9.0
            self.impair([node], now, now + hung_for)
            self.note(node, f"fault on: {action}")
            self.spawn(self._lift([rule], hung_for, action))
        elif action.kind == "edge-date":
            assert node is not None
            value = str(action.param("value"))
            api.patch(
                "nodes",
                node,
                {"metadata": {"annotations": {HOLD_REQUEST: value}}},
                patch_type="merge",
                user=ADMIN_USER,
            )
            self.note(node, f"operator: hold-request={value!r}")

    async def _refuse_from_next_request(self, action: Action) -> None:
        """Refuse the node's agent's Node writes from the node's next drain request on: its
        next write meets the burst (its hold of the request, a release, a clean-up; armed at
        a random time for 5 s, a burst mostly met no write), which lasts until it is spent or
        max-hold and a bit have passed. The node counts as impaired only from its first
        refused write to its last (and the recovery after): with no competing write to wake
        it, the agent must keep its retry and max-hold timers, and the checker holds it to
        the build pod and to max-hold."""
        node = action.node
        assert node is not None
        api = self.cluster.api
        agent = agent_user(node)
        seen = len(api.write_log)

        def drain_requested() -> bool:
            nonlocal seen
            log = api.write_log
            found = any(_requests_drain(w, node, agent) for w in log[seen:])
            seen = len(log)
            return found

        try:  # until the schedule ends
            await api.wait_for(drain_requested, max(0.0, self.schedule_end - time.monotonic()))
        except TimeoutError:
            self.note(node, f"no drain request met: {action}")
            return
        status = int(action.param("status"))
        rule = api.faults.error(
            status,
            message="refused by chaos (an admission webhook)",
            user=agent,
            verb="patch",
            resource="nodes",
            times=int(action.param("times")),
        )
        armed = time.monotonic()
        self.note(node, f"fault on at the drain request: {action}")
        # Armed until the agent's next Node write meets it (or the schedule ends; re-checked
        # on every write of the cluster's), then until it is spent or max-hold has passed.
        with contextlib.suppress(TimeoutError):
            await api.wait_for(lambda: rule.fired, max(0.0, self.schedule_end - armed))
        await self._lift([rule], self.max_hold + 2.0 if rule.fired else 0.0, action)
        refused = [
            (started, path)
            for started, user, verb, resource, path, answer in api.request_log
            if started >= armed
            and (user, verb, resource, answer) == (agent, "patch", "nodes", status)
        ]
        # Not its self-check's dry-run write to another Node (an agent restarted in the burst).
        self.refused_decisions += sum(path == f"/api/v1/nodes/{node}" for _, path in refused)
        if refused:
            self.impair([node], min(refused)[0], max(refused)[0])

    async def _lift(self, rules: list[Any], seconds: float, action: Action) -> None:
        await asyncio.sleep(seconds)
        for rule in rules:
            self.cluster.api.faults.remove(rule)
        fired = sum(rule.fired for rule in rules)
        self.fired[action.kind] += fired
        self.note(action.node, f"fault off: {action.kind} (fired {fired} times)")

    async def _release(self, node: str) -> None:
        """``drain-guard release`` as an operator would type it."""
        held = annotations_of(self.cluster.api.get("nodes", node)).get(DESIRED_DRAIN, "")
        if not held.startswith("hold-"):
            self.note(node, "operator: nothing held, no release")
            return
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "drain_guard",
            "release",
            "--node-name",
            node,
            "--kubeconfig",
            str(self.cluster.admin_kubeconfig),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        text = (out or err).decode(errors="replace").strip().splitlines()
        self.note(node, f"operator: drain-guard release → {proc.returncode} {text[:1]}")

    def _fail_build(self) -> None:
        """A build that fails: its pod goes away before the build completes."""
        for pod in self.cluster.build_pods():
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                continue
            name = pod["metadata"]["name"]
            with contextlib.suppress(Exception):
                self.cluster.api.delete("pods", name, MCO_NAMESPACE, user=ADMIN_USER)
                self.note(pod["spec"].get("nodeName"), f"build pod {name} killed: build fails")
                return
        self.note(None, "no running build to fail")

    async def _corrupt(self, node: str, how: str) -> None:
        """Make the booted image unreadable to the agent (the MCD reads other files)."""
        host = self.cluster.hosts[node]
        if how == "cmdline":
            # A command line changes only with a boot: the host comes up from an entry that
            # names no ostree deployment (a new boot id), under the running agent, as the
            # simulator's reboots do.
            text = host.cmdline_file.read_text()
            words = [w for w in text.split() if not w.startswith("ostree=")]
            host.cmdline_file.write_text(" ".join(words) + "\n")
            host.new_boot_id()
        else:
            links = sorted((host.root / "ostree").glob("boot.*/*/*/*"))
            for link in links:
                link.unlink()
                link.symlink_to(link if how == "link-loop" else "/../../../../etc")
            # The agent re-reads the booted image when the boot changes; make it read now.
            await self.fleet.restart(node, 0.0)
        self.note(node, f"host tree corrupted ({how}): booted image unreadable")


def _requests_drain(write: WriteRecord, node: str, agent: str) -> bool:
    """Whether ``write`` is someone else's new drain request on ``node`` (the MCD's, or an
    MCD's restart writing it again), not the agent's own release of a held one."""
    if write.resource != "nodes" or write.name != node or write.user == agent:
        return False
    before = annotations_of(write.before or {}).get(DESIRED_DRAIN)
    after = annotations_of(write.after or {}).get(DESIRED_DRAIN) or ""
    return after != before and after.startswith("drain-")
