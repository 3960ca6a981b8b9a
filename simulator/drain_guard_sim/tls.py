"""A throwaway CA and a serving certificate for the simulated API server on loopback.

client-go (kubectl) sends a kubeconfig's bearer token only over TLS, so a simulator that
``kubectl`` may write to must serve HTTPS: ``drain-guard-sim serve`` does, with a CA made here
for this run and written into every kubeconfig (``certificate-authority-data``). Keys are
EC P-256, valid for a day: nothing here is meant to outlive the process.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ServingCert"]

VALIDITY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class ServingCert:
    """PEM files of a CA and of a server certificate it signed for 127.0.0.1 and localhost."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    @classmethod
    def generate(cls, directory: Path) -> ServingCert:
        """Make a CA and a serving certificate in ``directory`` (the key files mode 0600)."""
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        start, end = now - datetime.timedelta(minutes=5), now + VALIDITY
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "drain-guard-sim CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
            .sign(ca_key, hashes.SHA256())
        )
        paths = cls(directory / "ca.crt", directory / "apiserver.crt", directory / "apiserver.key")
        paths.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        paths.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        paths.key_file.touch(mode=0o600)
        paths.key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return paths

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context
