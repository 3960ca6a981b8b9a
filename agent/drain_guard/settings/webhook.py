"""``drain-guard webhook``'s flags: its listener, its serving certificate and the cluster's
TLS profile in kube-rbac-proxy's flags."""

from __future__ import annotations

import argparse

from drain_guard.config.values import LogFormat

WEBHOOK_LISTEN = "0.0.0.0:9443"
#: Go's (IANA) names of OpenShift's TLS-profile suites, as kube-rbac-proxy takes them, in
#: OpenSSL's names. TLS 1.3 suites are not configurable in Python's ssl: OpenSSL's TLS 1.3
#: defaults are the profiles' three.
TLS13_SUITES = frozenset(
    ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
)
TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}


def add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``webhook`` flags: its listener, its serving certificate and the cluster's TLS
    profile in kube-rbac-proxy's flags, and the kubeconfig of its pod lookups."""
    parser.add_argument("--listen", default=WEBHOOK_LISTEN, help="HOST:PORT to serve HTTPS on")
    parser.add_argument("--tls-cert-file", required=True, help="serving certificate (PEM)")
    parser.add_argument("--tls-private-key-file", required=True, help="its private key (PEM)")
    parser.add_argument(
        "--tls-min-version", default="VersionTLS12", choices=("VersionTLS12", "VersionTLS13")
    )
    parser.add_argument(
        "--tls-cipher-suites",
        default=",".join(TLS12_SUITES),
        help="comma-separated, Go's names, as kube-rbac-proxy's flag",
    )
    parser.add_argument(
        "--kubeconfig", help="for the pod lookups (default: KUBECONFIG, else in-cluster)"
    )
    parser.add_argument(
        "--agent-account",
        default="drain-guard:drain-guard",
        help="the agents' service account, NAMESPACE:NAME, exactly (a renamed install's)",
    )
    parser.add_argument("--log-format", default="text", choices=[f.value for f in LogFormat])
