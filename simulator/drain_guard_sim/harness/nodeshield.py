"""The central shield on the real node (``harness.node``) as ``daemonset/overlays/systemd``
ships it: its Deployment with the kube-rbac-proxy sidecar, its account and grants, who may
scrape it, its Service and the admission policy that confines its budgets.

The overlay is rendered in a user's kustomization with the agent's image set to ``make
image``'s and kube-rbac-proxy's to ``make kube-rbac-proxy-image``'s (docs/install.md). What
the test plays of OpenShift: the service CA (the Secret the Service's annotation names,
``harness.nodewebhook.service_ca_secret``). What it leaves out: the ServiceMonitor, whose
kind only the Prometheus Operator serves.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.nodeimages import user_kustomization
from drain_guard_sim.harness.nodenet import NodeError
from drain_guard_sim.harness.nodewebhook import service_ca_secret

__all__ = ["SHIELD", "Shield", "shield_objects"]

SHIELD = "drain-guard-shield"
#: Served by the Prometheus Operator only (OpenShift's monitoring), not by this API server.
OPERATOR_KINDS = frozenset({"ServiceMonitor"})

Obj = dict[str, Any]


@dataclass(frozen=True)
class Shield:
    """The objects to apply and the service CA's certificate its sidecar serves."""

    objects: list[Obj]
    cert: ServingCert


def shield_objects(overlay: Path, archive: Path, proxy_archive: Path, workdir: Path) -> Shield:
    """``overlay`` (the systemd one) as it renders with ``archive``'s and ``proxy_archive``'s
    images, with the service CA's Secret and without the Prometheus Operator's kinds."""
    directory = user_kustomization(overlay, archive, workdir / "systemd", proxy_archive)
    done = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise NodeError(f"kubectl kustomize {directory}: {done.stderr.strip()}")
    rendered = [o for o in yaml.safe_load_all(done.stdout) if o]
    objects = [o for o in rendered if o["kind"] not in OPERATOR_KINDS]
    (service,) = (o for o in objects if o["kind"] == "Service")
    secret, cert = service_ca_secret(service, workdir)
    return Shield([secret, *objects], cert)
