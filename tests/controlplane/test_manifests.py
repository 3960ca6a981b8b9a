"""Every overlay's rendered manifests as the real API server reads them: applied server-side
with ``--dry-run=server``, so each object goes through the API server's own decoding, schema
validation (CEL of the admission policies compiled), defaulting and admission, and nothing is
left behind. The namespaces they name are made for real first (a dry-run namespace holds
nothing). SecurityContextConstraints, ServiceMonitor and PrometheusRule come from minimal CRDs
written for the tests (``crds.yaml``): their contents are checked by ``tests/deploy`` only.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client
from tests.controlplane.nodes import shared_namespace
from tests.controlplane.test_rights import CRDS, kubectl
from tests.deploy.tools import DAEMONSET_DIR, key, render

RENDERED = sorted(p.name for p in (DAEMONSET_DIR / "overlays").iterdir() if p.is_dir())
APPLIED = re.compile(r"^(\S+) serverside-applied \(server dry run\)$")


@pytest.mark.parametrize("overlay", RENDERED)
async def test_every_object_is_taken_by_the_real_api_server(
    control_plane: ControlPlane, overlay: str, tmp_path: Path
) -> None:
    objects = render(overlay)
    namespaces = {o["metadata"].get("namespace") for o in objects} - {None}
    namespaces |= {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    async with api_client(control_plane.admin_kubeconfig) as admin:
        for namespace in sorted(namespaces):
            await shared_namespace(admin, namespace)
    kubectl(control_plane, "apply", "--server-side", "-f", str(CRDS))
    kubectl(control_plane, "wait", "--for=condition=Established", "-f", str(CRDS))
    manifest = tmp_path / f"{overlay}.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    out = kubectl(
        control_plane,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        str(manifest),
    )
    taken = [m.group(1) for line in out.splitlines() if (m := APPLIED.match(line))]
    assert len(taken) == len(objects), out
    assert len({key(o) for o in objects}) == len(objects)
