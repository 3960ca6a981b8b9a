"""Helpers for the deployment tests: locating the system tools, rendering the overlays.

The tools are real ones (kubectl's kustomize, hadolint from PyPI, systemd-analyze), found by
``tests.helpers.require_tool``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import require_tool

REPO = Path(__file__).resolve().parents[2]
DAEMONSET_DIR = REPO / "daemonset"
OVERLAYS = ("kubernetes", "openshift", "openshift-4.15")
# The oldest Kubernetes each overlay supports: the admission policy needs 1.30 (OpenShift
# 4.17); the openshift-4.15 overlay leaves it out for OpenShift 4.15/4.16 (Kubernetes 1.28).
MIN_KUBERNETES = {"kubernetes": "1.30.0", "openshift": "1.30.0", "openshift-4.15": "1.28.0"}
WITH_ADMISSION_POLICY = ("kubernetes", "openshift")
RENDER_TIMEOUT = 60.0

Obj = dict[str, Any]


def render(overlay: str) -> list[Obj]:
    """Render ``daemonset/overlays/<overlay>`` with ``kubectl kustomize`` into objects."""
    kubectl = require_tool("kubectl")
    proc = subprocess.run(
        [kubectl, "kustomize", str(DAEMONSET_DIR / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize {overlay} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc is not None]


def key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name): how objects are told apart."""
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    """The single object of ``kind`` (and ``name``); fails when there are none or several."""
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(objects: list[Obj]) -> Obj:
    spec: Obj = one(objects, "DaemonSet", "drain-guard")["spec"]["template"]["spec"]
    return spec


def containers(objects: list[Obj]) -> Iterator[Obj]:
    spec = pod_spec(objects)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def container(objects: list[Obj], name: str) -> Obj:
    found = [c for c in containers(objects) if c["name"] == name]
    assert len(found) == 1, f"expected one container {name}, found {len(found)}"
    return found[0]


def agent_container(objects: list[Obj]) -> Obj:
    return container(objects, "drain-guard")
