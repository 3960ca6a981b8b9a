"""Each quickstart of docs/quickstart/ runs as written, top to bottom, on the real control plane.

The ``sh`` blocks are taken from the page and run with bash where a user would run them:
beside a "clone" (this repository) and the digest file ``podman push --digestfile`` writes.
``oc`` and ``kubectl`` are the real kubectl, on the session's kube-apiserver, with every write
a server-side dry run, so each object goes through the API server's decoding, validation and
admission and nothing is left behind (the namespace a page creates excepted: the session's
tests share it). What cannot run here is named, with why, and left out: the image build (no
registry), the commands that need the agents running on nodes, and a host's install, which
``tests/controlplane/test_systemd_units.py`` boots under a real systemd.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path

import pytest
import yaml

from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client
from tests.controlplane.nodes import shared_namespace
from tests.controlplane.test_rights import CRDS, kubectl
from tests.controlplane.test_systemd_units import install_commands
from tests.deploy.tools import REPO
from tests.helpers import require_tool

QUICKSTARTS = REPO / "docs" / "quickstart"
#: page → the overlay it installs.
OVERLAY = {
    "openshift.md": "openshift",
    "openshift-4.15.md": "openshift-4.15",
    "kubernetes.md": "kubernetes",
    "systemd.md": "systemd",
}
#: Lines that need the agents running on nodes, which this control plane has not (the
#: preflight on each overlay: tests/controlplane/test_preflight.py).
NEEDS_NODES = re.compile(
    r"^((oc|kubectl) -n \S+ (rollout status|exec|logs|port-forward)|drain-guard preflight) "
)
#: Writes, made here as server-side dry runs.
WRITES = ("apply", "create", "label", "annotate", "delete", "patch")
WRAPPER = """#!/bin/bash
# oc and kubectl as the quickstarts call them: the real kubectl, every write a server dry run.
set -euo pipefail
case "$1" in
  {writes}) ;;
  *) echo "the quickstart test runs no '$1' here: name it in NEEDS_NODES" >&2; exit 97 ;;
esac
if [ "$1 $2" = "create namespace" ]; then  # shared by the session's tests: made for real
  "$KUBECTL" create namespace "$3" 2>/dev/null || "$KUBECTL" get namespace "$3" >/dev/null
  exit 0
fi
if [ "$1 $2" = "apply -k" ]; then  # what was applied, for the test to read
  "$KUBECTL" kustomize "$3" > "$APPLIED/$(ls "$APPLIED" | wc -l).yaml"
fi
exec "$KUBECTL" "$@" --dry-run=server
"""


def blocks(page: Path) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", page.read_text(), re.DOTALL)


def runnable(block: str) -> str | None:
    """The block as run here, or None when none of it can run here (and why is asserted)."""
    if "podman build" in block:
        return None  # no registry: the test writes the digest file podman push would
    if block.startswith("# as root, from a clone of this repository\n"):
        assert install_commands() in block  # booted under systemd by test_systemd_units
        return None
    lines = [line for line in block.splitlines() if not NEEDS_NODES.match(line)]
    return "\n".join(lines) + "\n" if any(line.strip() for line in lines) else None


def observe_only(manifest: Path) -> bool:
    """Whether the applied DaemonSet's agents run observe-only."""
    for obj in yaml.safe_load_all(manifest.read_text()):
        if obj and obj["kind"] == "DaemonSet":
            containers = obj["spec"]["template"]["spec"]["containers"]
            (agent,) = [c for c in containers if c["name"] == "drain-guard"]
            env = {e["name"]: e.get("value") for e in agent.get("env", [])}
            return env.get("DRAIN_GUARD_OBSERVE_ONLY") == "true"
    raise AssertionError(f"no DaemonSet in {manifest}")


def test_every_page_is_tested() -> None:
    assert sorted(p.name for p in QUICKSTARTS.glob("*.md")) == sorted(OVERLAY)


@pytest.mark.parametrize("page", sorted(OVERLAY))
async def test_quickstart_runs_as_written(
    control_plane: ControlPlane, page: str, tmp_path: Path
) -> None:
    real = require_tool("kubectl")
    async with api_client(control_plane.admin_kubeconfig) as admin:
        for namespace in ("drain-guard", "openshift-machine-config-operator"):
            await shared_namespace(admin, namespace)
    kubectl(control_plane, "apply", "--server-side", "-f", str(CRDS))
    kubectl(control_plane, "wait", "--for=condition=Established", "-f", str(CRDS))

    bin_dir, applied, user = tmp_path / "bin", tmp_path / "applied", tmp_path / "user"
    for directory in (bin_dir, applied, user):
        directory.mkdir()
    for name in ("oc", "kubectl"):
        (bin_dir / name).write_text(WRAPPER.replace("{writes}", "|".join(WRITES)))
        (bin_dir / name).chmod(0o755)
    (user / "drain-guard").symlink_to(REPO)
    digest = "sha256:" + hashlib.sha256(b"the image podman pushed").hexdigest()
    (user / "drain-guard.digest").write_text(digest)  # podman writes no newline
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KUBECTL": real,
        "KUBECONFIG": str(control_plane.admin_kubeconfig),
        "APPLIED": str(applied),
        "HOME": str(tmp_path),
    }
    # The cluster-side steps of the systemd page run from the clone, the others beside it.
    cwd = user / "drain-guard" if page == "systemd.md" else user
    for block in blocks(QUICKSTARTS / page):
        script = runnable(block)
        if script is None:
            continue
        proc = await asyncio.create_subprocess_exec(
            *("bash", "-euo", "pipefail", "-c", script),
            cwd=cwd,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        async with asyncio.timeout(120):
            out = (await proc.communicate())[0].decode()
        assert proc.returncode == 0, f"{page}:\n{script}\n{out}"

    manifests = sorted(applied.iterdir(), key=lambda p: int(p.stem))
    assert manifests, f"{page} applies nothing"
    if page == "systemd.md":
        text = manifests[0].read_text()
        assert "name: drain-guard-shield" in text
        assert "kind: DaemonSet" not in text  # the agents run on the hosts
        return
    # The user's image by its digest; observe-only first, then enforced.
    assert f"registry.example.com/platform/drain-guard:0.1.0@{digest}" in manifests[0].read_text()
    assert observe_only(manifests[0])
    assert len(manifests) == 2
    assert not observe_only(manifests[1])
