"""Certificates made at test time, and a PostgreSQL cluster that serves TLS with them.

``TestPki`` makes a certificate authority and signs server and client certificates with
it (``cryptography``, EC P-256 keys): one for ``localhost``/``127.0.0.1``, one whose
validity ended yesterday, one from another authority the client does not trust. Nothing
is checked in: every run makes its own, so no certificate in the repository expires.

``tls_server`` starts a cluster with ``ssl=on`` and a ``pg_hba.conf`` that accepts TCP
connections only over TLS (``hostssl``), the test role by SCRAM, optionally requiring a
client certificate (``clientcert=verify-full``). PostgreSQL refuses a private key that
others can read, so keys are written 0600 and, when the tests run as root, handed to the
server's own user (``devtools.pgserver``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devtools.pgserver import SERVER_USER

_DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


@dataclass
class Authority:
    """A self-signed certificate authority that signs leaf certificates into ``directory``."""

    name: str
    directory: Path

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        self._subject = subject
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _DAY)
            .not_valid_after(_now() + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .sign(self._key, hashes.SHA256())
        )
        self.cert = self.directory / f"{self.name}.crt"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        expired: bool = False,
        client: bool = False,
    ) -> KeyPair:
        """A leaf certificate for ``common_name`` (and the subject alternative names);
        ``expired``: its validity ended yesterday."""
        key = ec.generate_private_key(ec.SECP256R1())
        start, end = (
            (_now() - 30 * _DAY, _now() - _DAY) if expired else (_now() - _DAY, _now() + 30 * _DAY)
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
        )
        names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair


def hand_to_server_user(*paths: Path) -> None:
    """When the tests run as root the server runs as ``SERVER_USER``: give it its files
    (PostgreSQL wants its private key owned by itself, or by root with mode 0640)."""
    if os.geteuid() != 0:
        return
    user = pwd.getpwnam(SERVER_USER)
    for path in paths:
        os.chown(path, user.pw_uid, user.pw_gid)
