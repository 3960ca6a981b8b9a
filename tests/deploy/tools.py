"""Helpers for the deployment tests: locating the system tools, rendering the overlays.

The tools are real ones (kubectl's kustomize, hadolint from PyPI, systemd-analyze), found by
``tests.helpers.require_tool``.
"""

from __future__ import annotations

import os
import re
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
#: The overlays for ostree nodes, whose init container mounts the host's /sysroot/ostree; the
#: kubernetes overlay mounts no host path (a plain node has no ostree).
ON_OSTREE = ("openshift", "openshift-4.15")
RENDER_TIMEOUT = 60.0
#: The kinds the manifests use that have no namespace.
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "SecurityContextConstraints",
    "PriorityClass",
}
#: The systemd unit's settings file (VAR=value lines; systemd's EnvironmentFile=).
ENV_FILE = REPO / "systemd" / "drain-guard.env"

Obj = dict[str, Any]

#: The kubelet's client certificate and key on RHCOS (one file, a link the kubelet replaces
#: when it rotates them), as its kubeconfig names them: --cert-dir /var/lib/kubelet/pki.
KUBELET_CLIENT = "/var/lib/kubelet/pki/kubelet-client-current.pem"
SYSTEMD_DIR = REPO / "systemd"
#: The systemd install's units: the agent, with no credential, and the node proxy that holds
#: the node's and passes on only the agent's own Node's requests.
AGENT_UNIT = SYSTEMD_DIR / "drain-guard.service"
PROXY_UNIT = SYSTEMD_DIR / "drain-guard-node-proxy.service"
ORIGIN_UNIT = SYSTEMD_DIR / "drain-guard-booted-origin.service"
UNITS = (AGENT_UNIT, PROXY_UNIT, ORIGIN_UNIT)

Unit = dict[str, dict[str, list[str]]]


def systemd_unit(path: Path) -> Unit:
    """A unit file's sections, each key with all its values in order (as systemd reads them:
    comments skipped; no line continuations are used in this repository's units)."""
    sections: Unit = {}
    section: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
            continue
        name, _, value = line.partition("=")
        section.setdefault(name, []).append(value)
    return sections


def specifiers(value: str, runtime_dir: str = "/run") -> str:
    """``value`` with the specifiers this repository's units use resolved as systemd does for
    a system service (``%t``: the runtime directory)."""
    return value.replace("%t", runtime_dir)


def under(root: Path, value: str) -> str:
    """``value`` with the host paths the systemd install uses (``/var/lib/``, ``/run/``)
    moved under ``root``: a scratch host for the tests."""
    for prefix in ("/var/lib/", "/run/"):
        value = value.replace(prefix, f"{root}{prefix}")
    return value


def render(overlay: str) -> list[Obj]:
    """Render ``daemonset/overlays/<overlay>`` with ``kubectl kustomize`` into objects."""
    return render_dir(DAEMONSET_DIR / "overlays" / overlay)


def render_dir(directory: Path) -> list[Obj]:
    """Render the kustomization in ``directory`` (a user's, say) with ``kubectl kustomize``."""
    kubectl = require_tool("kubectl")
    proc = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc is not None]


def user_kustomization(directory: Path, overlay: str, **fields: Any) -> Path:
    """Write a user's kustomization in ``directory``, as docs/install.md shows one: the overlay
    by a relative path (kustomize refuses nothing else), and ``fields`` besides."""
    directory.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(DAEMONSET_DIR / "overlays" / overlay, directory)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [target],
        **fields,
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return directory


def documented_kustomization(section: str, directory: Path, namespace: str = "NS") -> Path:
    """docs/install.md's kustomization of ``section`` (its first YAML block), written in
    ``directory`` as a user would: the clone beside it (``../drain-guard/``) is this
    repository, and the namespace ``NS`` is ``namespace``."""
    text = (REPO / "docs" / "install.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text.split(f"### {section}\n", 1)[1], re.S)
    assert block is not None, f"no YAML block in docs/install.md's {section}"
    directory.mkdir(parents=True, exist_ok=True)
    clone = os.path.relpath(REPO, directory) + "/"
    written = block.group(1).replace("../drain-guard/", clone)
    (directory / "kustomization.yaml").write_text(written.replace(": NS\n", f": {namespace}\n"))
    return directory


def relative(path: Path, directory: Path) -> str:
    """``path`` relative to ``directory``, as a kustomization must name it."""
    return os.path.relpath(path, directory)


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


#: The label daemonset/components/kube-rbac-proxy puts on each workload it adds the sidecar to.
PROXIED = ("drain-guard.io/kube-rbac-proxy", "sidecar")


def pod_spec(objects: list[Obj], workload: Obj | None = None) -> Obj:
    """The pod template's spec of ``workload`` (default: the agents' DaemonSet)."""
    owner = workload or one(objects, "DaemonSet", "drain-guard")
    spec: Obj = owner["spec"]["template"]["spec"]
    return spec


def containers(objects: list[Obj], workload: Obj | None = None) -> Iterator[Obj]:
    spec = pod_spec(objects, workload)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def container(objects: list[Obj], name: str, workload: Obj | None = None) -> Obj:
    found = [c for c in containers(objects, workload) if c["name"] == name]
    assert len(found) == 1, f"expected one container {name}, found {len(found)}"
    return found[0]


def proxied(objects: list[Obj]) -> list[Obj]:
    """The workloads behind a kube-rbac-proxy sidecar (labelled so by its component)."""
    label, value = PROXIED
    return [
        o
        for o in objects
        if o["kind"] in ("DaemonSet", "Deployment")
        and o["metadata"].get("labels", {}).get(label) == value
    ]


def agent_container(objects: list[Obj]) -> Obj:
    return container(objects, "drain-guard")


def env_file(text: str) -> dict[str, str]:
    """The variables an EnvironmentFile= sets (comments and blank lines skipped)."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name] = value
    return env


def kubelet_kubeconfig(server: str = "https://api-int.example.com:6443") -> dict[str, object]:
    """A kubeconfig as the kubelet writes it after bootstrap (pkg/kubelet/certificate/
    bootstrap: the bootstrap kubeconfig's server and CA data, the client certificate and key
    by the certificate store's current path)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "default-cluster",
                "cluster": {"server": server, "certificate-authority-data": "LS0tLS1CRUdJTg=="},
            }
        ],
        "users": [
            {
                "name": "default-auth",
                "user": {"client-certificate": KUBELET_CLIENT, "client-key": KUBELET_CLIENT},
            }
        ],
        "contexts": [
            {
                "name": "default-context",
                "context": {"cluster": "default-cluster", "user": "default-auth"},
            }
        ],
        "current-context": "default-context",
    }


def container_env(spec: Obj, pod_namespace: str) -> dict[str, str]:
    """The container's environment as the kubelet would give it (downward API resolved)."""
    env: dict[str, str] = {}
    for var in spec.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        field = var["valueFrom"]["fieldRef"]["fieldPath"]
        env[var["name"]] = {
            "spec.nodeName": "worker-0",
            "metadata.namespace": pod_namespace,
            "metadata.name": "drain-guard-x7k2p",
        }[field]
    return env


def expand_args(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in args."""
    return re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg)


def probe_port(probed: Obj, port: str | int) -> int:
    """The port the kubelet probes: a number as it is; a name looked up in the probed
    container's own ``ports`` only (the kubelet never looks in the pod's other containers, and
    an unknown name makes every probe fail)."""
    if isinstance(port, int):
        return port
    found = [p["containerPort"] for p in probed.get("ports", []) if p.get("name") == port]
    assert len(found) == 1, f"container {probed['name']} declares no port named {port!r}"
    number: int = found[0]
    return number


def service_target_port(spec: Obj, port: str | int) -> int:
    """The pod port a Service's ``targetPort`` names: a number as it is; a name looked up in
    every container's ``ports`` (the endpoints controller reads the whole pod, unlike the
    kubelet's probes)."""
    if isinstance(port, int):
        return port
    found = [
        p["containerPort"]
        for c in spec["containers"]
        for p in c.get("ports", [])
        if p.get("name") == port
    ]
    assert len(found) == 1, f"no single container port named {port!r} in the pod"
    number: int = found[0]
    return number


def check_served_through_the_proxy(
    objects: list[Obj], workload: Obj, own: Obj, listen: str, service: str, monitor: str
) -> None:
    """A workload behind kube-rbac-proxy, as the kubelet, the Service, the service CA and
    Prometheus read it: its own container ``own`` listens on loopback only (``listen``, as its
    settings code parsed it) and declares no port; the proxy's upstream is that listener and
    only the probe paths pass it unauthenticated; the probes, by port number, reach the proxy;
    the Service ``service`` reaches the proxy; the certificate the service CA issues for that
    Service is the one the proxy loads; the ServiceMonitor ``monitor`` scrapes it over TLS,
    with a token, checking the Service's DNS name."""
    host, _, port = listen.rpartition(":")
    assert host == "127.0.0.1", listen
    assert "ports" not in own
    proxy = container(objects, "kube-rbac-proxy", workload)
    flags = dict(a.removeprefix("--").split("=", 1) for a in proxy["args"])
    assert flags["upstream"] == f"http://{listen}/"
    assert set(flags["ignore-paths"].split(",")) == {"/healthz", "/readyz"}
    assert "allow-paths" not in flags
    proxy_port = int(flags["secure-listen-address"].rsplit(":", 1)[1])
    assert int(port) != proxy_port
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = own[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        # The probes go through the proxy, which shares the pod's network.
        assert probe_port(own, get["port"]) == proxy_port
    spec = pod_spec(objects, workload)
    found = one(objects, "Service", service)
    meta = found["metadata"]
    assert meta["namespace"] == workload["metadata"]["namespace"]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert found["spec"]["selector"].items() <= labels.items()
    (service_port,) = found["spec"]["ports"]
    assert service_target_port(spec, service_port["targetPort"]) == proxy_port
    secret = meta["annotations"]["service.beta.openshift.io/serving-cert-secret-name"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (tls_mount,) = [m for m in proxy["volumeMounts"] if volumes[m["name"]].get("secret")]
    assert volumes[tls_mount["name"]]["secret"]["secretName"] == secret
    assert flags["tls-cert-file"] == f"{tls_mount['mountPath']}/tls.crt"
    assert flags["tls-private-key-file"] == f"{tls_mount['mountPath']}/tls.key"
    (endpoint,) = one(objects, "ServiceMonitor", monitor)["spec"]["endpoints"]
    assert endpoint["port"] == service_port["name"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] == f"{meta['name']}.{meta['namespace']}.svc"
    assert endpoint["bearerTokenFile"]
