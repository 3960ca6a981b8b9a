"""The DaemonSet as shipped, on the real node: ``kubectl apply -k`` of the kubernetes overlay
(with the image set as docs/install.md says, to the one ``make image`` built), the pod
started by the real kubelet from the image, Ready through its probes, the agent holding and
releasing with the token the kubelet mounted, across a SIGKILL and a rolling update;
``kubectl delete -k`` alone, whose leftovers the uninstall's ``drain-guard release --all``
releases, and docs/install.md's uninstall block as written (the DaemonSet first) releasing;
and the seed: the shield's budget refusing a drain's eviction of a real build pod, which
without drain-guard is evicted and stopped. The tests run in this order, the uninstall last
but one.

The Node is made to look as MCO's daemon keeps a worker (its role label, its config
annotations); a build pod is a real pod on the node (the pause image under MCO's build
label), so the agent holds for the reason it holds for on OpenShift. Each test asks for a
drain to a config of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.node import Node
from tests.deploy.tools import REPO
from tests.helpers import IMAGE_A, IMAGE_B, require_or_skip
from tests.node.helpers import (
    AGENT_NS,
    ARCHIVE,
    DESIRED_DRAIN,
    HELD_DRAIN,
    MCO_NS,
    OVERLAY,
    USER_DIR,
    as_mco_worker,
    build_pod,
    container_pids,
    evict,
    get,
    kubectl,
    request_drain,
    wait_held,
    wait_jsonpath,
    wait_ready,
    wait_released,
    wait_rollout,
)


@pytest.fixture(scope="module")
def install(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The kubernetes overlay applied with ``kubectl apply -k``, its pod Ready; the
    kustomization directory, for ``kubectl delete -k``."""
    if not ARCHIVE.exists():
        require_or_skip(f"{ARCHIVE.relative_to(REPO)} is not built (make image)")
    as_mco_worker(node, node.name)
    # docs/install.md's name for the user's kustomization, which its uninstall block names.
    directory = node.install(OVERLAY, ARCHIVE, tmp_path_factory.mktemp("install") / USER_DIR)
    yield directory
    kubectl(node, "delete", "-k", str(directory), "--ignore-not-found", "--wait=true")


#: This checkout's ``drain-guard`` (the venv's), as a user's PATH would have it.
DRAIN_GUARD = str(Path(sys.executable).parent / "drain-guard")


def _agent_pod(node: Node) -> dict[str, object]:
    pods = get(node, "pods", AGENT_NS)["items"]
    running = [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") == node.name
    ]
    (pod,) = running
    return dict(pod)


def _build_pod(node: Node, name: str) -> None:
    build_pod(node, name, node.name)


def _request_drain(node: Node) -> str:
    return request_drain(node, node.name)


def _wait_held(node: Node, request: str) -> None:
    wait_held(node, request, node.name)


def _wait_released(node: Node, request: str) -> None:
    wait_released(node, request, node.name)


def _still_held(node: Node, request: str) -> bool:
    annotations = get(node, f"node/{node.name}")["metadata"]["annotations"]
    return bool(
        annotations.get(HELD_DRAIN) == request
        and annotations.get(DESIRED_DRAIN) == f"hold-{request}"
    )


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_the_agent_pod_is_ready_through_the_kubelets_probes(node: Node, install: Path) -> None:
    """The real kubelet ran the init container (which found no ostree here and said so) and
    the agent, as the pod spec says: UID 65532, read-only root, no capability; Ready means its
    readiness probe, on the named port, passed."""
    pod = _agent_pod(node)
    status = pod["status"]
    assert isinstance(status, dict)
    (init,) = status["initContainerStatuses"]
    assert init["state"]["terminated"]["exitCode"] == 0
    init_log = kubectl(node, "logs", "-n", AGENT_NS, str(_name(pod)), "-c", "booted-origin")
    assert "the booted image is unknown" in init_log
    (agent,) = status["containerStatuses"]
    assert agent["ready"] is True
    (pid,) = container_pids(dict(pod), "drain-guard")
    process = _proc_status(pid)
    assert process["Uid"].split() == ["65532"] * 4
    assert process["Gid"].split() == ["65532"] * 4
    assert int(process["CapEff"], 16) == 0
    assert process["NoNewPrivs"].strip() == "1"
    (root,) = (
        line.split()
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        if line.split()[4] == "/"
    )
    assert "ro" in root[5].split(","), root
    log = kubectl(node, "logs", "-n", AGENT_NS, str(_name(pod)), "-c", "drain-guard")
    settings = next(json.loads(line) for line in log.splitlines() if '"settings"' in line)
    assert settings["apiServer"] == "https://10.0.0.1:443"  # the kubernetes Service


def _name(pod: dict[str, object]) -> str:
    metadata = pod["metadata"]
    assert isinstance(metadata, dict)
    return str(metadata["name"])


def test_a_hold_outlives_a_sigkilled_agent_and_is_released_with_its_token(
    node: Node, install: Path
) -> None:
    """A build pod on the node: the agent (its only credential the token the kubelet
    mounted) holds MCO's drain request; SIGKILLed, the kubelet restarts it and it resumes the
    hold; the build pod gone, it releases."""
    _build_pod(node, "build-sigkill")
    request = _request_drain(node)
    _wait_held(node, request)
    pod = _agent_pod(node)
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]  # type: ignore[index]
    for pid in container_pids(dict(pod), "drain-guard"):
        os.kill(pid, signal.SIGKILL)
    wait_jsonpath(
        node,
        f"pod/{_name(pod)}",
        ".status.containerStatuses[0].restartCount",
        str(restarts + 1),
        AGENT_NS,
    )
    wait_ready(node, _name(pod), AGENT_NS)
    log = kubectl(node, "logs", "-n", AGENT_NS, _name(pod), "-c", "drain-guard")
    assert "resuming hold found on the node" in log
    assert _still_held(node, request)
    kubectl(node, "delete", "-n", MCO_NS, "pod", "build-sigkill", "--wait=true")
    _wait_released(node, request)


def test_a_rolling_update_keeps_the_hold(node: Node, install: Path) -> None:
    """``kubectl rollout restart``: the DaemonSet replaces the pod (one node, maxUnavailable
    1), the new agent resumes the hold, and releases it when the build pod goes."""
    _build_pod(node, "build-rollout")
    request = _request_drain(node)
    _wait_held(node, request)
    before = _name(_agent_pod(node))
    kubectl(node, "rollout", "restart", "-n", AGENT_NS, "ds/drain-guard")
    wait_rollout(node, "ds/drain-guard", AGENT_NS)
    after = _agent_pod(node)
    assert _name(after) != before
    log = kubectl(node, "logs", "-n", AGENT_NS, _name(after), "-c", "drain-guard")
    assert "resuming hold found on the node" in log
    assert _still_held(node, request)
    kubectl(node, "delete", "-n", MCO_NS, "pod", "build-rollout", "--wait=true")
    _wait_released(node, request)


def test_the_seed_the_shields_budget_refuses_the_build_pods_eviction(
    node: Node, install: Path
) -> None:
    """The seed's drain, with drain-guard: the agent keeps a budget on the running build pod,
    and the real eviction API refuses the drain's eviction of it (429); the pod runs on."""
    _build_pod(node, "build-seed")
    wait_jsonpath(node, "pdb/drain-guard-build-seed", ".status.disruptionsAllowed", "0", MCO_NS)
    wait_jsonpath(node, "pdb/drain-guard-build-seed", ".status.expectedPods", "1", MCO_NS)
    refused = evict(node, "build-seed", MCO_NS)
    assert refused.returncode != 0
    assert "TooManyRequests" in refused.stderr or "429" in refused.stderr, refused.stderr
    assert "disruption budget" in refused.stderr, refused.stderr
    pod = get(node, "pod/build-seed", MCO_NS)
    assert pod["status"]["phase"] == "Running"
    assert "deletionTimestamp" not in pod["metadata"]
    assert container_pids(pod, "build")
    kubectl(node, "delete", "-n", MCO_NS, "pod", "build-seed", "--wait=true")


@pytest.fixture
def rhcos_sysroot() -> Iterator[HostFS]:
    """/sysroot of this host laid out as RHCOS's after an update (two deployments, the boot
    link to the booted one), made for the test and removed after; a host that has its own
    /sysroot (an ostree host) is left alone."""
    sysroot = Path("/sysroot")
    if os.path.lexists(sysroot):
        require_or_skip("this host has a /sysroot of its own")
    host = HostFS(sysroot, IMAGE_A)
    try:
        host.reboot_into(IMAGE_B)
        yield host
    finally:
        shutil.rmtree(sysroot)


def test_the_openshift_style_mount_copies_the_booted_origin(
    node: Node, install: Path, rhcos_sysroot: HostFS, tmp_path: Path
) -> None:
    """The base's (the OpenShift overlays') host mount on the real kubelet: /sysroot/ostree
    (hostPath type Directory) read-only in booted-origin, which runs as 65532 and copies the
    booted deployment's origin, and nothing else, into the pod's in-memory emptyDir. The one
    change to the shipped pod: this kernel has no ostree= argument, so booted-origin is given
    the RHCOS command line as a file inside the mount (--cmdline-file)."""
    base = yaml.safe_load((REPO / "daemonset" / "base" / "daemonset.yaml").read_text())
    spec = base["spec"]["template"]["spec"]
    (volume,) = (v for v in spec["volumes"] if "hostPath" in v)
    (init,) = spec["initContainers"]
    cmdline = rhcos_sysroot.root / "ostree" / "drain-guard-test-cmdline"
    shutil.copy(rhcos_sysroot.cmdline_file, cmdline)
    patch = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "drain-guard", "namespace": AGENT_NS},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [
                        {
                            "name": init["name"],
                            "args": [*init["args"], "--cmdline-file=/host/ostree/" + cmdline.name],
                            "volumeMounts": init["volumeMounts"],
                        }
                    ],
                    "volumes": [volume],
                }
            }
        },
    }
    variant = tmp_path / "variant"
    variant.mkdir()
    (variant / "kustomization.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(install, variant)],
                "patches": [{"patch": json.dumps(patch)}],
            }
        )
    )
    try:
        kubectl(node, "apply", "-k", str(variant))
        wait_rollout(node, "ds/drain-guard", AGENT_NS)
        pod = _agent_pod(node)
        log = kubectl(node, "logs", "-n", AGENT_NS, _name(pod), "-c", "booted-origin")
        assert log.startswith("drain-guard copy-booted-origin: copied /ostree/boot."), log
        uid = pod["metadata"]["uid"]  # type: ignore[index]
        copy = node.workdir / "kubelet" / "pods" / uid / "volumes" / "kubernetes.io~empty-dir"
        copy /= "booted-origin"
        files = [p.relative_to(copy) for p in copy.rglob("*") if p.is_file()]
        assert files == [rhcos_sysroot.origin_file().relative_to(rhcos_sysroot.root)]
        assert IMAGE_B in (copy / files[0]).read_text()
    finally:
        kubectl(node, "apply", "-k", str(install))
        wait_rollout(node, "ds/drain-guard", AGENT_NS)
    assert not [v for v in _volumes(node) if "hostPath" in v]


def _volumes(node: Node) -> list[dict[str, object]]:
    daemonset = get(node, "ds/drain-guard", AGENT_NS)
    volumes: list[dict[str, object]] = daemonset["spec"]["template"]["spec"]["volumes"]
    return volumes


def _uninstall_block() -> list[str]:
    """docs/install.md's uninstall, section 6: its first shell block's commands, in order."""
    text = (REPO / "docs" / "install.md").read_text()
    section = text[text.index("## 6. Uninstall") :]
    opened = section.index("```sh\n") + len("```sh\n")
    block = section[opened : section.index("```", opened)]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def _as_written(node: Node, command: str, cwd: Path) -> str:
    """One command of the docs as a user runs it, in the directory that holds their
    kustomization, with ``kubectl`` for ``oc``, this checkout's ``drain-guard`` and the
    cluster admin's kubeconfig; its output (it must succeed)."""
    tools = cwd / "bin"
    tools.mkdir(exist_ok=True)
    for name, target in (("oc", shutil.which("kubectl")), ("drain-guard", DRAIN_GUARD)):
        if target and not (tools / name).exists():
            (tools / name).symlink_to(target)
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={
            **os.environ,
            "PATH": f"{tools}:{os.environ['PATH']}",
            "KUBECONFIG": str(node.plane.admin_kubeconfig),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{command}: {done.stderr}"
    return done.stdout


def _released_by_the_agent(node: Node, request: str) -> bool:
    """The agent's own Event: it released ``request`` with outcome uninstall."""
    events = get(node, "events", "default")["items"]
    mine = [e["message"] for e in events if e.get("reportingComponent") == "drain-guard"]
    return any(
        f"Released drain request {request} " in m and "(outcome uninstall)" in m for m in mine
    )


def test_delete_k_alone_leaves_no_hold_after_the_blocks_release_all(
    node: Node, install: Path
) -> None:
    """``kubectl delete -k`` alone, while holding: it deletes the agents' account and RBAC
    with the DaemonSet, so the agent's own release is refused (docs/install.md, "Why not");
    the uninstall block's ``drain-guard release --all`` releases whatever it left, in the
    admin's name. Then the overlay is installed again for the next test."""
    build_pod(node, "build-delete-k", node.name)
    request = _request_drain(node)
    _wait_held(node, request)
    kubectl(node, "delete", "-k", str(install), "--wait=true")
    kubectl(node, "wait", "--for=delete", f"namespace/{AGENT_NS}", "--timeout=120s")
    # Whatever the agent managed (its pod is gone with the namespace), nothing more will.
    (release_all,) = (c for c in _uninstall_block() if c.startswith("drain-guard release"))
    out = _as_written(node, release_all, install.parent)
    annotations = get(node, f"node/{node.name}")["metadata"]["annotations"]
    assert annotations[DESIRED_DRAIN] == request, out
    assert HELD_DRAIN not in annotations
    if not _released_by_the_agent(node, request):  # its account went first, as it does
        assert f"node {node.name}: released {request} (outcome manual" in out, out
    kubectl(node, "wait", "--for=delete", f"namespace/{MCO_NS}", "--timeout=120s")
    node.install(OVERLAY, ARCHIVE, install)


def test_the_documented_uninstall_releases_the_hold(node: Node, install: Path) -> None:
    """docs/install.md's uninstall block as written, while holding (the build pod still
    there): the DaemonSet deleted first, its pod gone, the agent releases the drain itself
    (outcome uninstall, its Event says) before the block's ``release --all``, which finds
    nothing; ``kubectl delete -k`` then removes the rest."""
    build_pod(node, "build-uninstall", node.name)
    request = _request_drain(node)
    _wait_held(node, request)
    commands = _uninstall_block()
    assert [c.split()[:3] for c in commands] == [
        ["oc", "-n", AGENT_NS],
        ["oc", "-n", AGENT_NS],
        ["oc", "-n", AGENT_NS],
        ["drain-guard", "release", "--all"],
        ["oc", "delete", "-k"],
    ], commands
    for command in commands[:3]:
        _as_written(node, command, install.parent)
    _wait_released(node, request)
    assert HELD_DRAIN not in get(node, f"node/{node.name}")["metadata"]["annotations"]
    assert _released_by_the_agent(node, request)
    out = _as_written(node, commands[3], install.parent)
    assert out.startswith("nothing to release:"), out
    _as_written(node, commands[4], install.parent)
    assert AGENT_NS not in kubectl(node, "get", "namespaces", "-o", "name")
    kubectl(node, "delete", "-n", MCO_NS, "pod", "build-uninstall", "--ignore-not-found")


def test_the_seed_without_drain_guard_the_build_pod_is_evicted_and_terminated(
    node: Node, install: Path
) -> None:
    """The same drain with drain-guard uninstalled: no budget, the eviction is accepted and
    the kubelet stops the build pod's container (the build fails: the seed's bug)."""
    kubectl(node, "create", "namespace", MCO_NS)
    _build_pod(node, "build-unguarded")
    pod = get(node, "pod/build-unguarded", MCO_NS)
    (pid,) = container_pids(pod, "build")
    evicted = evict(node, "build-unguarded", MCO_NS)
    assert evicted.returncode == 0, evicted.stderr
    kubectl(node, "wait", "-n", MCO_NS, "--for=delete", "pod/build-unguarded", "--timeout=120s")
    assert not Path(f"/proc/{pid}").exists()
    kubectl(node, "delete", "namespace", MCO_NS, "--wait=true")
