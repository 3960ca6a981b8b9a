"""The systemd install as its units run it: drain-guard-node-proxy.service (root with no
capability, the agent's group, holding the kubelet's kubeconfig and rotating key) and
drain-guard.service (the unprivileged agent user, no credential, ``--api-socket``).

The agent holds and releases its own Node through the proxy, with the node's identity, as
the API server sees it; its process can read no credential, and whatever it sends the proxy
beyond its own Node's hold, release, Events and reads is answered 403 and never reaches the
API server: another Node, its own Node's spec, labels, status or any other annotation, a
service-account token, a secret, a certificate signing request, another Node's Events. The
kubelet's rotation is followed by the proxy without a restart of either. Against the
simulator (TLS, the node authenticated by its client certificate, the Node authorizer and
NodeRestriction of drain_guard_sim.apiserver.nodeauth).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from drain_guard import protocol
from drain_guard.confine.permissions import EVENTS_NAMESPACE
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import ADMIN, SimApiServer, WriteRecord
from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.agentproc import AgentProcess, spawn_agent
from drain_guard_sim.harness.seedobjects import worker_node
from tests.deploy.tools import (
    AGENT_UNIT,
    ENV_FILE,
    PROXY_UNIT,
    env_file,
    specifiers,
    systemd_unit,
    under,
)
from tests.helpers import (
    CONFIG_A,
    CONFIG_B,
    IMAGE_A,
    IMAGE_B,
    MCO_NS,
    NODE,
    WAIT,
    add_build_pod,
    confinement,
    mcd_request,
    node_annotations,
    require_tool,
    wait_annotation,
)
from tests.integration.kubelet import Kubelet

NODE_USER = f"system:node:{NODE}"
#: Who else writes in these tests: the test itself, and the MCD it plays (tests.helpers).
TEST_USERS = (
    ADMIN,
    "system:serviceaccount:openshift-machine-config-operator:machine-config-daemon",
)
OTHER = "worker-1"
#: The units' user and group on this scratch host (systemd-sysusers picks them on a real one).
AGENT_UID, GROUP = 61991, 61990
HELD = f"hold-drain-{CONFIG_B}"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the proxy runs as root")


def _service(unit: Path) -> dict[str, list[str]]:
    return systemd_unit(unit)["Service"]


def _no_capabilities(*ids: str) -> list[str]:
    """setpriv with ``ids``, then no capability at all, as the units' empty bounding sets."""
    setpriv = require_tool("setpriv")
    return [setpriv, *ids, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]


AS_AGENT = _no_capabilities(f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}", f"--groups={GROUP}")


@pytest.fixture
def root() -> Iterator[Path]:
    """The scratch host: one the agent's user may enter (pytest's own are root's, 0700)."""
    with tempfile.TemporaryDirectory(prefix="dg-host-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[SimApiServer]:
    async with SimApiServer(tls=ServingCert.generate(tmp_path / "tls")) as server:
        server.create("namespaces", {"metadata": {"name": MCO_NS}})
        server.create("nodes", worker_node(NODE, CONFIG_A, IMAGE_A))
        server.create("nodes", {"metadata": {"name": OTHER}})
        yield server


def _proxy_command(root: Path) -> list[str]:
    """The proxy unit's ExecStart on the scratch host: its arguments as written, the kubelet's
    paths under ``root``, this interpreter for /opt/drain-guard/bin/drain-guard, the UID the
    sysusers line would give drain-guard."""
    (line,) = _service(PROXY_UNIT)["ExecStart"]
    argv = shlex.split(under(root, specifiers(line)))
    assert argv[:2] == ["/opt/drain-guard/bin/drain-guard", "node-proxy"]
    assert argv[argv.index("--agent-user") + 1] == _service(AGENT_UNIT)["User"][0]
    argv[argv.index("--agent-user") + 1] = str(AGENT_UID)
    return [sys.executable, "-m", "drain_guard", *argv[1:]]


def agent_socket(root: Path) -> str:
    """DRAIN_GUARD_API_SOCKET as the agent's unit sets it, on the scratch host."""
    (value,) = [
        v.partition("=")[2]
        for v in _service(AGENT_UNIT)["Environment"]
        if v.startswith("DRAIN_GUARD_API_SOCKET=")
    ]
    return under(root, specifiers(value))


@contextlib.asynccontextmanager
async def started_proxy(root: Path, node: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """drain-guard-node-proxy.service for ``node``, started as systemd starts it: its runtime
    directory (root:Group, its mode), root with its group and umask and no capability,
    NODE_NAME; ready when it says READY=1 on the notify socket (Type=notify). It reads the
    kubeconfig at /var/lib/kubelet/kubeconfig under ``root``."""
    service = _service(PROXY_UNIT)
    assert "User" not in service
    assert service["Group"] == [_service(AGENT_UNIT)["User"][0]]
    runtime = root / "run" / service["RuntimeDirectory"][0]
    runtime.mkdir(parents=True)
    os.chown(runtime, 0, GROUP)
    runtime.chmod(int(service["RuntimeDirectoryMode"][0], 8))
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(root / "notify"))
    notify.setblocking(False)
    proc = await asyncio.create_subprocess_exec(
        *_no_capabilities(f"--regid={GROUP}", "--clear-groups"),
        *_proxy_command(root),
        env={**os.environ, "NODE_NAME": node, "NOTIFY_SOCKET": str(root / "notify")},
        umask=int(service["UMask"][0], 8),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        ready = asyncio.ensure_future(asyncio.get_running_loop().sock_recv(notify, 64))
        exited = asyncio.ensure_future(proc.wait())
        await asyncio.wait((ready, exited), timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
        exited.cancel()
        assert proc.stderr is not None
        assert ready.done(), (await proc.stderr.read()).decode() if proc.returncode else "late"
        assert ready.result() == b"READY=1"
        yield proc
    finally:
        notify.close()
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


@pytest.fixture
async def proxy(
    root: Path, api: SimApiServer, kubelet: Kubelet
) -> AsyncIterator[asyncio.subprocess.Process]:
    async with started_proxy(root, NODE) as proc:
        yield proc


@pytest.fixture
async def kubelet(root: Path, api: SimApiServer) -> Kubelet:
    kubelet = Kubelet(api, NODE, root)
    kubelet.moved()
    return kubelet


async def start_agent(
    root: Path, agents: list[AgentProcess], node: str = NODE, **more: str
) -> AgentProcess:
    """drain-guard.service on the scratch host: the agent's user and group, no capability, no
    credential, the unit's socket and the settings file's shield setting (``more``: other
    settings of that file)."""
    settings = env_file(ENV_FILE.read_text())
    assert "KUBECONFIG" not in settings
    env = {"DRAIN_GUARD_SHIELD_BUILD_PODS": settings["DRAIN_GUARD_SHIELD_BUILD_PODS"], **more}
    env["DRAIN_GUARD_API_SOCKET"] = agent_socket(root)
    host = HostFS(root / "host", IMAGE_A)
    agent = await spawn_agent(
        node,
        None,
        host,
        "--release-on-exit",
        env=env,
        program=[*AS_AGENT, sys.executable, "-m", "drain_guard"],
    )
    agents.append(agent)
    await agent.wait_synced(WAIT)
    return agent


async def as_agent(
    root: Path, requests: list[tuple[str, str, str, object]]
) -> list[tuple[int, str]]:
    """Each request sent to the proxy's socket by a process of the agent's user, as a
    compromised agent would: (status, message) of each answer."""
    script = """
import http.client, json, socket, sys
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sys.argv[1])
for line in sys.stdin:
    method, path, ctype, body = json.loads(line)
    conn = Unix("localhost")
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Content-Type": ctype, "Authorization": "Bearer stolen",
                          "Impersonate-User": "system:admin"})
    answer = conn.getresponse()
    text = answer.read()
    print(json.dumps([answer.status, json.loads(text).get("message", "") if text else ""]))
"""
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    # A process of its own, and the simulator (in this process) answering meanwhile.
    client = await asyncio.create_subprocess_exec(
        *AS_AGENT,
        sys.executable,
        "-c",
        script,
        agent_socket(root),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(client.communicate(lines.encode()), WAIT * 4)
    assert client.returncode == 0
    answers = [json.loads(line) for line in out.decode().splitlines()]
    return [(int(status), str(message)) for status, message in answers]


def reads_as_agent(root: Path, path: Path) -> bool:
    cat = [*AS_AGENT, "cat", str(path)]
    return subprocess.run(cat, capture_output=True, timeout=30, check=False).returncode == 0


MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
DRAIN = protocol.annotation_path(protocol.DESIRED_DRAIN)
Request = tuple[str, str, str, object]


def forged_pool_events(node: str, other: str) -> list[dict[str, Any]]:
    """Pool Events as the agent of ``node`` writes them, but for one thing each: related to
    another Node, related to nothing, of another reason, about another kind."""
    own: dict[str, Any] = {
        "metadata": {"name": f"{node}.2"},
        "involvedObject": {
            "apiVersion": protocol.POOL_API_VERSION,
            "kind": protocol.POOL_KIND,
            "name": "worker",
        },
        "related": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": protocol.POOL_ROLLOUT_HELD,
        "source": {"component": "drain-guard", "host": node},
        "reportingComponent": "drain-guard",
        "reportingInstance": f"drain-guard-{node}",
    }
    unrelated = {k: v for k, v in own.items() if k != "related"}
    machineconfig = own["involvedObject"] | {"kind": "MachineConfig", "name": "rendered-x"}
    return [
        own | {"related": own["related"] | {"name": other}},
        unrelated,
        own | {"reason": "Degraded"},
        own | {"involvedObject": machineconfig},
    ]


def attempts(node: str = NODE, other: str = OTHER) -> list[Request]:
    """What a compromised agent of ``node`` would try with the node's identity."""
    return [
        (
            "PATCH",
            f"/api/v1/nodes/{other}",
            JSON_PATCH,
            [{"op": "add", "path": DRAIN, "value": "x"}],
        ),
        ("PATCH", f"/api/v1/nodes/{other}", MERGE, {"metadata": {"annotations": {"a": "b"}}}),
        ("PATCH", f"/api/v1/nodes/{node}", MERGE, {"spec": {"taints": []}}),
        (
            "PATCH",
            f"/api/v1/nodes/{node}",
            JSON_PATCH,
            [{"op": "add", "path": "/spec/unschedulable", "value": True}],
        ),
        (
            "PATCH",
            f"/api/v1/nodes/{node}",
            JSON_PATCH,
            [{"op": "add", "path": "/metadata/labels/x", "value": "y"}],
        ),
        (
            "PATCH",
            f"/api/v1/nodes/{node}",
            JSON_PATCH,
            [
                {
                    "op": "add",
                    "path": protocol.annotation_path(protocol.LAST_APPLIED_DRAIN),
                    "value": f"drain-{CONFIG_B}",
                }
            ],
        ),
        # desiredDrain only one step from the value the patch tests: never a new drain request.
        (
            "PATCH",
            f"/api/v1/nodes/{node}",
            JSON_PATCH,
            [{"op": "add", "path": DRAIN, "value": "drain-forged"}],
        ),
        (
            "PATCH",
            f"/api/v1/nodes/{node}",
            JSON_PATCH,
            [
                {"op": "test", "path": DRAIN, "value": "uncordon-x"},
                {"op": "add", "path": DRAIN, "value": "hold-uncordon-x"},
            ],
        ),
        ("PATCH", f"/api/v1/nodes/{node}/status", MERGE, {"status": {"conditions": []}}),
        (
            "POST",
            f"/api/v1/namespaces/{MCO_NS}/serviceaccounts/machine-os-builder/token",
            "application/json",
            {"spec": {"audiences": []}},
        ),
        ("GET", f"/api/v1/namespaces/{MCO_NS}/secrets", "application/json", None),
        ("GET", "/api/v1/pods", "application/json", None),
        (
            "POST",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            "application/json",
            {"spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet"}},
        ),
        ("POST", f"/api/v1/namespaces/{MCO_NS}/pods/build-pod/eviction", "application/json", {}),
        (
            "POST",
            f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events",
            "application/json",
            {
                "metadata": {"name": f"{other}.1"},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": other},
                "reason": "DrainHeld",
                "source": {"component": "drain-guard", "host": other},
            },
        ),
        *(
            ("POST", f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events", "application/json", body)
            for body in forged_pool_events(node, other)
        ),
        ("DELETE", f"/api/v1/nodes/{node}", "application/json", None),
    ]


async def test_the_agent_holds_and_releases_through_the_proxy_and_can_do_nothing_else(
    root: Path,
    api: SimApiServer,
    kubelet: Kubelet,
    proxy: asyncio.subprocess.Process,
    agents: list[AgentProcess],
) -> None:
    # The agent's user reads no credential: the kubelet's files are 0600 root.
    assert not reads_as_agent(root, kubelet.kubeconfig)
    assert not reads_as_agent(root, kubelet.current)
    agent = await start_agent(root, agents)
    doc = await confinement(agent)
    assert doc["confined"] is True, doc
    assert "drain-guard node-proxy: an agent may change only the Node it runs on" in doc["detail"]

    rv = api.resource_version
    add_build_pod(api)
    mcd_request(api, f"drain-{CONFIG_B}", **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)
    api.delete("pods", "build-pod", MCO_NS)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == f"drain-{CONFIG_B}")
    for reason in ("DrainReleased", "PoolRolloutReleased"):

        def posted(w: WriteRecord, reason: str = reason) -> bool:
            return w.resource == "events" and w.obj.get("reason") == reason

        await api.wait_for_write(posted, since=rv)
    writes = [w for w in api.write_log if w.rv > rv and w.user not in TEST_USERS]
    assert {(w.user, w.resource) for w in writes} == {(NODE_USER, "nodes"), (NODE_USER, "events")}
    for w in writes:
        if w.resource == "events":
            involved = w.obj["involvedObject"]
            assert w.namespace == EVENTS_NAMESPACE, w
            if involved["kind"] == protocol.POOL_KIND:
                # Its pool's Events, related to its Node; the node may not read pools: no uid.
                assert (involved["name"], w.obj["related"]["name"]) == ("worker", NODE), w
                assert "uid" not in involved, w
            else:
                assert involved["name"] == NODE, w
    # Every request the API server saw from this node came through the proxy as the node.
    assert {r[1] for r in api.request_log if r[1] not in TEST_USERS} == {NODE_USER}

    sent = len(api.request_log)
    tried = attempts()
    answers = await as_agent(root, tried)
    assert len(answers) == len(tried)
    for attempt, (status, message) in zip(tried, answers, strict=True):
        assert status == 403, (attempt, status, message)
        assert message.startswith("drain-guard node-proxy: "), (attempt, message)
    assert api.request_log[sent:] == []  # none of them reached the API server
    # Its own Node's hold, in the protocol's shape, does go through (the API server's 422:
    # the test fails, desiredDrain is no longer held).
    (answer,) = await as_agent(
        root,
        [
            (
                "PATCH",
                f"/api/v1/nodes/{NODE}",
                JSON_PATCH,
                [
                    {"op": "test", "path": DRAIN, "value": HELD},
                    {"op": "add", "path": DRAIN, "value": f"drain-{CONFIG_B}"},
                ],
            )
        ],
    )
    assert answer[0] == 422, answer
    assert [r[1:5] for r in api.request_log[sent:]] == [
        (NODE_USER, "patch", "nodes", f"/api/v1/nodes/{NODE}")
    ]
    assert await agent.stop() == 0


async def test_through_the_proxy_a_same_image_drain_waits_briefly_then_goes(
    root: Path,
    api: SimApiServer,
    kubelet: Kubelet,
    proxy: asyncio.subprocess.Process,
    agents: list[AgentProcess],
) -> None:
    """The systemd agent reads no pool (the node's identity may not, and the proxy passes on
    nothing more): it cannot tell whether a build will replace a same-image target, so it holds
    the drain for --noop-expect-within, then lets it go saying why; never to --max-hold (45
    minutes here, the settings file's)."""
    agent = await start_agent(root, agents, DRAIN_GUARD_NOOP_EXPECT_WITHIN="2s")
    rv = api.resource_version
    mcd_request(
        api,
        f"drain-{CONFIG_B}",
        **{protocol.DESIRED_CONFIG: CONFIG_B, protocol.DESIRED_IMAGE: IMAGE_A},
    )
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)
    assert node_annotations(api)[protocol.HOLD_REASONS] == "noop-image"
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == f"drain-{CONFIG_B}")
    released = await api.wait_for_write(
        lambda w: w.resource == "events" and w.obj.get("reason") == "DrainReleased", since=rv
    )
    message = str(released.obj.get("message"))
    assert "(outcome safe)" in message, message
    assert "reads none of MCO's pools and builds here" in message, message
    _, body = await agent.http("/status")
    image = json.loads(body)["image"]
    assert image["replacement"] == "none", image


async def test_only_the_agents_user_is_served(
    root: Path, api: SimApiServer, kubelet: Kubelet, proxy: asyncio.subprocess.Process
) -> None:
    """Another local user (here root, whose group may reach the socket) gets a 403: the
    proxy checks the peer's UID on each request, not only the socket's file mode."""
    assert kubelet.kubeconfig.exists()
    reader, writer = await asyncio.open_unix_connection(agent_socket(root))
    writer.write(
        f"GET /api/v1/nodes/{NODE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403"), answer
    assert json.loads(body)["message"] == "drain-guard node-proxy: UID 0 is not served"
    assert [r for r in api.request_log if r[1] not in TEST_USERS] == []


async def test_the_proxy_follows_the_kubelets_rotation_and_the_hold_is_kept(
    root: Path,
    api: SimApiServer,
    kubelet: Kubelet,
    proxy: asyncio.subprocess.Process,
    agents: list[AgentProcess],
) -> None:
    """Issue 14, now in the proxy: the kubelet rotates its certificate, the API server refuses
    the old one (401); the proxy reads the kubelet's kubeconfig and key again and the agent,
    never told, keeps its hold and releases it, neither restarted."""
    agent = await start_agent(root, agents)
    add_build_pod(api)
    mcd_request(api, f"drain-{CONFIG_B}", **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)

    old = kubelet.pem
    kubelet.rotate()
    api.refuse_certificate(old)  # expired, for the API server
    rv = api.resource_version
    api.cut_watches(user=NODE_USER)
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == HELD
    api.delete("pods", "build-pod", MCO_NS)
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == f"drain-{CONFIG_B}")
    assert {
        (w.user, w.resource) for w in api.write_log if w.rv > rv and w.user not in TEST_USERS
    } == {
        (NODE_USER, "nodes"),
        (NODE_USER, "events"),
    }
    refused = [r for r in api.request_log if r[5] == 401]
    assert refused  # the old certificate was refused, and the proxy went on with the new
    assert agent.proc.returncode is None
    assert proxy.returncode is None
