"""The certificates and keys a real control plane needs, made fresh for each start.

kube-apiserver is started as a managed cluster starts it: TLS on its port, client certificates
checked against a CA, service-account tokens signed with their own key, and a client certificate for
the calls it makes to kubelets (here kwok's server). Each component that calls the API has its own
identity, so RBAC and the Node authorizer decide for it as they would in a cluster:
``system:masters`` for the admin, ``system:kube-controller-manager``, ``system:kube-scheduler``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from podmortem_demo.emulated import tls

#: Names the API server's certificate is valid for: loopback, and what pods call it by.
API_SERVER_NAMES = ("localhost", "127.0.0.1", "10.96.0.1", "kubernetes", "kubernetes.default",
                    "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")


@dataclass(frozen=True)
class Files:
    """Where each PEM file of one control plane's PKI lies."""

    ca: Path
    ca_key: Path
    apiserver: Path
    apiserver_key: Path
    kubelet_client: Path
    kubelet_client_key: Path
    kwok_serving: Path
    kwok_serving_key: Path
    sa_key: Path
    sa_pub: Path
    front_proxy_ca: Path
    front_proxy_client: Path
    front_proxy_client_key: Path


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Authority:
    """A CA that signs the control plane's serving and client certificates."""

    def __init__(self, name: str = "podmortem-control-plane-ca") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(
                         digital_signature=True, key_cert_sign=True, crl_sign=True,
                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, groups: tuple[str, ...] = (), names: tuple[str, ...] = (),
              ) -> tuple[bytes, bytes]:
        """(certificate, key) PEM: a server certificate when ``names`` are given, else a client one."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if names else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (x509.CertificateBuilder().subject_name(x509.Name(attributes))
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if names:
            builder = builder.add_extension(tls.subject_alt_names(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def write_pki(directory: Path, authority: Authority) -> Files:
    """Every file kube-apiserver, the controller manager and kwok are started with."""
    directory.mkdir(parents=True, exist_ok=True)

    def put(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    ca = put("ca.crt", authority.pem)
    ca_key = put("ca.key", _pem_key(authority.key))
    apiserver, apiserver_key = authority.issue("kube-apiserver", names=API_SERVER_NAMES)
    kubelet_client, kubelet_client_key = authority.issue(
        "kube-apiserver-kubelet-client", groups=("kubeadm:cluster-admins",))
    kwok_serving, kwok_serving_key = authority.issue("kwok", names=("localhost", "127.0.0.1"))
    # The aggregation layer's own CA, as kubeadm makes it: the API server proves with this client
    # certificate that it forwarded a request, and components read the requester from its headers.
    front_proxy = Authority("podmortem-front-proxy-ca")
    front_client, front_client_key = front_proxy.issue("front-proxy-client")
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_pub = sa.public_key().public_bytes(serialization.Encoding.PEM,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    return Files(
        ca=ca, ca_key=ca_key,
        apiserver=put("apiserver.crt", apiserver), apiserver_key=put("apiserver.key", apiserver_key),
        kubelet_client=put("apiserver-kubelet-client.crt", kubelet_client),
        kubelet_client_key=put("apiserver-kubelet-client.key", kubelet_client_key),
        kwok_serving=put("kwok.crt", kwok_serving), kwok_serving_key=put("kwok.key", kwok_serving_key),
        sa_key=put("sa.key", _pem_key(sa)), sa_pub=put("sa.pub", sa_pub),
        front_proxy_ca=put("front-proxy-ca.crt", front_proxy.pem),
        front_proxy_client=put("front-proxy-client.crt", front_client),
        front_proxy_client_key=put("front-proxy-client.key", front_client_key),
    )
