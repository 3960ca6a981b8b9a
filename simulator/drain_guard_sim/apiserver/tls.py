"""A throwaway CA and a serving certificate for the simulated API server on loopback.

client-go (kubectl) sends a kubeconfig's bearer token only over TLS, so a simulator that
``kubectl`` may write to must serve HTTPS: ``drain-guard-sim serve`` does, with a CA made here
for this run and written into every kubeconfig (``certificate-authority-data``). Keys are
EC P-256, valid for a day: nothing here is meant to outlive the process.

The same CA signs client certificates (``client_certificate``), as a cluster's signer does
the kubelet's: the server asks for one in the handshake and the API server takes the user
from its subject (``SimApiServer``).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Sequence
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
    """PEM files of a CA (and its key, to sign client certificates) and of a server
    certificate it signed for 127.0.0.1 and localhost (and the addresses asked for)."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    ca_key_file: Path

    @classmethod
    def generate(
        cls, directory: Path, addresses: Sequence[str] = (), names: Sequence[str] = ()
    ) -> ServingCert:
        """Make a CA and a serving certificate in ``directory`` (the key files mode 0600),
        for loopback and ``addresses`` (a real API server's: its advertised address and the
        ``kubernetes`` Service's, which pods connect to) and DNS ``names`` (a Service's, as
        OpenShift's service CA issues them)."""
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
                        *(x509.DNSName(name) for name in names),
                        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                        *(x509.IPAddress(ipaddress.ip_address(a)) for a in addresses),
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
        paths = cls(
            directory / "ca.crt",
            directory / "apiserver.crt",
            directory / "apiserver.key",
            directory / "ca.key",
        )
        paths.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        paths.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        for path, private in ((paths.key_file, key), (paths.ca_key_file, ca_key)):
            path.touch(mode=0o600)
            path.write_bytes(_private_pem(private))
        return paths

    def client_certificate(self, user: str, groups: Sequence[str] = ()) -> bytes:
        """A client certificate for ``user`` (subject CN) in ``groups`` (subject O), signed by
        the CA, followed by its key: one PEM, as the kubelet keeps its pair
        (``kubelet-client-<time>.pem``). A new key each call, as each rotation has."""
        loaded = serialization.load_pem_private_key(self.ca_key_file.read_bytes(), None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        ca = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(loaded.public_key()), False
            )
            .sign(loaded, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM) + _private_pem(key)

    def server_context(self) -> ssl.SSLContext:
        """Serving context that asks for a client certificate of this CA and takes a client
        without one too (tokens), as kube-apiserver with ``--client-ca-file`` does."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(self.ca_file)
        return context


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
