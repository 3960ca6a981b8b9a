"""What the agent's container can read of the host (issue 21 item 6): the booted deployment's
origin file, and nothing else of ``/sysroot/ostree``.

``/sysroot/ostree`` holds every deployment's ``/etc`` (MCO leaves secrets world-readable
there: ``/etc/machine-config-daemon/currentconfig`` with the pull secret,
``/etc/kubernetes/kubeconfig`` with the bootstrap token) and all of ``/var``. The rendered pod
is read as the kubelet would run it: each container's view is its volume mounts over a
scratch host tree. The init container ``booted-origin`` runs its own arguments on that view,
into the emptyDir; the agent container's view of the host is then that emptyDir alone, and
the agent's own reader finds the booted image there as it does on the host.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from drain_guard.node.host import read_booted_image_ostree
from drain_guard_sim.actors.hostfs import HostFS
from tests.deploy.test_daemonset import agent_settings
from tests.deploy.tools import ON_OSTREE, Obj, agent_container, pod_spec

IMAGE = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:" + "ab" * 32
#: Files MCO leaves world-readable in each deployment's /etc, and what /var holds.
SECRETS = (
    "etc/machine-config-daemon/currentconfig",
    "etc/kubernetes/kubeconfig",
)
SECRET = "pull-secret: s3cr3t"


def _init(objects: list[Obj], name: str) -> Obj:
    found: list[Obj] = [c for c in pod_spec(objects)["initContainers"] if c["name"] == name]
    (container,) = found
    return container


def _volume_kinds(objects: list[Obj]) -> dict[str, Obj]:
    return {v["name"]: v for v in pod_spec(objects)["volumes"]}


@pytest.fixture
def scratch(tmp_path: Path) -> HostFS:
    """A node's /sysroot as ostree leaves it after an update: two deployments, each with MCO's
    world-readable secrets in its /etc, and /var."""
    host = HostFS(tmp_path / "sysroot", IMAGE)
    host.reboot_into(IMAGE.replace("ab" * 32, "cd" * 32))
    for deployment in host.deployments:
        for secret in SECRETS:
            path = host.deploy_dir / deployment.name / secret
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(SECRET)
    var = host.deploy_dir.parent / "var" / "lib" / "kubelet" / "config.json"
    var.parent.mkdir(parents=True)
    var.write_text(SECRET)
    return host


def test_the_kubernetes_overlay_mounts_nothing_of_the_host(
    rendered: Callable[[str], list[Obj]],
) -> None:
    """A plain Kubernetes node has no /sysroot/ostree (a hostPath of type Directory would keep
    the pod from starting): booted-origin runs with only its emptyDir, copies nothing and
    says so, and the agent's no-op-image guard abstains (tests/node/test_daemonset.py runs
    it on a real kubelet)."""
    objects = rendered("kubernetes")
    assert not [v for v in _volume_kinds(objects).values() if "hostPath" in v]
    reader = _init(objects, "booted-origin")
    assert [m["mountPath"] for m in reader["volumeMounts"]] == ["/booted-origin"]


@pytest.mark.parametrize("overlay", ON_OSTREE)
def test_the_agent_sees_the_booted_origin_and_nothing_else_of_the_host(
    rendered: Callable[[str], list[Obj]], overlay: str, scratch: HostFS, tmp_path: Path
) -> None:
    objects = rendered(overlay)
    volumes = _volume_kinds(objects)
    host_volumes = {name for name, v in volumes.items() if "hostPath" in v}
    agent = agent_container(objects)
    assert not [m for m in agent.get("volumeMounts", []) if m["name"] in host_volumes]

    # The agent's host root is a read-only emptyDir, in memory, that booted-origin writes.
    settings = agent_settings(objects)
    (view,) = [m for m in agent["volumeMounts"] if m["mountPath"] == settings.host.host_root]
    assert view["readOnly"] is True
    assert volumes[view["name"]]["emptyDir"]["medium"] == "Memory"
    reader = _init(objects, "booted-origin")
    args = reader["args"]
    assert args[0] == "copy-booted-origin"
    flags = dict(a.split("=", 1) for a in args[1:])
    mounts = {m["mountPath"]: m for m in reader["volumeMounts"]}
    assert mounts[flags["--to"]]["name"] == view["name"]
    host_mount = mounts[flags["--host-root"].rstrip("/") + "/ostree"]
    assert volumes[host_mount["name"]]["hostPath"]["path"] == "/sysroot/ostree"
    assert host_mount["readOnly"] is True

    # Run it as the kubelet would: its --host-root is a directory whose ostree/ is the host's
    # /sysroot/ostree (the scratch tree is laid out so), its --to the emptyDir.
    empty_dir = tmp_path / "emptydir"
    empty_dir.mkdir()
    command = [
        sys.executable,
        "-m",
        "drain_guard",
        "copy-booted-origin",
        f"--host-root={scratch.root}",
        f"--to={empty_dir}",
        f"--cmdline-file={scratch.cmdline_file}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.startswith("drain-guard copy-booted-origin: copied /ostree/boot.")

    # The agent's reader, on its own view, reads the booted image as on the host.
    on_host = read_booted_image_ostree(scratch.root, scratch.cmdline_file)
    assert on_host.digest == "sha256:" + "cd" * 32, on_host
    assert read_booted_image_ostree(empty_dir, scratch.cmdline_file) == on_host
    # ... and that is all there is: one file, the booted origin; no /etc, no /var.
    files = [p for p in empty_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    assert [p.relative_to(empty_dir) for p in files] == [
        scratch.origin_file().relative_to(scratch.root)
    ]
    assert not [p for p in empty_dir.rglob("*") if p.is_file() and SECRET in p.read_text()]


def test_a_host_without_a_readable_booted_image_copies_nothing_and_lets_the_agent_start(
    tmp_path: Path,
) -> None:
    """The init container must not keep the agent (and its build-pod guard) from starting: on
    a host whose booted image cannot be read it says why in one line and exits 0; the agent
    then reads nothing and its no-op guard abstains."""
    cmdline = tmp_path / "cmdline"
    cmdline.write_text("rw root=UUID=x\n")
    empty_dir = tmp_path / "emptydir"
    empty_dir.mkdir()
    command = [
        sys.executable,
        "-m",
        "drain_guard",
        "copy-booted-origin",
        f"--host-root={tmp_path}",
        f"--to={empty_dir}",
        f"--cmdline-file={cmdline}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "drain-guard copy-booted-origin: nothing copied, the booted image is unknown: kernel"
        " command line has no ostree= argument (not an ostree system?)"
    ]
    assert list(empty_dir.iterdir()) == []
