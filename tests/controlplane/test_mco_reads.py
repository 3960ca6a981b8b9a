"""The noop-image rule's reads of MCO's objects on the real control plane (issue 38 item 1):
the agent as shipped (the kubernetes overlay's ServiceAccount, ClusterRole and admission
policies, a token bound to its pod on its Node) against MachineConfigPools, MachineOSBuilds
and MachineOSConfigs served by structural CRDs as each MCO version serves them
(``tests/controlplane/mco.py``), every object written as MCO's controllers write it.

It lists and watches them with the shipped rights and no more; it holds a same-image drain
while its pool's target is being built, and lets it go at once, saying why in ``/status`` and
an Event, when the build objects say nothing will come; without the ClusterRole's row for the
build objects it cannot tell, holds for ``--noop-expect-within`` and lets go saying which read
fails; and a 410 on these watches is recovered by a new list.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard import protocol
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane import mco
from tests.controlplane.helpers import WAIT, api_client, bound_kubeconfig, unique
from tests.controlplane.mco import BUILDS, CONFIGS, GROUP, POOLS, Mco, condition
from tests.controlplane.nodes import create_worker, mcd_request, shared_namespace, until
from tests.controlplane.test_rights import ACCOUNT, AGENT_NS, agent_pod, applied, kubectl
from tests.deploy.tools import render
from tests.helpers import IMAGE_A, MCO_NS, REGISTRY, metric, spawn

#: The image the node booted and its pool's MachineOSConfig names: a same-image target.
BOOTED = IMAGE_A
#: The image an earlier build of the pool's config made (a revert goes back to that config).
EARLIER = f"{REGISTRY}/ocb-image@sha256:{'e' * 64}"
#: How long a read the agent retries with backoff (30 s at most) may take to come back.
RETRIED = 90.0
#: --noop-expect-within where a test waits it out: a few seconds, not the default 5 minutes.
SHORT_WAIT = "3s"


@dataclasses.dataclass
class Setup:
    """The overlay applied, the version's CRDs served, a Node in a pool of its own, the agent's
    pod on it and that pod's token."""

    version: Mco
    plane: ControlPlane
    admin: client.ApiClient
    kubeconfig: Path
    node: str
    pod: str
    pool: str
    config: str  #: the pool's rendered config, the Node's desired one

    @property
    def drain(self) -> str:
        return f"drain-{self.config}"

    @property
    def mosc(self) -> str:
        return f"{self.pool}-mosc"

    @property
    def build(self) -> str:
        """The pool's MachineOSBuild of its config, named as 4.16's build controller does."""
        return f"{self.pool}-{self.config}-builder"


@pytest.fixture(params=list(Mco), ids=str)
async def setup(
    request: pytest.FixtureRequest, control_plane_mco: ControlPlane, tmp_path: Path
) -> AsyncIterator[Setup]:
    version: Mco = request.param
    plane = control_plane_mco
    objects = applied(render("kubernetes"))
    manifest = tmp_path / "kubernetes.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    async with api_client(plane.admin_kubeconfig) as admin:
        await mco.install(plane, admin, version)
        await shared_namespace(admin, MCO_NS)
        await asyncio.to_thread(
            kubectl, plane, "apply", "--server-side", "--force-conflicts", "-f", str(manifest)
        )
        await shared_namespace(admin, AGENT_NS)
        core = client.CoreV1Api(admin)
        node = await create_worker(admin)
        pool = unique("pool")
        config = f"rendered-{pool}-{'c' * 32}"
        configs = {protocol.CURRENT_CONFIG: config, protocol.DESIRED_CONFIG: config}
        await core.patch_node(node, {"metadata": {"annotations": configs}})
        daemonset = await client.AppsV1Api(admin).read_namespaced_daemon_set(
            "drain-guard", AGENT_NS
        )
        pod = await core.create_namespaced_pod(
            AGENT_NS, agent_pod(objects, daemonset.metadata.uid, node)
        )
        kubeconfig = await bound_kubeconfig(
            admin,
            plane,
            tmp_path / "agent",
            AGENT_NS,
            ACCOUNT,
            (pod.metadata.name, pod.metadata.uid),
        )
        try:
            yield Setup(version, plane, admin, kubeconfig, node, pod.metadata.name, pool, config)
        finally:
            await core.delete_namespaced_pod(pod.metadata.name, AGENT_NS, grace_period_seconds=0)
            await core.delete_node(node)
            # Another version's CRDs may follow: the account's grants are applied afresh then.
            await asyncio.to_thread(
                kubectl, plane, "apply", "--server-side", "--force-conflicts", "-f", str(manifest)
            )


async def start(
    setup: Setup, tmp_path: Path, started: list[AgentProcess], *extra: str
) -> AgentProcess:
    """``drain-guard run`` with the pod's token and the overlay's identity flags (and
    ``extra``)."""
    return await spawn(
        setup.node,
        setup.kubeconfig,
        HostFS(tmp_path / "host", BOOTED),
        "--daemonset",
        f"{AGENT_NS}/drain-guard",
        "--pod-name",
        setup.pod,
        *extra,
        started=started,
    )


async def building(setup: Setup) -> None:
    """MCO building the pool's target: 4.15's pool conditions; 4.16+ the MachineOSConfig
    naming the booted image and the MachineOSBuild of the pool's config, Building."""
    if setup.version is Mco.V4_15:
        await mco.pool(setup.admin, setup.pool, setup.config, [condition("Building")])
        return
    await mco.pool(setup.admin, setup.pool, setup.config, [condition("Updated")])
    await mco.machine_os_config(setup.admin, setup.version, setup.mosc, setup.pool, BOOTED)
    spec = mco.build_spec(setup.version, setup.config, setup.mosc)
    status = {"conditions": [condition("Building")], "buildStart": "2026-01-01T00:00:00Z"}
    await mco.create(setup.admin, BUILDS, setup.version.build_version, setup.build, spec, status)


async def fail_the_build(setup: Setup) -> str:
    """The build fails, as each version records it; the agent's word for it."""
    if setup.version is Mco.V4_15:
        failed = [condition("Building", status=False), condition("BuildFailed")]
        await mco.set_status(setup.admin, POOLS, "v1", setup.pool, {"conditions": failed})
        return f"pool {setup.pool}'s build failed"
    conditions = [condition("Building", status=False), condition("Failed")]
    await mco.set_status(
        setup.admin, BUILDS, setup.version.build_version, setup.build, {"conditions": conditions}
    )
    return f"MachineOSBuild {setup.build} is Failed"


def expired(watch: str, record: dict[str, Any]) -> bool:
    return record.get("message") == f"watch of {watch} expired (410), listing again"


async def image_status(agent: AgentProcess) -> dict[str, Any]:
    status, body = await agent.http("/status")
    assert status == 200, body
    image: dict[str, Any] = json.loads(body)["image"]
    return image


async def node_annotations(setup: Setup) -> dict[str, str]:
    read = await client.CoreV1Api(setup.admin).read_node(setup.node)
    return dict(read.metadata.annotations or {})


async def held(setup: Setup) -> dict[str, str]:
    ann = await node_annotations(setup)
    return ann if ann.get(protocol.DESIRED_DRAIN) == "hold-" + setup.drain else {}


async def event_saying(setup: Setup, reason: str, text: str) -> str:
    events = await client.CoreV1Api(setup.admin).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={setup.node}"
    )
    return next((e.message for e in events.items if e.reason == reason and text in e.message), "")


async def test_a_same_image_drain_is_held_while_its_build_runs_and_let_go_when_it_fails(
    setup: Setup, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    """Held while the pool's target is being built (``coming``); the build fails, and the
    drain goes at once, long before ``--max-hold`` (45 minutes), with the reason in /status,
    the release's Event and the decision's log line. Every read the agent made was allowed."""
    await building(setup)
    agent = await start(setup, tmp_path, agents)
    await mcd_request(setup.admin, setup.node, setup.drain)
    ann = await until(lambda: held(setup))
    assert ann[protocol.HOLD_REASONS] == protocol.Reason.NOOP_IMAGE, ann
    image = await image_status(agent)
    assert image["replacement"] == "coming", image
    why = await fail_the_build(setup)
    record = await agent.wait_log(lambda r: r.get("outcome") == "release:safe")
    assert f"not held: {why}" in str(record.get("why")), record
    ann = await node_annotations(setup)
    assert ann[protocol.DESIRED_DRAIN] == setup.drain
    image = await image_status(agent)
    assert (image["replacement"], why in image["replacementWhy"]) == ("none", True), image
    message = await until(lambda: event_saying(setup, "DrainReleased", f"not held: {why}"))
    assert "(outcome safe)" in message
    served = ("machineconfigpool", "machineosbuild", "machineosconfig")
    for resource in served[:1] if setup.version is Mco.V4_15 else served:
        for verb in ("list", "watch"):
            operation = f"{resource}_{verb}"
            assert await metric(agent, "drain_guard_api_errors_total", operation=operation) == 0


def rules(setup: Setup, kept: list[Any]) -> list[Any]:
    return [setup.admin.sanitize_for_serialization(rule) for rule in kept]


@pytest.mark.parametrize("setup", [Mco.V4_16, Mco.V4_18], indirect=True, ids=str)
async def test_without_the_rights_row_it_holds_for_its_short_wait_then_lets_go_saying_why(
    setup: Setup, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    """A revert to a config built before: the build succeeded with the image the node runs,
    and nothing will retarget it. With the ClusterRole's row for MachineOSBuilds and
    MachineOSConfigs taken out, the agent's lists of them are refused (403), which only an
    admin's fix ends: it holds (``unknown``) for --noop-expect-within from the hold's start,
    as where it reads none of MCO's objects, then lets the drain go, saying which read fails
    in /status, the decision's log line and the release's Event; never to --max-hold."""
    await mco.pool(setup.admin, setup.pool, setup.config, [condition("Updated")])
    await mco.machine_os_config(setup.admin, setup.version, setup.mosc, setup.pool, BOOTED)
    spec = mco.build_spec(setup.version, setup.config, setup.mosc)
    long_ago = datetime(2026, 1, 1, tzinfo=UTC)
    status = {
        "conditions": [condition("Succeeded", since=long_ago)],
        **mco.build_image(setup.version, EARLIER),
    }
    await mco.create(setup.admin, BUILDS, setup.version.build_version, setup.build, spec, status)
    rbac = client.RbacAuthorizationV1Api(setup.admin)
    role = await rbac.read_cluster_role("drain-guard")
    shipped = role.rules
    kept = [r for r in shipped if BUILDS not in (r.resources or ())]
    assert len(kept) == len(shipped) - 1
    await rbac.patch_cluster_role("drain-guard", {"rules": rules(setup, kept)})
    agent = await start(setup, tmp_path, agents, "--noop-expect-within", SHORT_WAIT)
    await mcd_request(setup.admin, setup.node, setup.drain)
    hold = await agent.wait_log(lambda r: r.get("outcome") == "hold")
    assert hold.get("reasons") == [protocol.Reason.NOOP_IMAGE], hold
    record = await agent.wait_log(lambda r: r.get("outcome") == "release:safe")
    why = str(record.get("why"))
    assert "no new image came within its wait" in why, record
    assert "not listed, failing since" in why, record
    assert "403" in why, record
    assert (await node_annotations(setup))[protocol.DESIRED_DRAIN] == setup.drain
    image = await image_status(agent)
    assert image["replacement"] == "none", image
    assert "403" in image["replacementWhy"], image
    message = await until(lambda: event_saying(setup, "DrainReleased", "no new image came"))
    assert "(outcome safe)" in message, message
    assert "403" in message, message


@pytest.mark.parametrize("setup", [Mco.V4_18], indirect=True, ids=str)
async def test_the_agents_token_reads_mcos_objects_and_changes_none(setup: Setup) -> None:
    """The token lists and watches the three resources, gets pools (their uid, for the pool's
    Events), and is refused any other verb on them, and MachineConfigs (RBAC: a 403)."""
    await building(setup)
    version = setup.version.build_version
    async with api_client(setup.kubeconfig) as agent:
        custom = client.CustomObjectsApi(agent)
        for plural, served in ((POOLS, "v1"), (BUILDS, version), (CONFIGS, version)):
            await custom.list_cluster_custom_object(GROUP, served, plural)
            stream = await custom.list_cluster_custom_object(
                GROUP, served, plural, watch=True, timeout_seconds=1, _preload_content=False
            )
            assert stream.status == 200
            stream.release()
        await custom.get_cluster_custom_object(GROUP, "v1", POOLS, setup.pool)
        refused = {
            "get a MachineOSBuild": custom.get_cluster_custom_object(
                GROUP, version, BUILDS, setup.build
            ),
            "get a MachineOSConfig": custom.get_cluster_custom_object(
                GROUP, version, CONFIGS, setup.mosc
            ),
            "patch a pool": custom.patch_cluster_custom_object(
                GROUP,
                "v1",
                POOLS,
                setup.pool,
                [{"op": "add", "path": "/spec/paused", "value": True}],
            ),
            "patch a pool's status": custom.patch_cluster_custom_object_status(
                GROUP,
                "v1",
                POOLS,
                setup.pool,
                [{"op": "add", "path": "/status/machineCount", "value": 0}],
            ),
            "patch a MachineOSBuild's status": custom.patch_cluster_custom_object_status(
                GROUP,
                version,
                BUILDS,
                setup.build,
                [{"op": "add", "path": "/status/conditions", "value": []}],
            ),
            "delete a MachineOSConfig": custom.delete_cluster_custom_object(
                GROUP, version, CONFIGS, setup.mosc
            ),
            "create a MachineOSBuild": custom.create_cluster_custom_object(
                GROUP, version, BUILDS, {"metadata": {"name": unique("mosb")}}
            ),
            "list MachineConfigs": custom.list_cluster_custom_object(GROUP, "v1", "machineconfigs"),
        }
        answers = {}
        for what, call in refused.items():
            try:
                await call
            except ApiException as error:
                answers[what] = error.status
            else:
                answers[what] = 200
    assert answers == dict.fromkeys(refused, 403), answers


@pytest.mark.parametrize("setup", [Mco.V4_16, Mco.V4_18], indirect=True, ids=str)
async def test_a_410_on_mcos_watches_lists_again_and_the_rule_sees_what_changed(
    setup: Setup, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    """etcd compacted and the API server restarted under a holding agent: each of the three
    watches gets the real 410, lists again, and the build's failure, written after, lets the
    drain go at once."""
    await building(setup)
    agent = await start(setup, tmp_path, agents)
    await mcd_request(setup.admin, setup.node, setup.drain)
    await until(lambda: held(setup))
    # A write the agent's watches of MCO's objects do not see: etcd moves past their versions.
    await create_worker(setup.admin)
    setup.plane.compact()
    await asyncio.to_thread(setup.plane.restart_apiserver)
    version = setup.version.build_version
    for watch in (f"{POOLS}.v1", f"{BUILDS}.{version}", f"{CONFIGS}.{version}"):
        await agent.wait_log(functools.partial(expired, watch), timeout=RETRIED)
    why = await fail_the_build(setup)
    record = await agent.wait_log(lambda r: r.get("outcome") == "release:safe", timeout=WAIT)
    assert f"not held: {why}" in str(record.get("why")), record


@pytest.mark.parametrize("setup", [Mco.V4_15], indirect=True, ids=str)
async def test_a_node_moved_to_another_pool_is_decided_on_that_pool(
    setup: Setup, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    """The agent reads its own pool alone, by name (the shipped list and watch rights serve
    it): a same-image drain is held while that pool builds; the node moved to another pool
    (MCO renders that pool's config for it and its daemon asks for a drain), the watch moves
    with it, and the new request is decided on the new pool, degraded: let go at once."""
    await building(setup)
    agent = await start(setup, tmp_path, agents)
    await mcd_request(setup.admin, setup.node, setup.drain)
    await until(lambda: held(setup))
    other = unique("pool")
    config = f"rendered-{other}-{'d' * 32}"
    await mco.pool(setup.admin, other, config, [condition("NodeDegraded")])
    request = f"drain-{config}"
    await mcd_request(setup.admin, setup.node, request, **{protocol.DESIRED_CONFIG: config})
    why = f"not held: pool {other} is NodeDegraded"
    record = await agent.wait_log(lambda r: why in str(r.get("why")))
    assert record.get("request") == request, record
    assert (await node_annotations(setup))[protocol.DESIRED_DRAIN] == request
