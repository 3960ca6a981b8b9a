"""Each overlay installed on the real control plane, and the agent's rights proven by the real
authorizer (RBAC) and admission (the overlay's ValidatingAdmissionPolicies, evaluated by the
API server itself), with a real token of the rendered ServiceAccount bound to a pod on its Node.

``docs/rights.md`` is the table of those rights: every row of an overlay installed here is a
request made here, and the test fails when the API server's answer and the table disagree, or
when a request has no row. The agent itself then runs with the same token and holds, shields
and releases, every write its own Node's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard import protocol
from drain_guard.commands.preflight import rows as preflight_rows
from drain_guard.commands.preflight.probe import Agent, Probe
from drain_guard.confine.rights import ALLOWED, RBAC, expected
from drain_guard.core.pods import Pod
from drain_guard.decision.decide import stale_keys
from drain_guard.kube.client import Kube
from drain_guard.kube.credentials import load_api_client
from drain_guard.shield.plan import Role, Want
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.crds import custom_resource_definitions
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client, bound_kubeconfig, unique
from tests.controlplane.nodes import (
    DRAIN_B,
    add_build_pod,
    create_worker,
    mcd_request,
    set_phase,
    shared_namespace,
    until,
    wait_annotation,
)
from tests.deploy.tools import REPO, Obj, one, render
from tests.helpers import (
    IMAGE_A,
    IMAGE_B,
    MCO_NS,
    confinement,
    metric,
    reap,
    require_tool,
    run_cli,
    spawn,
)

RIGHTS = REPO / "docs" / "rights.md"
CRDS = Path(__file__).with_name("crds.yaml")
#: The installs of the table: an overlay whose agent is its ServiceAccount, confined by the
#: admission policies (Kubernetes 1.30+, OpenShift 4.17+), and the control plane it is applied
#: to: the pinned Kubernetes, or the same emulating 1.31 (OpenShift 4.18, the oldest a 1.34
#: binary emulates). openshift-4.15's rows are test_webhook's (with the webhook running), made
#: with the same makers (``made``, ``probe_of``).
INSTALLS = {
    "kubernetes": ("kubernetes", "control_plane"),
    "openshift": ("openshift", "control_plane"),
    "openshift on 1.31": ("openshift", "control_plane_1_31"),
}
AGENT_NS = "drain-guard"
ACCOUNT = "drain-guard"
#: The agent's writes (drain_guard.runtime.metrics.API_OPERATIONS): none may have failed.
WRITES = ("node_patch", "event_create", "event_patch", "poddisruptionbudget_create")
POLICY = re.compile(r"ValidatingAdmissionPolicy '([^']+)'")
VALID_HOLD_REQUEST = "2099-01-01T00:00:00Z;rights test"
POOLS = ("machineconfiguration.openshift.io", "v1", "machineconfigpools")
POOL_CRD = "machineconfigpools.machineconfiguration.openshift.io"
#: The CRDs of MCO's objects the agent reads (the noop-image guard's replacement rule).
MCO_CRDS = (
    POOL_CRD,
    "machineosbuilds.machineconfiguration.openshift.io",
    "machineosconfigs.machineconfiguration.openshift.io",
)


@dataclasses.dataclass
class Installed:
    """An overlay applied, a Node with the agent's pod on it, and the pod's account's token."""

    install: str  #: the table's name for it (``INSTALLS``)
    plane: ControlPlane
    admin: client.ApiClient
    agent: client.ApiClient  # the token's
    kubeconfig: Path
    node: str
    other: str
    pod: str
    pool: str  #: a MachineConfigPool of this test's own; its rendered configs name the Node's


def kubectl(plane: ControlPlane, *args: str, stdin: str = "") -> str:
    proc = subprocess.run(
        [require_tool("kubectl"), "--kubeconfig", str(plane.admin_kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stderr}"
    return proc.stdout


def applied(objects: list[Obj]) -> list[Obj]:
    """What the test applies: every object but the MCO's namespace, which other tests share
    (it exists already)."""
    return [o for o in objects if (o["kind"], o["metadata"]["name"]) != ("Namespace", MCO_NS)]


def agent_pod(objects: list[Obj], daemonset_uid: str, node: str) -> Any:
    """The pod the DaemonSet controller would make on ``node``: its template, owned by it."""
    template = one(objects, "DaemonSet", "drain-guard")["spec"]["template"]
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "drain-guard",
        "uid": daemonset_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "metadata": {
            "name": unique("drain-guard"),
            "labels": template["metadata"]["labels"],
            "ownerReferences": [owner],
        },
        "spec": {**template["spec"], "nodeName": node},
    }


@pytest.fixture(params=list(INSTALLS))
async def installed(
    request: pytest.FixtureRequest, control_plane: ControlPlane, tmp_path: Path
) -> AsyncIterator[Installed]:
    install: str = request.param
    overlay, plane_fixture = INSTALLS[install]
    plane: ControlPlane = (
        control_plane
        if plane_fixture == "control_plane"
        else request.getfixturevalue(plane_fixture)
    )
    objects = applied(render(overlay))
    manifest = tmp_path / f"{overlay}.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    async with api_client(plane.admin_kubeconfig) as admin:
        core = client.CoreV1Api(admin)
        await shared_namespace(admin, MCO_NS)
        kubectl(plane, "apply", "--server-side", "-f", str(CRDS))
        kubectl(plane, "wait", "--for=condition=Established", "-f", str(CRDS))
        kubectl(plane, "apply", "--server-side", "--force-conflicts", "-f", str(manifest))
        await shared_namespace(admin, AGENT_NS)
        node, other = await create_worker(admin), await create_worker(admin)
        pool = await create_pool(plane, admin)
        # A second pool: the watch rows' answer is then a stream of two events, one a line,
        # which a reader of one JSON body refuses (as every real cluster's several pools do).
        second = await create_pool(plane, admin)
        in_pool = {"metadata": {"annotations": {protocol.DESIRED_CONFIG: rendered(pool)}}}
        await core.patch_node(node, in_pool)
        daemonset = await client.AppsV1Api(admin).read_namespaced_daemon_set(
            "drain-guard", AGENT_NS
        )
        body = agent_pod(objects, daemonset.metadata.uid, node)
        pod = await core.create_namespaced_pod(AGENT_NS, body)
        kubeconfig = await bound_kubeconfig(
            admin,
            plane,
            tmp_path / "agent",
            AGENT_NS,
            ACCOUNT,
            (pod.metadata.name, pod.metadata.uid),
        )
        try:
            async with api_client(kubeconfig) as agent:
                setup = Installed(
                    install, plane, admin, agent, kubeconfig, node, other, pod.metadata.name, pool
                )
                await policies_in_force(setup)
                yield setup
        finally:
            await core.delete_namespaced_pod(pod.metadata.name, AGENT_NS, grace_period_seconds=0)
            for each in (pool, second):
                await client.CustomObjectsApi(admin).delete_cluster_custom_object(*POOLS, each)
            rest = [o for o in objects if o["kind"] != "Namespace"]
            manifest.write_text(yaml.safe_dump_all(rest))
            kubectl(plane, "delete", "--ignore-not-found", "-f", str(manifest))


def rendered(pool: str) -> str:
    """A rendered config of ``pool``, as MCO names them (the agent reads the pool from it)."""
    return f"rendered-{pool}-{'b' * 32}"


async def create_pool(plane: ControlPlane, admin: client.ApiClient) -> str:
    """A MachineConfigPool of a name of its own, its CRD the simulator's, with those of the
    MachineOSBuilds and MachineOSConfigs the agent lists and watches beside it (each created
    unless another test did: RealCluster creates the same)."""
    crd: Any
    for crd in custom_resource_definitions():
        if crd["metadata"]["name"] not in MCO_CRDS:
            continue
        try:
            await client.ApiextensionsV1Api(admin).create_custom_resource_definition(crd)
        except ApiException as error:
            if error.status != 409:
                raise
    for name in MCO_CRDS:
        kubectl(plane, "wait", "--for=condition=Established", f"crd/{name}")
        plural, _, group = name.partition(".")

        async def served(plural: str = plural, group: str = group) -> bool:
            """Established is not yet listed: a new CRD's storage answers 429 a moment."""
            try:
                await client.CustomObjectsApi(admin).list_cluster_custom_object(group, "v1", plural)
            except ApiException as error:
                if error.status != 429:
                    raise
                return False
            return True

        await until(served)
    name = unique("pool")
    body = {
        "apiVersion": protocol.POOL_API_VERSION,
        "kind": protocol.POOL_KIND,
        "metadata": {"name": name},
    }
    await client.CustomObjectsApi(admin).create_cluster_custom_object(*POOLS, body)
    return name


async def policies_in_force(setup: Installed) -> None:
    """Until the API server enforces the policies just applied (it loads them in the
    background): a write about the other Node that each policy alone refuses."""

    async def refused() -> bool:
        probes = (hold_other_node, other_nodes_budget, other_nodes_event)
        return all([await probe(setup) != ALLOWED for probe in probes])

    await until(refused)


async def answer(call: Awaitable[Any]) -> str:
    """What the API server said: allowed, or who denied it (RBAC, or which policy)."""
    try:
        await call
    except ApiException as error:
        if error.status != 403:
            return f"error {error.status}: {error.body!r}"
        found = POLICY.search(str(error.body))
        return f"denied: {found.group(1)}" if found else RBAC
    return ALLOWED


# --- the requests of the table ---------------------------------------------------------------


async def prepare_drain(setup: Installed, node: str) -> None:
    await mcd_request(setup.admin, node, DRAIN_B)


def hold_ops(node_annotations: dict[str, str], detail: str = "rights test") -> list[Any]:
    return protocol.hold_patch(
        DRAIN_B,
        node_annotations.get(protocol.LAST_APPLIED_DRAIN),
        "",
        [protocol.Reason.BUILD_POD],
        datetime.now(UTC),
        detail,
        expires=datetime.now(UTC) + timedelta(minutes=45),
    )


async def node_annotations(setup: Installed, node: str) -> dict[str, str]:
    return dict((await client.CoreV1Api(setup.admin).read_node(node)).metadata.annotations)


async def patch_node(setup: Installed, node: str, body: Any) -> str:
    return await answer(client.CoreV1Api(setup.agent).patch_node(node, body))


async def hold_own_node(setup: Installed) -> str:
    await prepare_drain(setup, setup.node)
    ops = hold_ops(await node_annotations(setup, setup.node))
    return await patch_node(setup, setup.node, ops)


async def hold_other_node(setup: Installed) -> str:
    await prepare_drain(setup, setup.other)
    ops = hold_ops(await node_annotations(setup, setup.other))
    return await patch_node(setup, setup.other, ops)


async def user_name(api: client.ApiClient) -> str:
    """The name the API server knows ``api``'s caller by (a SelfSubjectReview)."""
    review = await client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview()
    )
    return str(review.status.user_info.username)


async def budget(setup: Installed, node: str, namespace: str = MCO_NS) -> Any:
    """A budget shaped as the shield's, on a real build pod on ``node`` (the garbage collector
    deletes a budget whose owner does not exist)."""
    name = await add_build_pod(setup.admin, node)
    read = await client.CoreV1Api(setup.admin).read_namespaced_pod(name, MCO_NS)
    labels = {str(k): str(v) for k, v in read.metadata.labels.items()}
    pod = Pod(namespace, name, "Running", labels, uid=read.metadata.uid, node=node)
    return Want(pod, Role.BUILD_POD, unique("drain-guard-build")).manifest()


async def create_budget(setup: Installed, body: Any) -> str:
    api = client.PolicyV1Api(setup.agent)
    namespace = body["metadata"]["namespace"]
    return await answer(api.create_namespaced_pod_disruption_budget(namespace, body, dry_run="All"))


async def other_nodes_budget(setup: Installed) -> str:
    return await create_budget(setup, await budget(setup, setup.other))


def event(node: str, namespace: str = "default", component: str = "drain-guard") -> Any:
    """An Event about ``node`` as the agent's recorder writes one."""
    return {
        "metadata": {"name": unique("event"), "namespace": namespace},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": "DrainReleased",
        "message": "rights test",
        "type": "Normal",
        "source": {"component": component, "host": node},
        "reportingComponent": component,
        "reportingInstance": f"{component}-{node}",
    }


async def create_event(setup: Installed, body: Any) -> str:
    namespace = body["metadata"]["namespace"]
    return await answer(
        client.CoreV1Api(setup.agent).create_namespaced_event(namespace, body, dry_run="All")
    )


async def other_nodes_event(setup: Installed) -> str:
    return await create_event(setup, event(setup.other))


def pool_event(
    node: str, pool: str, related: str | None = None, reason: str = protocol.POOL_ROLLOUT_HELD
) -> Any:
    """An Event about ``pool`` as the agent of ``node`` writes one (``related``: its Node, or
    another, or none when "")."""
    body = event(node) | {
        "involvedObject": {
            "apiVersion": protocol.POOL_API_VERSION,
            "kind": protocol.POOL_KIND,
            "name": pool,
        },
        "reason": reason,
    }
    name = node if related is None else related
    if name:
        body["related"] = {"apiVersion": "v1", "kind": "Node", "name": name}
    return body


# --- the requests of the table, as drain-guard preflight makes them ---------------------------


async def held(setup: Installed) -> None:
    """Its own Node's drain held, as the agent would have (a release needs one)."""
    await prepare_drain(setup, setup.node)
    ops = hold_ops(await node_annotations(setup, setup.node))
    await client.CoreV1Api(setup.admin).patch_node(setup.node, ops)  # a list: a JSON Patch


async def pending(setup: Installed) -> None:
    """A drain request pending on its own Node (a hold is made of one)."""
    await prepare_drain(setup, setup.node)


async def stale_marker(setup: Installed) -> None:
    """An administrator's released marker, once desiredDrain moved on (the agent cleans it)."""
    await prepare_drain(setup, setup.node)
    marker = {protocol.RELEASED: "drain-old", protocol.RELEASED_BY: await user_name(setup.admin)}
    await client.CoreV1Api(setup.admin).patch_node(
        setup.node, {"metadata": {"annotations": marker}}
    )


def kept_budget(own: bool) -> Callable[[Installed], Awaitable[None]]:
    """A budget the shield keeps for its own Node (``own``) or the other one."""

    async def keep(setup: Installed) -> None:
        body = await budget(setup, setup.node if own else setup.other)
        await client.PolicyV1Api(setup.admin).create_namespaced_pod_disruption_budget(MCO_NS, body)

    return keep


#: The state a row's request needs, which the preflight finds on a live cluster or reports
#: the row as not tried: set up here before the row is made, so that every row is tried.
PREPARE: dict[str, Callable[[Installed], Awaitable[None]]] = {
    "hold its own Node's drain (the agent's JSON Patch)": pending,
    "set desiredDrain to lastAppliedDrain on its own Node (a fake completion)": pending,
    "release its own Node's hold (the agent's JSON Patch)": held,
    "remove drain-guard.io/released-by with the released marker (the agent's cleanup)": (
        stale_marker
    ),
    "delete a budget on its own Node's build pod": kept_budget(own=True),
    "delete a budget on another Node's build pod": kept_budget(own=False),
}


@contextlib.asynccontextmanager
async def probe_of(
    setup: Installed, tmp_path: Path, namespace: str = AGENT_NS, account: str = ACCOUNT
) -> AsyncIterator[Probe]:
    """What ``drain-guard preflight`` makes its requests with, but with the agent's real
    tokens in place of impersonation: the pod-bound one, and one bound to no pod (the agent's
    account ``account`` in ``namespace``: the overlays', or test_webhook's renamed one)."""
    core = client.CoreV1Api(setup.admin)
    plain = await core.create_namespaced_service_account_token(
        account,
        namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
    )
    unbound_config = setup.plane.token_kubeconfig(plain.status.token, tmp_path / "unbound")
    pod = await core.read_namespaced_pod(setup.pod, namespace)
    who = Agent(namespace, account, setup.pod, pod.metadata.uid, setup.node, setup.other)
    admin = Kube(await load_api_client(str(setup.plane.admin_kubeconfig)))
    agent = Kube(await load_api_client(str(setup.kubeconfig)))
    unbound = Kube(await load_api_client(str(unbound_config)))
    try:
        yield Probe(admin, agent, unbound, who, setup.pool)
    finally:
        for kube in (admin, agent, unbound):
            await kube.close()


async def made(setup: Installed, probe: Probe, request: str) -> str:
    """The row's request made by the preflight's own maker, in the state it needs."""
    prepare = PREPARE.get(request)
    if prepare is not None:
        await prepare(setup)
    answer_made, why = await preflight_rows.REQUESTS[request](probe)
    assert answer_made is not None, f"{request}: not tried: {why}"
    return answer_made


def documented(install: str) -> dict[str, str]:
    """The table's rows for ``install``, read as ``drain-guard preflight`` reads them."""
    return expected(RIGHTS.read_text(), install)


async def test_the_rights_table_is_what_the_real_api_server_answers(
    installed: Installed, tmp_path: Path
) -> None:
    """Every row of the install, made as ``drain-guard preflight`` makes it (its makers, one
    source), with the agent's real token: a row whose answer the API server does not give
    fails, and so does a row no maker makes."""
    table = documented(installed.install)
    assert table, f"docs/rights.md has no row for {installed.install}"
    unmade = set(table) - set(preflight_rows.REQUESTS)
    assert not unmade, f"rows the preflight does not make: {unmade}"
    async with probe_of(installed, tmp_path) as probe:
        results = {request: await made(installed, probe, request) for request in table}
    wrong = {
        name: f"table says {table[name]!r}, the API server {results[name]!r}"
        for name in table
        if table[name] != results[name]
    }
    assert not wrong, "\n".join(f"{installed.install}: {k}: {v}" for k, v in wrong.items())


async def test_the_agent_holds_shields_and_releases_with_its_own_token(
    installed: Installed, tmp_path: Path
) -> None:
    """The agent with the overlay's flags and its pod's token: confined by its own check
    (a dry-run write to another Node refused by the API server), it holds for a build pod,
    shields it, posts its Events and releases, every one of them allowed."""
    admin = installed.admin
    build = await add_build_pod(admin, installed.node)
    started: list[AgentProcess] = []
    try:
        agent = await spawn(
            installed.node,
            installed.kubeconfig,
            HostFS(tmp_path / "host", IMAGE_A),
            "--daemonset",
            f"{AGENT_NS}/drain-guard",
            "--pod-name",
            installed.pod,
            started=started,
        )
        doc = await confinement(agent)
        assert doc["confined"] is True, doc
        await mcd_request(admin, installed.node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        await wait_annotation(
            admin, installed.node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )

        async def shielded() -> bool:
            budgets = await client.PolicyV1Api(admin).list_namespaced_pod_disruption_budget(
                MCO_NS, label_selector=f"drain-guard.io/node={installed.node}"
            )
            return len(budgets.items) == 1

        assert await until(shielded)

        # Its pool says so where operators look: kubectl describe finds the pool's Events by
        # its kind, name and uid (the agent read the uid with its own token). The Node's
        # annotations say it on the Node: no Event there until the hold ends.
        waiting = f"{installed.pool} pool waiting: {installed.node} held (build-pod, since "
        described = await until(lambda: describe_pool(installed, "PoolRolloutHeld"))
        assert waiting in described, described
        await set_phase(admin, build, "Succeeded")
        await wait_annotation(admin, installed.node, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
        await agent.wait_log(lambda r: r.get("outcome") == "release:safe")
        described = await until(lambda: describe_pool(installed, "PoolRolloutReleased"))
        assert f"{installed.pool} pool goes on: {installed.node} released after" in described

        async def node_events() -> list[client.CoreV1Event]:
            events = await client.CoreV1Api(admin).list_namespaced_event(
                "default", field_selector=f"involvedObject.name={installed.node}"
            )
            return [e for e in events.items if e.reason == "DrainReleased"]

        # The Node's one Event of the hold, its end, says what the hold was for.
        (ended,) = await until(node_events)
        assert "(outcome safe); held for build-pod: build pod " in ended.message
        for operation in (*WRITES, "machineconfigpool_get"):
            assert await metric(agent, "drain_guard_api_errors_total", operation=operation) == 0
    finally:
        await reap(started)


async def describe_pool(setup: Installed, reason: str) -> str:
    """``kubectl describe`` of the test's pool, once its Events show ``reason``."""
    shown = await asyncio.to_thread(
        kubectl, setup.plane, "describe", "machineconfigpool", setup.pool
    )
    return shown if reason in shown else ""


async def test_the_hold_request_format_is_enforced_on_whoever_writes_it(
    installed: Installed,
) -> None:
    """drain-guard-hold-request-format, as kube-apiserver evaluates it: an administrator's
    malformed hold request is refused when written (a typo would hold nothing), a well-formed
    one is taken, a write that leaves the value as it is is not checked again, and removing
    it is allowed. The agent itself may write none (the rights table)."""
    core = client.CoreV1Api(installed.admin)
    node = installed.node

    def annotate(value: str | None) -> Awaitable[Any]:
        return core.patch_node(node, {"metadata": {"annotations": {protocol.HOLD_REQUEST: value}}})

    async def refused() -> ApiException | None:
        try:
            await annotate("30m;db failover")
        except ApiException as error:
            return error
        await annotate(None)  # taken before the policy was loaded: try again
        return None

    error = await until(refused)
    assert error.status == 422, error.body
    assert "drain-guard-hold-request-format" in error.body
    assert "drain-guard hold --node-name NODE" in error.body
    await annotate(VALID_HOLD_REQUEST)
    other = {"metadata": {"annotations": {"example.com/unrelated": "x"}}}
    await core.patch_node(node, other)  # the hold request unchanged: not checked again
    for bad in ("2099-01-01 00:00:00Z", "2099-01-01T00:00:00+0100;x", "tomorrow"):
        with pytest.raises(ApiException) as raised:
            await annotate(bad)
        assert raised.value.status == 422, (bad, raised.value.body)
    await annotate(None)
    assert protocol.HOLD_REQUEST not in await node_annotations(installed, node)


@pytest.mark.parametrize("installed", ["kubernetes"], indirect=True)
async def test_a_release_records_its_releaser_and_no_one_elses(
    installed: Installed, tmp_path: Path
) -> None:
    """drain-guard-released-by, as kube-apiserver evaluates it: ``drain-guard release`` run
    as user A records A (the name the API server gives it, not the kubeconfig's); A writing
    B's name is refused; the agent's removal of the record, once the request moved on, is
    taken."""
    alice = unique("alice")
    kubeconfig = installed.plane.user_kubeconfig(alice, ["system:masters"], tmp_path / "alice")
    assert await hold_own_node(installed) == ALLOWED
    code, out, err = await run_cli(
        "release", "--node-name", installed.node, "--kubeconfig", str(kubeconfig)
    )
    assert (code, err) == (0, ""), err
    assert f"released by {alice}" in out
    ann = await node_annotations(installed, installed.node)
    assert (ann[protocol.RELEASED], ann[protocol.RELEASED_BY]) == (DRAIN_B, alice)

    async with api_client(kubeconfig) as as_alice:
        forged = {"metadata": {"annotations": {protocol.RELEASED_BY: "bob"}}}
        with pytest.raises(ApiException) as raised:
            await client.CoreV1Api(as_alice).patch_node(installed.node, forged)
    assert raised.value.status == 403, raised.value.body
    assert "drain-guard-released-by" in str(raised.value.body)
    assert (await node_annotations(installed, installed.node))[protocol.RELEASED_BY] == alice

    await mcd_request(installed.admin, installed.node, "drain-rendered-worker-next")
    ann = await node_annotations(installed, installed.node)
    stale = stale_keys(ann)
    assert stale == protocol.RELEASED_KEYS
    cleanup = protocol.cleanup_patch(ann[protocol.DESIRED_DRAIN], ann, stale)
    assert await patch_node(installed, installed.node, cleanup) == ALLOWED
    assert not set(stale) & set(await node_annotations(installed, installed.node))


@pytest.mark.parametrize("installed", ["kubernetes"], indirect=True)
async def test_an_operators_drain_guard_keys_never_stop_the_agents_hold(
    installed: Installed,
) -> None:
    """drain-guard-node-confinement lists the agent's keys and counts none: beside an
    operator's hold request, an administrator's released marker and keys of the operator's
    own, the agent's hold (its five keys, 12 drain-guard.io/ keys in all) is admitted by the
    real API server (a limit of 8 refused it: issue 34), and a key of the operator's stays
    the operator's."""
    theirs = {f"{protocol.DG_PREFIX}note-{i}": "operator's" for i in range(4)}
    admin = await user_name(installed.admin)
    marker = {protocol.RELEASED: "drain-old", protocol.RELEASED_BY: admin}
    request = {protocol.HOLD_REQUEST: VALID_HOLD_REQUEST}
    await client.CoreV1Api(installed.admin).patch_node(
        installed.node, {"metadata": {"annotations": theirs | marker | request}}
    )
    assert await hold_own_node(installed) == ALLOWED
    ann = await node_annotations(installed, installed.node)
    assert ann[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
    assert sum(k.startswith(protocol.DG_PREFIX) for k in ann) == 12
    body = {"metadata": {"annotations": {f"{protocol.DG_PREFIX}note-0": "the agent's"}}}
    assert await patch_node(installed, installed.node, body) == (
        "denied: drain-guard-node-confinement"
    )
