"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager,
built from source by ``make control-plane`` (``tools/control-plane/``).

The simulator is a model of Kubernetes written by drain-guard's own hands; this is Kubernetes.
The tests that prove what is the API server's (authorization, admission, eviction, garbage
collection, watches) run on it, and the conformance suite holds the simulator to it. It is
started with what a real cluster has on: client-certificate users signed by a CA made for the
run, service-account tokens (an issuer and a signing key: TokenRequest works),
``--authorization-mode=Node,RBAC``, NodeRestriction, ValidatingAdmissionPolicy and admission
webhooks; the controller manager runs the controllers the agent and the MCO actors meet, each
with its own service account as in a real cluster. There is no kubelet: a test sets a pod's
``status.phase`` itself, as Kubernetes' own integration tests do.

Everything is synchronous (processes and blocking HTTP), so a pytest session fixture and a
command line can both start it. etcd keeps its data on tmpfs when there is one.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import shutil
import signal
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from drain_guard_sim.apiserver.tls import ServingCert
from drain_guard_sim.harness.audit import audit_policy
from drain_guard_sim.harness.processes import (
    ControlPlaneError,
    ManagedProcess,
    free_port,
    spawn,
    wait_ready,
)

__all__ = ["BINARIES", "ControlPlane", "default_bin_dir"]

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.0.0.0/24"
#: What ``policies=False`` stops serving: the API of ValidatingAdmissionPolicy (1.30+).
POLICY_API = "admissionregistration.k8s.io/v1"
POLICY_RESOURCES = ("validatingadmissionpolicies", "validatingadmissionpolicybindings")
# The controllers the agent, its shield and the MCO actors meet; the rest of a real controller
# manager (nodes, volumes, workloads) has nothing to act on without kubelets.
CONTROLLERS = (
    "disruption-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "validatingadmissionpolicy-status-controller",
)


def default_bin_dir() -> Path:
    """``tools/control-plane/bin`` of the repository this simulator is installed from
    (``make control-plane`` builds there), unless ``DRAIN_GUARD_CONTROL_PLANE_BIN`` names one."""
    configured = os.environ.get("DRAIN_GUARD_CONTROL_PLANE_BIN")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[3] / "tools" / "control-plane" / "bin"


def missing_binaries(bin_dir: Path) -> list[str]:
    return [name for name in BINARIES if not os.access(bin_dir / name, os.X_OK)]


@dataclass
class ControlPlane:
    """A running control plane: where it answers and how to be someone there."""

    url: str
    bin_dir: Path
    ca_file: Path
    admin_kubeconfig: Path
    workdir: Path
    etcd_url: str
    emulated_version: str | None
    feature_gates: Mapping[str, bool]
    #: False: ValidatingAdmissionPolicy neither served nor enforced, as on Kubernetes 1.28/1.29
    #: (OpenShift 4.15/4.16), where only admission webhooks confine drain-guard's accounts.
    policies: bool
    #: kube-apiserver writes an audit log of every Node and Pod write (``audit_log``).
    audit: bool
    #: Where the API server listens and what it advertises when a node runs beside it (a
    #: host address on the node's bridge, ``drain_guard_sim.harness.node``); loopback else.
    address: str
    _certs: ServingCert
    _processes: list[ManagedProcess] = field(default_factory=list)
    _etcd_data: Path | None = None

    @classmethod
    def start(
        cls,
        bin_dir: Path,
        workdir: Path,
        *,
        emulated_version: str | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        policies: bool = True,
        audit: bool = False,
        progress_notify_interval: str = "5s",
        node_address: str | None = None,
        extra_controllers: Sequence[str] = (),
    ) -> ControlPlane:
        """Start etcd, kube-apiserver and kube-controller-manager on free loopback ports and
        return once the API server is ready and the controllers have made the ``default``
        namespace's service account. ``emulated_version`` (1.31 at the lowest for a 1.34
        binary) and ``feature_gates`` go to the API server as its flags; ``policies=False``
        turns ValidatingAdmissionPolicy off (its API and its plugin); ``audit`` makes it
        log every Node and Pod write with the objects (``audit_log``).
        ``progress_notify_interval`` is etcd's ``--watch-progress-notify-interval``: 5 s as
        kubeadm sets it, "10m" for etcd's default (a cluster whose etcd does not set it).
        ``node_address``: for a plane with a kubelet (``harness.node``), the API server
        listens on that host address, not loopback, and advertises it as the ``kubernetes``
        Service's endpoint, so pods reach it through the Service as in a cluster;
        ``extra_controllers`` are the workload controllers such a plane runs."""
        missing = missing_binaries(bin_dir)
        if missing:
            raise ControlPlaneError(
                f"{', '.join(missing)} not built in {bin_dir} (make control-plane builds them)"
            )
        workdir.mkdir(parents=True, exist_ok=True)
        address = node_address or "127.0.0.1"
        # The kubernetes Service's address (the first of the range) is what pods connect to.
        service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
        certs = ServingCert.generate(workdir / "pki", [address, service_ip] if node_address else [])
        signing_key = workdir / "pki" / "service-account.key"
        _write_signing_key(signing_key)
        shm = Path("/dev/shm")
        etcd_data = Path(
            tempfile.mkdtemp(prefix="drain-guard-etcd-", dir=shm if shm.is_dir() else None)
        )
        etcd_port, peer_port, api_port, kcm_port = (free_port() for _ in range(4))
        plane = cls(
            url=f"https://{address}:{api_port}",
            bin_dir=bin_dir,
            ca_file=certs.ca_file,
            admin_kubeconfig=workdir / "admin.kubeconfig",
            workdir=workdir,
            etcd_url=f"http://127.0.0.1:{etcd_port}",
            emulated_version=emulated_version,
            feature_gates=dict(feature_gates or {}),
            policies=policies,
            audit=audit,
            address=address,
            _certs=certs,
            _etcd_data=etcd_data,
        )
        try:
            plane.user_kubeconfig("drain-guard-admin", ["system:masters"], plane.admin_kubeconfig)
            plane._spawn(
                "etcd",
                bin_dir / "etcd",
                "--name=default",
                f"--data-dir={etcd_data}",
                f"--listen-client-urls={plane.etcd_url}",
                f"--advertise-client-urls={plane.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",  # tmpfs, and a test run: durability is not the subject
                # 5 s as kubeadm's etcd (etcd's default is 10m): kube-apiserver's watch
                # cache then moves on with etcd's revision every 5 s even when its resource
                # is idle, and an idle watch gets its bookmark about once a minute.
                f"--watch-progress-notify-interval={progress_notify_interval}",
                "--log-level=warn",
            )
            plane._wait(lambda: _http_ok(f"{plane.etcd_url}/health"))
            plane._start_apiserver()
            kcm_kubeconfig = plane.user_kubeconfig(
                "system:kube-controller-manager", (), workdir / "kube-controller-manager.kubeconfig"
            )
            plane._spawn(
                "kube-controller-manager",
                bin_dir / "kube-controller-manager",
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={workdir / 'kcm-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--controllers={','.join((*CONTROLLERS, *extra_controllers))}",
                f"--service-account-private-key-file={signing_key}",
                f"--root-ca-file={certs.ca_file}",
                # The garbage collector and the disruption controller react within a second.
                "--concurrent-gc-syncs=5",
            )
            plane._wait(
                lambda: plane._get_ok("/api/v1/namespaces/default/serviceaccounts/default"),
            )
        except BaseException:
            plane.stop()
            raise
        return plane

    def _start_apiserver(self) -> None:
        self._spawn("kube-apiserver", self.bin_dir / "kube-apiserver", *self._apiserver_flags())
        self._wait(lambda: self._get_ok("/readyz"))

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port and etcd, as an upgrade or
        a crash does. Its watch cache starts afresh at etcd's current revision, so a resource
        version older than that and compacted away (``compact``) is gone for watches and
        lists alike: the 410 Gone that clients meet on a real cluster. (Before the restart the
        cache still serves it, as it would for as long as it stays in the cache's window.)

        kube-controller-manager is started again with it, once it answers. Its informers
        would reconnect on their own, but only after a backoff that grows with the outage (a
        restart that took 40 s on a loaded machine left the pod informer a further 34 s
        behind): meanwhile its disruption controller counts no new pod, and a new budget
        allows no disruption whatever its ``minAvailable``, a lag the next test on a shared
        plane would meet as a hold never released. A fresh one lists everything at once."""
        self._named("kube-controller-manager").stop()
        self._named("kube-apiserver").stop()
        self._respawn("kube-apiserver")
        self._wait(lambda: self._get_ok("/readyz"))
        manager = self._respawn("kube-controller-manager")
        wait_ready(
            manager, lambda: _http_ok(f"https://127.0.0.1:{self._kcm_port}/healthz", _unverified())
        )

    def _respawn(self, name: str) -> ManagedProcess:
        """Start the stopped process ``name`` again with its command line, last in the list."""
        stopped = self._named(name)
        self._processes.remove(stopped)
        process = spawn(name, list(stopped.argv), self.workdir)
        self._processes.append(process)
        return process

    @property
    def _kcm_port(self) -> str:
        args = self._named("kube-controller-manager").argv
        (port,) = (a.split("=", 1)[1] for a in args if a.startswith("--secure-port="))
        return port

    def _apiserver_flags(self) -> list[str]:
        pki = self.workdir / "pki"
        flags = [
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={self.url.rsplit(':', 1)[1]}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self._certs.cert_file}",
            f"--tls-private-key-file={self._certs.key_file}",
            f"--client-ca-file={self._certs.ca_file}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki / 'service-account.pub'}",
            f"--service-account-signing-key-file={pki / 'service-account.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            # ValidatingAdmissionPolicy and ValidatingAdmissionWebhook are on by default;
            # NodeRestriction is not.
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--profiling=false",
        ]
        if self.address == "127.0.0.1":
            # Loopback is no address for the kubernetes Service's endpoints.
            flags.append("--endpoint-reconciler-type=none")
        else:
            # The node's kubelet by its InternalIP (no name lookup), as the API server's
            # kubelet client, for logs and exec.
            pem = self.client_pem("kube-apiserver-kubelet-client", ["system:masters"])
            flags += [
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={pem}",
                f"--kubelet-client-key={pem}",
            ]
        if self.emulated_version:
            flags.append(f"--emulated-version={self.emulated_version}")
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(audit_policy(self.audit)))
        flags += [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # written before the response: nothing missing
        ]
        if not self.policies:
            flags += [
                "--disable-admission-plugins=ValidatingAdmissionPolicy",
                "--runtime-config=" + ",".join(f"{POLICY_API}/{r}=false" for r in POLICY_RESOURCES),
            ]
        if self.feature_gates:
            gates = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items()))
            flags.append(f"--feature-gates={gates}")
        return flags

    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log (JSON lines): the requests of ``AUDITED_GROUP``, and
        with ``audit`` every Node and Pod write."""
        return self.workdir / "audit.log"

    def _spawn(self, name: str, binary: Path, *args: str) -> None:
        self._processes.append(spawn(name, [str(binary), *args], self.workdir))

    def _wait(self, ready: Callable[[], bool]) -> None:
        wait_ready(self._processes[-1], ready)

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(self.workdir / "pki" / "drain-guard-admin.pem")
        return context

    def _get_ok(self, path: str) -> bool:
        return _http_ok(self.url + path, self._ssl_context())

    def stop(self) -> None:
        """Stop the processes (the controller manager first, etcd last) and drop etcd's data."""
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)
            self._etcd_data = None

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def user_kubeconfig(
        self, user: str, groups: Sequence[str] = (), path: Path | None = None
    ) -> Path:
        """A kubeconfig for a client-certificate user (CN ``user``, O ``groups``) signed by the
        run's CA, as kube-apiserver's x509 authenticator reads it: ``system:node:NAME`` in
        ``system:nodes`` is a node identity. The pair is a file beside the run's CA."""
        pem = self.client_pem(user, groups)
        target = path or self.workdir / "kubeconfigs" / f"{pem.stem}.kubeconfig"
        return self._write_kubeconfig(
            target, user, {"client-certificate": str(pem), "client-key": str(pem)}
        )

    def client_pem(self, user: str, groups: Sequence[str] = ()) -> Path:
        """The client certificate and key (one PEM, mode 0600) of ``user`` in ``groups``,
        made once per run beside the CA."""
        pem = self.workdir / "pki" / f"{user.replace(':', '_')}.pem"
        if not pem.exists():
            pem.touch(mode=0o600)
            pem.write_bytes(self._certs.client_certificate(user, groups))
        return pem

    def token_kubeconfig(self, token: str, path: Path, name: str = "token-user") -> Path:
        """A kubeconfig that authenticates with a bearer token (a service account's)."""
        return self._write_kubeconfig(path, name, {"token": token})

    def _write_kubeconfig(self, path: Path, user: str, credentials: Mapping[str, str]) -> Path:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "control-plane",
                    "cluster": {"server": self.url, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": user, "user": dict(credentials)}],
            "contexts": [
                {"name": "control-plane", "context": {"cluster": "control-plane", "user": user}}
            ],
            "current-context": "control-plane",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        return path

    def compact(self) -> int:
        """Compact etcd at its current revision, as kube-apiserver does every five minutes:
        a resource version before it is gone from etcd (and, once the API server's watch cache
        no longer holds it, ``restart_apiserver``, from the API). Returns the revision."""
        header = _etcd_post(self.etcd_url, "/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        revision = int(header["header"]["revision"])
        _etcd_post(
            self.etcd_url, "/v3/kv/compaction", {"revision": str(revision), "physical": True}
        )
        return revision

    def pause(self, name: str) -> None:
        """Stop the process ``name`` (``etcd``, ``kube-apiserver``) with SIGSTOP, as a stalled
        disk or a paused VM stops it: it keeps its sockets and answers nothing. A stopped etcd
        leaves kube-apiserver answering reads from its watch cache, and a write it sends waits
        in etcd's socket, where it may commit once etcd runs again although its client gave up
        or was answered with an error. Returns once it has stopped. ``resume`` (or ``paused``'s
        end) lets it run again."""
        self._named(name).pause()

    def resume(self, name: str) -> None:
        """Let a paused process run again (SIGCONT; nothing when it runs)."""
        self._named(name).popen.send_signal(signal.SIGCONT)

    @contextmanager
    def paused(self, *names: str) -> Iterator[None]:
        """Each of ``names`` resumed at the block's end, whatever the block paused."""
        try:
            yield
        finally:
            for name in names:
                self.resume(name)

    def _named(self, name: str) -> ManagedProcess:
        (process,) = (p for p in self._processes if p.name == name)
        return process

    def etcd_value(self, key: str) -> bytes | None:
        """The value etcd stores under ``key`` (``/registry/minions/NAME`` is a Node, as
        kube-apiserver encodes it), read from etcd itself: what is committed, whatever the API
        server answered or is doing."""
        found = _etcd_post(
            self.etcd_url, "/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()}
        )
        kvs = found.get("kvs") or []
        return base64.b64decode(kvs[0]["value"]) if kvs else None

    def logs(self) -> Iterator[tuple[str, str]]:
        """Each process's name and the tail of its log, for a test's failure message."""
        for process in self._processes:
            yield process.name, process.tail()


def _write_signing_key(path: Path) -> None:
    """The service-account signing key (SEC1 PEM, which kube-apiserver and the controller
    manager read) and its public half beside it (``.pub``), which verifies the tokens."""
    key = ec.generate_private_key(ec.SECP256R1())
    path.touch(mode=0o600)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.with_suffix(".pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _unverified() -> ssl.SSLContext:
    """TLS to a component's own self-signed health port on loopback."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as answer:
            return bool(answer.status == 200)
    except OSError:  # refused, reset, or an HTTP error (urllib.error.URLError is an OSError)
        return False


def _etcd_post(etcd_url: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        etcd_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        result: dict[str, Any] = json.load(answer)
        return result
