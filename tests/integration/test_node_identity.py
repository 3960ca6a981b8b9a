"""The agent as the openshift-4.15 overlay and the systemd unit run it: Node writes and Events
with the node's own identity, the service account read-only (4.15/4.16) or absent (systemd),
the shield off; holds and releases work, and the self-check reports the agent confined.

The simulator authorizes the service account by the RBAC the overlay renders (``kubectl
kustomize``), and the node identity by the Node authorizer's rules and NodeRestriction
(``drain_guard_sim.nodeauth``). It does not evaluate ValidatingAdmissionPolicies, which the
4.15 overlay has none of anyway. For the systemd install's rotation it serves TLS and
authenticates the node by its client certificate, as kube-apiserver does the kubelet's.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from drain_guard import protocol
from drain_guard.permissions import EVENTS_NAMESPACE
from drain_guard_sim.agentproc import AgentProcess
from drain_guard_sim.apiserver import SimApiServer
from drain_guard_sim.cluster import worker_node
from drain_guard_sim.hostfs import HostFS
from drain_guard_sim.nodeauth import NODES_GROUP
from drain_guard_sim.tls import ServingCert
from tests.deploy.rbac import allows, granted
from tests.deploy.tools import (
    ENV_FILE,
    KUBELET_CLIENT,
    REPO,
    Obj,
    agent_container,
    container,
    copier_commands,
    env_file,
    kubelet_kubeconfig,
    render,
    under,
)
from tests.helpers import (
    AGENT_USER,
    CONFIG_A,
    CONFIG_B,
    IMAGE_A,
    IMAGE_B,
    MCO_NS,
    NODE,
    WAIT,
    StartAgent,
    add_build_pod,
    add_own_daemonset,
    confinement,
    mcd_request,
    metric,
    node_annotations,
    reap,
    spawn,
    wait_annotation,
)

NODE_USER = f"system:node:{NODE}"
OTHER = "worker-1"
#: The flags of the overlay's agent that make its identities and its shield (the others,
#: --host-root, --listen, --log-format, are the test harness's).
IDENTITY_FLAGS = ("--node-kubeconfig", "--shield-build-pods", "--daemonset")


def overlay_flags(objects: list[Obj], node_kubeconfig: Path) -> list[str]:
    """The 4.15 overlay's identity flags, with the simulator's node kubeconfig in place of
    the kubelet's file the DaemonSet mounts."""
    flags = []
    for arg in agent_container(objects)["args"]:
        name, _, value = arg.partition("=")
        if name not in IDENTITY_FLAGS:
            continue
        if name == "--node-kubeconfig":
            assert value == "/var/lib/kubelet/kubeconfig"
            value = str(node_kubeconfig)
        flags.append(f"{name}={value.replace('$(POD_NAMESPACE)', 'drain-guard')}")
    assert {f.partition("=")[0] for f in flags} == set(IDENTITY_FLAGS)
    return flags


async def _hold_and_release(api: SimApiServer, agent: AgentProcess) -> int:
    """A build pod blocks a drain: held; the pod goes: released. Returns the rv before."""
    rv = api.resource_version
    add_build_pod(api)
    mcd_request(api, f"drain-{CONFIG_B}", **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == f"hold-drain-{CONFIG_B}")
    api.delete("pods", "build-pod", "openshift-machine-config-operator")
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == f"drain-{CONFIG_B}")
    await api.wait_for_write(
        lambda w: w.resource == "events" and w.obj.get("reason") == "DrainReleased", since=rv
    )
    return rv


def _writers(api: SimApiServer, since: int) -> set[tuple[str, str]]:
    """What the agent's identities wrote (the node's and its account's), by resource."""
    agent = (NODE_USER, AGENT_USER)
    return {(w.user, w.resource) for w in api.write_log if w.rv > since and w.user in agent}


def _own_events_only(api: SimApiServer, since: int) -> None:
    events = [w for w in api.writes("events") if w.rv > since]
    assert events
    for w in events:
        assert (w.namespace, w.obj["involvedObject"]["name"]) == (EVENTS_NAMESPACE, NODE), w


async def test_the_4_15_overlay_writes_as_the_node_and_reads_as_its_account(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    objects = render("openshift-4.15")
    api.restrict(AGENT_USER, partial(allows, granted(objects)))
    api.create("nodes", {"metadata": {"name": OTHER}})
    api.add_node_user(NODE)
    node_kubeconfig = api.kubeconfig(NODE_USER, tmp_path / "kubelet-kubeconfig")
    add_own_daemonset(api)
    flags = overlay_flags(objects, node_kubeconfig)
    agent = await start_agent(*flags, "--pod-name", "drain-guard-x7k2p")

    doc = await confinement(agent)
    assert doc["confined"] is True, doc
    assert f'node "{NODE}" is not allowed to modify node "{OTHER}"' in doc["detail"]
    assert "the service account's was denied too" in doc["detail"]
    assert await metric(agent, "drain_guard_api_errors_total", operation="node_patch") == 0

    rv = await _hold_and_release(api, agent)
    # Every write is the node's: its Node and its Events; none by the account, no budget.
    assert _writers(api, rv) == {(NODE_USER, "nodes"), (NODE_USER, "events")}
    _own_events_only(api, rv)
    # The account was refused nothing it needed: it only read.
    refused = [r for r in api.request_log if r[1] == AGENT_USER and r[5] == 403]
    assert refused == [r for r in refused if r[2] == "patch" and r[3] == "nodes"], refused


async def test_a_service_account_that_may_patch_nodes_is_reported_in_node_identity_mode(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    """Node writes go with the node's identity, but the account kept nodes patch (an old role
    left behind): an attacker in the pod could use its token on every Node. Reported as not
    confined."""
    api.create("nodes", {"metadata": {"name": OTHER}})
    api.add_node_user(NODE)
    kubeconfig = api.kubeconfig(NODE_USER, tmp_path / "kubelet-kubeconfig")
    agent = await start_agent("--node-kubeconfig", str(kubeconfig))
    doc = await confinement(agent)
    assert doc["confined"] is False, doc
    assert f"the service account may write Node {OTHER} too" in doc["detail"]


async def test_the_systemd_unit_runs_with_the_node_identity_alone(
    api: SimApiServer, host: HostFS, tmp_path: Path
) -> None:
    """The unit's settings (systemd/drain-guard.env: shield off; --release-on-exit) and the
    node's kubeconfig as its only identity: it reads its Node and pods, holds, releases,
    writes its Events, is confined, and releases on stop."""
    api.create("nodes", {"metadata": {"name": OTHER}})
    api.add_node_user(NODE)
    kubeconfig = api.kubeconfig(NODE_USER, tmp_path / "kubeconfig")
    env = {k: v for k, v in env_file(ENV_FILE.read_text()).items() if k.endswith("BUILD_PODS")}
    assert env == {"DRAIN_GUARD_SHIELD_BUILD_PODS": "false"}
    started: list[AgentProcess] = []
    try:
        agent = await spawn(NODE, kubeconfig, host, "--release-on-exit", started=started, env=env)
        doc = await confinement(agent)
        assert doc["confined"] is True, doc
        assert "service account" not in doc["detail"]  # it has none
        rv = await _hold_and_release(api, agent)
        assert _writers(api, rv) == {(NODE_USER, "nodes"), (NODE_USER, "events")}
        _own_events_only(api, rv)
        users = {r[1] for r in api.request_log if r[1] != "admin"}
        assert users == {NODE_USER}, users
        assert await agent.stop() == 0
    finally:
        await reap(started)


class Kubelet:
    """``/var/lib/kubelet`` under ``root`` as the kubelet keeps it: its kubeconfig naming the
    current pair by its host path, and in ``pki`` the pairs ``kubelet-client-<n>.pem`` (0600)
    and the ``kubelet-client-current.pem`` link. A rotation is client-go's certificate store's:
    a new file, a ``-updated`` link to it, the ``-current`` link removed and ``-updated``
    renamed over it. (client-go's links name the pair by absolute path, which the pod's copier
    resolves under its --from, tests/unit/test_nodecreds.py; here by its name, which the
    systemd copier's coreutils resolve the same way on a scratch host.)"""

    def __init__(self, api: SimApiServer, node: str, root: Path) -> None:
        self.api, self.node, self.root = api, node, root
        self.current = Path(under(root, KUBELET_CLIENT))
        self.current.parent.mkdir(parents=True)
        self.rotations = 0
        self.pem = self.rotate()
        config = kubelet_kubeconfig(api.url)
        cluster = config["clusters"][0]["cluster"]  # type: ignore[index]
        assert api.tls is not None
        cluster["certificate-authority-data"] = base64.b64encode(
            api.tls.ca_file.read_bytes()
        ).decode()
        self.kubeconfig = root / "var/lib/kubelet/kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    def rotate(self) -> bytes:
        self.rotations += 1
        pem = self.api.client_certificate(NODE_USER, [NODES_GROUP])
        pair = self.current.with_name(f"kubelet-client-{self.rotations}.pem")
        pair.touch(mode=0o600)
        pair.write_bytes(pem)
        updated = self.current.with_name("kubelet-client-updated.pem")
        updated.symlink_to(pair.name)
        self.current.unlink(missing_ok=True)
        updated.rename(self.current)
        self.pem = pem
        return pem


def _moved(config: Any, root: Path) -> Any:
    """A kubeconfig with its users' certificate and key paths moved under ``root``."""
    for entry in config["users"]:
        user = entry["user"]
        for key in ("client-certificate", "client-key"):
            user[key] = under(root, user[key])
    return config


def _copy(root: Path) -> None:
    """drain-guard-credentials.service's commands, as its start (or the .path unit) runs them."""
    for argv in copier_commands(root):
        subprocess.run(argv, check=True, timeout=30)


def _unit_kubeconfig(kubelet: Kubelet, root: Path) -> Path:
    """/etc/drain-guard/kubeconfig, made by docs/install.md's command from the kubelet's."""
    (command,) = [
        line.strip().removesuffix("\\").strip()
        for line in (REPO / "docs" / "install.md").read_text().splitlines()
        if line.startswith("sed ") and KUBELET_CLIENT in line
    ]
    # The command names host paths, as the kubelet's kubeconfig does: what it writes is
    # moved under root after.
    made = subprocess.run(
        [*shlex.split(command), str(kubelet.kubeconfig)], capture_output=True, text=True, check=True
    ).stdout
    path = root / "etc/drain-guard/kubeconfig"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(_moved(yaml.safe_load(made), root)))
    return path


async def test_the_systemd_install_follows_the_kubelets_rotation_without_a_restart(
    host: HostFS, tmp_path: Path
) -> None:
    """Issue 14: the agent as the unit runs it (the node's identity, a client certificate the
    kubelet rotates; --release-on-exit) holds a drain; the kubelet rotates its certificate and
    the API server then refuses the old one (401): the agent reads the copy the credentials
    unit made again and keeps holding, releases when the build ends, all without a restart. A
    refusal the copy cannot cure is reported (drain_guard_credentials_refused)."""
    root = tmp_path / "node"
    async with SimApiServer(tls=ServingCert.generate(tmp_path / "tls")) as api:
        api.create("namespaces", {"metadata": {"name": MCO_NS}})
        api.create("nodes", worker_node(NODE, CONFIG_A, IMAGE_A))
        api.create("nodes", {"metadata": {"name": OTHER}})
        kubelet = Kubelet(api, NODE, root)
        _copy(root)
        kubeconfig = _unit_kubeconfig(kubelet, root)
        assert yaml.safe_load(kubeconfig.read_text())["users"][0]["user"] == {
            "client-certificate": under(root, "/run/drain-guard-credentials/kubelet-client.pem"),
            "client-key": under(root, "/run/drain-guard-credentials/kubelet-client.pem"),
        }
        env = {"DRAIN_GUARD_SHIELD_BUILD_PODS": "false"}
        started: list[AgentProcess] = []
        try:
            agent = await spawn(
                NODE, kubeconfig, host, "--release-on-exit", started=started, env=env
            )
            assert (await confinement(agent))["confined"] is True
            add_build_pod(api)
            mcd_request(api, f"drain-{CONFIG_B}", **{protocol.DESIRED_IMAGE: IMAGE_B})
            held = f"hold-drain-{CONFIG_B}"
            await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == held)

            old = kubelet.pem
            kubelet.rotate()
            _copy(root)  # what drain-guard-credentials.path starts on the change
            api.refuse_certificate(old)  # expired, for the API server
            rv, mark = api.resource_version, len(agent.records)
            api.cut_watches(user=NODE_USER)
            renewed = await agent.wait_log(
                lambda r: "credentials refused (401); read them again" in str(r["message"]),
                start=mark,
            )
            assert renewed["message"].endswith(f"from kubeconfig {kubeconfig}: renewed")
            assert node_annotations(api)[protocol.DESIRED_DRAIN] == held  # still held

            api.delete("pods", "build-pod", MCO_NS)
            await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == f"drain-{CONFIG_B}")
            assert _writers(api, rv) == {(NODE_USER, "nodes"), (NODE_USER, "events")}
            refused = [r for r in api.request_log if r[5] == 401]
            assert refused
            # Only the refused certificate's (logged without a user: none was authenticated).
            assert {r[1] for r in refused} == {"system:anonymous"}
            assert agent.proc.returncode is None  # never restarted
            assert await metric(agent, "drain_guard_credential_reads_total", identity="agent") == 1
            assert await metric(agent, "drain_guard_credentials_refused", identity="agent") == 0

            # The copy is not renewed this time (the copier failed, say): reported.
            api.refuse_certificate(kubelet.pem)
            mark = len(agent.records)
            api.cut_watches(user=NODE_USER)
            error = await agent.wait_log(lambda r: r["level"] == "ERROR", start=mark)
            assert "refuses the agent credentials (401 Unauthorized)" in error["message"]
            assert await metric(agent, "drain_guard_credentials_refused", identity="agent") == 1
        finally:
            await reap(started)


def _pod_copier(objects: list[Obj], name: str, root: Path, volume: Path) -> list[str]:
    """The 4.15 DaemonSet's copier container ``name`` as a command: its own arguments, with
    the scratch host for the host's / it sees (its two read-only kubelet mounts) and
    ``volume`` for the emptyDir it writes."""
    args = container(objects, name)["args"]
    assert args[0] == "copy-node-credentials"
    assert "--to=/node-credentials" in args
    args = [f"--to={volume}" if a == "--to=/node-credentials" else a for a in args]
    return [sys.executable, "-m", "drain_guard", *args, f"--from={root}"]


async def _copied(copier: asyncio.subprocess.Process, name: str) -> None:
    """Until the running copier says it copied ``name`` (a line of its own output)."""
    assert copier.stdout is not None
    while True:
        line = (await asyncio.wait_for(copier.stdout.readline(), WAIT)).decode()
        assert line, f"the copier exited ({await copier.wait()})"
        if line.startswith("drain-guard copy-node-credentials: copied") and name in line:
            return


async def test_the_4_15_pod_copies_the_kubelets_rotating_certificate_for_its_agent(
    host: HostFS, tmp_path: Path
) -> None:
    """The 4.15 pod as the DaemonSet runs it: the init container's copy (the real subcommand,
    its own arguments) is there before the agent starts; the agent, with the overlay's flags
    and RBAC, reads it where its mount puts it, writes as the node, holds; the kubelet rotates
    its certificate and the old one is refused: the copier container renews the copy, the
    agent reads it again on the 401 and releases, no restart, every write the node's."""
    objects = render("openshift-4.15")
    root = tmp_path / "node"
    # The emptyDir, as the agent sees it: mounted at /var/lib/kubelet of its view.
    view = tmp_path / "agent-view"
    volume = view / "var/lib/kubelet"
    volume.mkdir(parents=True)
    started: list[AgentProcess] = []
    async with SimApiServer(tls=ServingCert.generate(tmp_path / "tls")) as api:
        api.create("namespaces", {"metadata": {"name": MCO_NS}})
        api.create("nodes", worker_node(NODE, CONFIG_A, IMAGE_A))
        api.create("nodes", {"metadata": {"name": OTHER}})
        api.restrict(AGENT_USER, partial(allows, granted(objects)))
        add_own_daemonset(api)
        kubelet = Kubelet(api, NODE, root)
        init = _pod_copier(objects, "node-credentials-init", root, volume)
        assert await (await asyncio.create_subprocess_exec(*init)).wait() == 0
        copier = await asyncio.create_subprocess_exec(
            *_pod_copier(objects, "node-credentials", root, volume),
            "--interval=0.05",  # the harness's: the manifest keeps the default 10 s
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            # The copy's kubeconfig names /var/lib/kubelet/...: its paths as the agent's mount
            # table resolves them (tests/deploy/test_daemonset.py checks that table).
            copied = yaml.safe_load((volume / "kubeconfig").read_text())
            node_kubeconfig = tmp_path / "node-kubeconfig-in-the-agents-view"
            node_kubeconfig.write_text(yaml.safe_dump(_moved(copied, view)))
            account = api.kubeconfig(AGENT_USER, tmp_path / "account-kubeconfig")
            flags = overlay_flags(objects, node_kubeconfig)
            agent = await spawn(
                NODE, account, host, *flags, "--pod-name", "drain-guard-x7k2p", started=started
            )
            assert (await confinement(agent))["confined"] is True
            rv = api.resource_version
            add_build_pod(api)
            mcd_request(api, f"drain-{CONFIG_B}", **{protocol.DESIRED_IMAGE: IMAGE_B})
            held = f"hold-drain-{CONFIG_B}"
            await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == held)

            old = kubelet.pem
            kubelet.rotate()
            await _copied(copier, "pki/kubelet-client-current.pem")
            assert (volume / "pki/kubelet-client-current.pem").read_bytes() == kubelet.pem
            api.refuse_certificate(old)  # expired, for the API server
            mark = len(agent.records)
            api.delete("pods", "build-pod", MCO_NS)  # the release: a Node write, as the node
            renewed = await agent.wait_log(
                lambda r: "node credentials refused (401); read them again" in str(r["message"]),
                start=mark,
            )
            assert renewed["message"].endswith(f"from kubeconfig {node_kubeconfig}: renewed")
            await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == f"drain-{CONFIG_B}")
            await api.wait_for_write(
                lambda w: w.resource == "events" and w.obj.get("reason") == "DrainReleased",
                since=rv,
            )
            assert _writers(api, rv) == {(NODE_USER, "nodes"), (NODE_USER, "events")}
            _own_events_only(api, rv)
            assert {r[1] for r in api.request_log if r[5] == 401} == {"system:anonymous"}
            assert agent.proc.returncode is None  # never restarted
            assert await metric(agent, "drain_guard_credential_reads_total", identity="node") == 1
            assert await metric(agent, "drain_guard_credentials_refused", identity="node") == 0
        finally:
            await reap(started)
            copier.terminate()
            assert await copier.wait() == 0
