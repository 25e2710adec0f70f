"""A throwaway PKI for the emulated API server: a CA, a server certificate and a client certificate.

The real entry points are tested against the emulated API over TLS, as a
cluster serves it: the kubeconfig (or the service account's ``ca.crt``) names
the CA, and a CA that does not match must be refused. Needs ``cryptography``.
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

#: The names the server certificate is valid for, unless told otherwise.
SERVER_NAMES = ("kube.test", "localhost", "127.0.0.1")


@dataclass(frozen=True)
class Pki:
    """PEM bytes of a CA and the certificates it signed."""

    ca_pem: bytes
    server_pem: bytes
    server_key: bytes
    client_pem: bytes
    client_key: bytes

    def server_context(self, directory: Path, *, require_client_cert: bool = False) -> ssl.SSLContext:
        """An SSL context for the server side (``load_cert_chain`` reads files: written to ``directory``)."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "server.pem").write_bytes(self.server_pem)
        (directory / "server.key").write_bytes(self.server_key)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=self.ca_pem.decode())
        context.load_cert_chain(directory / "server.pem", directory / "server.key")
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        return context


def _cert(subject: str, key: ec.EllipticCurvePrivateKey,
          issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
          *, ca: bool = False, names: tuple[str, ...] = ()) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer[0] if issuer else name).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if names else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(subject_alt_names(names), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def subject_alt_names(names: tuple[str, ...]) -> x509.SubjectAlternativeName:
    """A server certificate's names: an IP address where the name is one, a DNS name otherwise."""
    alt: list[x509.GeneralName] = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(alt)


def make_pki(*, server_names: tuple[str, ...] = SERVER_NAMES, client: str = "alice") -> Pki:
    """A fresh CA with a server certificate for ``server_names`` and a client certificate for ``client``."""

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _cert("podmortem-test-ca", ca_key, None, ca=True)
    issuer = (ca.subject, ca_key)
    server = _cert(server_names[0], server_key, issuer, names=server_names)
    client_cert = _cert(client, client_key, issuer)
    enc = serialization.Encoding.PEM
    return Pki(ca_pem=ca.public_bytes(enc), server_pem=server.public_bytes(enc),
               server_key=pem_key(server_key), client_pem=client_cert.public_bytes(enc),
               client_key=pem_key(client_key))
