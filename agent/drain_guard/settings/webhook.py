"""``drain-guard webhook``'s flags: its listener, its serving certificate and the cluster's
TLS profile in kube-rbac-proxy's flags."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from drain_guard.config.values import Listen, LogFormat, SettingsError, named, parse_listen

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


@dataclass(frozen=True)
class WebhookSettings:
    """``drain-guard webhook``'s settings, typed: where it serves, its certificate, the TLS
    profile (the minimum version and OpenSSL's names of the TLS 1.2 suites), the kubeconfig of
    its pod lookups (None: in-cluster), the agents' account and the log format."""

    listen: Listen
    tls_cert_file: str
    tls_private_key_file: str
    tls_min_version: str
    tls12_ciphers: tuple[str, ...]
    kubeconfig: str | None
    agent_account: str
    log_format: LogFormat


def webhook_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> WebhookSettings:
    """The settings from the flags (``KUBECONFIG`` standing in for ``--kubeconfig``), checked:
    the account is ``NAMESPACE:NAME``, every suite is known, and a TLS 1.2 floor has one."""
    namespace, _, name = args.agent_account.partition(":")
    if not namespace or not name or ":" in name:
        raise SettingsError(f"--agent-account {args.agent_account!r}: expected NAMESPACE:NAME")
    names = [n.strip() for n in args.tls_cipher_suites.split(",") if n.strip()]
    unknown = [n for n in names if n not in TLS12_SUITES and n not in TLS13_SUITES]
    if unknown:
        raise SettingsError(f"--tls-cipher-suites: unsupported suite {unknown[0]}")
    tls12 = tuple(TLS12_SUITES[n] for n in names if n in TLS12_SUITES)
    if args.tls_min_version == "VersionTLS12" and not tls12:
        raise SettingsError("--tls-cipher-suites: no TLS 1.2 suite for VersionTLS12")
    return WebhookSettings(
        listen=named("--listen", parse_listen, args.listen),
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        tls_min_version=args.tls_min_version,
        tls12_ciphers=tls12,
        kubeconfig=args.kubeconfig or environ.get("KUBECONFIG"),
        agent_account=args.agent_account,
        log_format=LogFormat(args.log_format),
    )
