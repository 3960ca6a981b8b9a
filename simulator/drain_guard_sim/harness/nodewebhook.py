"""The ``openshift-4.15`` overlay's admission webhook on the real node (``harness.node``), as
the overlay renders it, with what OpenShift's service CA would add.

The webhook's objects are taken from the overlay's render in a user's kustomization with the
image set to ``make image``'s (``user_kustomization``): its account, Roles, Deployment,
budget, Service, network policy and the ValidatingWebhookConfiguration. The rest of that
overlay needs OpenShift (an SCC, the ostree host path, kube-rbac-proxy's registry image). The
service CA is played here: the Secret the Service's annotation names, holding a certificate
for the Service's DNS names from a CA made for the run, and that CA injected into every entry
of the configuration the annotation marks. Its Deployment needs two nodes (a required pod
anti-affinity by host name) labelled as control-plane nodes: ``Node.add_node``.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.node import Node
from drain_guard_sim.harness.nodeimages import user_kustomization
from drain_guard_sim.harness.nodenet import NodeError

__all__ = ["WEBHOOK", "apply_webhook", "as_manifest", "service_ca_secret", "webhook_objects"]

WEBHOOK = "drain-guard-webhook"
NAMESPACE = "drain-guard"
SERVING_CERT_SECRET = "service.beta.openshift.io/serving-cert-secret-name"
INJECT_CA = "service.beta.openshift.io/inject-cabundle"

Obj = dict[str, Any]


def webhook_objects(overlay: Path, archive: Path, workdir: Path) -> list[Obj]:
    """The webhook's objects of ``overlay`` (the openshift-4.15 one) as it renders with
    ``archive``'s image, and the service CA's Secret, its CA in the configuration."""
    directory = user_kustomization(overlay, archive, workdir / "openshift-4.15")
    done = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise NodeError(f"kubectl kustomize {directory}: {done.stderr.strip()}")
    rendered = [o for o in yaml.safe_load_all(done.stdout) if o]
    mine = [
        o
        for o in rendered
        if o["metadata"]["name"].startswith(WEBHOOK)
        or o["kind"] == "ValidatingWebhookConfiguration"
    ]
    return _as_service_ca(mine, workdir)


def service_ca_secret(service: Obj, workdir: Path) -> tuple[Obj, ServingCert]:
    """The Secret OpenShift's service CA would issue for ``service`` (named by its
    serving-cert annotation, for its DNS names), from a CA made in ``workdir``."""
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    names = [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]
    cert = ServingCert.generate(workdir / "service-ca", names=names)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": service["metadata"]["annotations"][SERVING_CERT_SECRET],
            "namespace": namespace,
        },
        "data": {
            "tls.crt": base64.b64encode(cert.cert_file.read_bytes()).decode(),
            "tls.key": base64.b64encode(cert.key_file.read_bytes()).decode(),
        },
    }
    return secret, cert


def _as_service_ca(objects: list[Obj], workdir: Path) -> list[Obj]:
    (service,) = (o for o in objects if o["kind"] == "Service")
    secret, cert = service_ca_secret(service, workdir)
    (configuration,) = (o for o in objects if o["kind"] == "ValidatingWebhookConfiguration")
    if configuration["metadata"].get("annotations", {}).get(INJECT_CA) != "true":
        raise NodeError("the webhook's configuration no longer asks for the service CA's bundle")
    bundle = base64.b64encode(cert.ca_file.read_bytes()).decode()
    for entry in configuration["webhooks"]:
        entry["clientConfig"]["caBundle"] = bundle
    return [secret, *objects]


def as_manifest(objects: list[Obj]) -> str:
    """``objects`` as one manifest, for ``kubectl apply -f -`` and ``kubectl delete -f -``."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


def apply_webhook(node: Node, objects: list[Obj]) -> None:
    """Apply ``objects`` (``webhook_objects``) and return once the Deployment has rolled
    out: both replicas Ready through their probes."""
    node.kubectl("apply", "-f", "-", stdin=as_manifest(objects))
    node.kubectl("rollout", "status", "-n", NAMESPACE, f"deploy/{WEBHOOK}", "--timeout=180s")
