"""The agent as the openshift-4.15 overlay runs it: Node writes and Events with the node's own
identity, the service account read-only, the shield off; holds and releases work, and the
self-check reports the agent confined. (The systemd install holds no node identity in the
agent any more: tests/integration/test_node_proxy.py.)

The simulator authorizes the service account by the RBAC the overlay renders (``kubectl
kustomize``), and the node identity by the Node authorizer's rules and NodeRestriction
(``drain_guard_sim.nodeauth``). It does not evaluate ValidatingAdmissionPolicies, which the
4.15 overlay has none of anyway. For the kubelet's rotation it serves TLS and authenticates
the node by its client certificate, as kube-apiserver does the kubelet's.
"""

from __future__ import annotations

import asyncio
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
from drain_guard_sim.tls import ServingCert
from tests.deploy.rbac import allows, granted
from tests.deploy.tools import (
    Obj,
    agent_container,
    container,
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
    reap,
    spawn,
    wait_annotation,
)
from tests.integration.kubelet import Kubelet

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


def _moved(config: Any, root: Path) -> Any:
    """A kubeconfig with its users' certificate and key paths moved under ``root``."""
    for entry in config["users"]:
        user = entry["user"]
        for key in ("client-certificate", "client-key"):
            user[key] = under(root, user[key])
    return config


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
