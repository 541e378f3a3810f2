"""Throw-away TLS material for lab regions: a CA and a server certificate it signed, as PEM files.

For tests and local labs only: keys are unencrypted files (mode 0600) and the CA lives as long as the lab.
The server certificate names ``localhost`` and ``127.0.0.1``, where lab regions listen; its key is written
as PKCS#8, the form Pulsar's brokers read.
"""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class TlsFiles:
    ca: pathlib.Path
    """The CA certificate: what clients trust (``tls_trust_certs_file``, ``ca_file``)."""
    cert: pathlib.Path
    key: pathlib.Path

    def broker_conf(self, *, web_port: int, broker_port: int) -> dict[str, str]:
        """standalone.conf / broker.conf keys that add TLS listeners on the given ports."""
        return {
            "webServicePortTls": str(web_port),
            "brokerServicePortTls": str(broker_port),
            "tlsCertificateFilePath": str(self.cert),
            "tlsKeyFilePath": str(self.key),
            "tlsTrustCertsFilePath": str(self.ca),
            # The TLS connector needs its own acceptor and selector threads: the lab's lean pool of 4
            # cannot start both connectors.
            "numHttpServerThreads": "8",
        }


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def self_signed(directory: pathlib.Path, *, days: int = 7) -> TlsFiles:
    """Write ``ca.pem``, ``server.pem`` and ``server.key`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days))
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("GeoSync lab CA"))
        .issuer_name(_name("GeoSync lab CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(ca=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server.key")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.touch(mode=0o600)
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return files
