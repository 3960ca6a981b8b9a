"""docs/install.md's own kustomization, run as written: every image is pinned by digest.

The block that writes ``my-drain-guard/kustomization.yaml`` is taken from the document and run
with bash next to a "clone" (this repository) and the digest file ``podman push
--digestfile`` would have written; the result is rendered with kubectl kustomize for each
overlay, and every container of every workload must name its image by a sha256 digest.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from tests.deploy.tools import OVERLAYS, REPO, Obj, render_dir
from tests.helpers import require_tool

INSTALL = REPO / "docs" / "install.md"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
POD_TEMPLATES = {
    "DaemonSet": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "Pod": ("spec",),
}


def example_block() -> str:
    """The shell block of docs/install.md that writes the user's kustomization."""
    blocks: list[str] = re.findall(r"```sh\n(.*?)```", INSTALL.read_text(), re.DOTALL)
    (block,) = [b for b in blocks if "cat > my-drain-guard/kustomization.yaml" in b]
    return block


def images(objects: list[Obj]) -> dict[str, str]:
    """Every container's image, by "kind/name/container"."""
    found: dict[str, str] = {}
    for obj in objects:
        path = POD_TEMPLATES.get(obj["kind"])
        if path is None:
            continue
        spec = obj
        for key in path:
            spec = spec[key]
        for group in ("initContainers", "containers"):
            for c in spec.get(group, []):
                found[f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"] = c["image"]
    return found


@pytest.fixture
def user_dir(tmp_path: Path) -> tuple[Path, str]:
    """Run the documented block where the user would: beside the clone and the digest file."""
    (tmp_path / "drain-guard").symlink_to(REPO)
    digest = "sha256:" + hashlib.sha256(b"the image podman pushed").hexdigest()
    (tmp_path / "drain-guard.digest").write_text(digest)  # podman writes no newline
    bash = require_tool("bash")
    subprocess.run([bash, "-euc", example_block()], cwd=tmp_path, check=True, timeout=30)
    return tmp_path / "my-drain-guard", digest


@pytest.mark.parametrize("overlay", [*OVERLAYS, "systemd"])
def test_every_image_of_the_documented_install_is_pinned_by_digest(
    user_dir: tuple[Path, str], overlay: str
) -> None:
    directory, digest = user_dir
    kustomization = directory / "kustomization.yaml"
    text = kustomization.read_text()
    assert "daemonset/overlays/openshift " in text
    kustomization.write_text(text.replace("overlays/openshift ", f"overlays/{overlay} "))
    found = images(render_dir(directory))
    assert found, "no workload rendered"
    unpinned = {where: image for where, image in found.items() if not DIGEST.search(image)}
    assert not unpinned, f"images without a digest: {unpinned}"
    # drain-guard's own image (the agents', the central shield's) is the user's, by digest.
    ours = {w for w in found if not w.endswith("/kube-rbac-proxy")}
    assert ours & {
        "DaemonSet/drain-guard/drain-guard",
        "Deployment/drain-guard-shield/drain-guard-shield",
    }
    for where in ours:
        assert found[where] == f"registry.example.com/platform/drain-guard:0.1.0@{digest}", where


def test_the_check_has_teeth(tmp_path: Path) -> None:
    """An overlay rendered without the user's digest has an unpinned image (the agent's)."""
    found = images(render_dir(REPO / "daemonset" / "overlays" / "openshift"))
    assert {w for w, i in found.items() if not DIGEST.search(i)} == {
        "DaemonSet/drain-guard/drain-guard",
        "DaemonSet/drain-guard/booted-origin",
    }
