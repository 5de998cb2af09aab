"""Which failed connections are TLS set-up problems, and what to tell the operator.

Theory of operation
-------------------
libpq checks certificates on the client side, before the server has said anything, so
psycopg raises a bare ``OperationalError`` without an SQLSTATE: the same shape as a
refused TCP connection or a server that went away. Left alone, ``map_psycopg_errors``
would call it a lost connection and the supervisor would retry it for ever. But a
certificate that does not verify today will not verify in a minute either: the fix is a
new certificate, a new CA file or another host name, i.e. an operator. So these failures
are recognised here by libpq's own messages (stable across libpq 13-18; they are what an
operator searches for) and made terminal by ``capture.errors`` (``CertificateError``,
exit 2 like any other set-up error).

``certificate_problem`` returns the message to raise, or None for anything else. The
message has three parts: what is wrong in operator words (the server's certificate does
not verify; the root certificate cannot be read; the client certificate or key cannot be
used; the server refused the client certificate), libpq's reason as it wrote it, and the
TLS settings of the connection that failed (``sslmode``, ``sslrootcert``, ``sslcert``,
``sslkey``) - file paths, never the password. The settings come from the connection
object psycopg attaches to the error (``Error.pgconn``), so they are what libpq used,
environment variables (``PGSSLROOTCERT``) included.

libpq reports an untrusted CA and an expired certificate alike, as OpenSSL's generic
"certificate verify failed". For that one case ``certificate_problem`` asks again,
itself: it opens one TLS connection to the same server (PostgreSQL's ``SSLRequest``, then
a handshake with Python's ``ssl`` and the same root certificates, host name check off)
and adds OpenSSL's specific reason ("certificate has expired", "unable to get local issuer
certificate"). This probe is best effort, bounded by a short timeout; when it fails the
message keeps libpq's words alone.
"""

from __future__ import annotations

import re
import socket
import ssl
import struct
from typing import Final

import psycopg

_PROBE_TIMEOUT: Final = 5.0
"""Seconds the probe may take to connect and shake hands (``_verify_reason``)."""

_SSL_REQUEST: Final = struct.pack("!ii", 8, 80877103)
"""PostgreSQL's SSLRequest packet: length 8, then the magic code 1234.5679."""

# libpq's messages (fe-secure-openssl.c, fe-secure-common.c), grouped by what the operator
# has to fix; each heading is followed by libpq's own line.
_SERVER_CERTIFICATE: Final = re.compile(
    r"server certificate for \".*\".* does not match host name"
    r"|could not get server's host name from server certificate"
    r"|SSL certificate's (?:name|address) (?:entry is missing|contains embedded null)"
    r"|certificate verify failed"
    r"|certificate has expired"
    r"|certificate is not yet valid"
    r"|self[- ]signed certificate"
    r"|unable to get local issuer certificate"
    r"|certificate revoked"
)
_NO_TLS: Final = re.compile(r"server does not support SSL, but SSL was required")
_ROOT_CERTIFICATE: Final = re.compile(
    r"root certificate file \".*\" does not exist"
    r"|could not read root certificate file"
    r"|could not load SSL certificate revocation list"
)
_CLIENT_CERTIFICATE: Final = re.compile(
    r"could not (?:open|read|load) certificate file"
    r"|could not (?:open|load|read) private key file"
    r"|private key file \".*\" (?:has group or world access|is not a regular file)"
    r"|certificate present, but not private key file"
    r"|certificate does not match private key file"
    r"|could not (?:open|read|stat) certificate|could not stat private key file"
)
_REFUSED_CLIENT_CERTIFICATE: Final = re.compile(
    r"alert (?:unknown ca|bad certificate|certificate expired|certificate unknown"
    r"|certificate revoked|certificate required|unsupported certificate)"
    r"|connection requires a valid client certificate"
    r"|certificate authentication failed for user"
)
_HEADINGS: Final = (
    (_SERVER_CERTIFICATE, "the server's certificate does not verify"),
    (_NO_TLS, "the server does not offer TLS and the connection requires it"),
    (_ROOT_CERTIFICATE, "the root certificate (sslrootcert) cannot be used"),
    (_CLIENT_CERTIFICATE, "the client certificate or key (sslcert, sslkey) cannot be used"),
    (_REFUSED_CLIENT_CERTIFICATE, "the server refused the client certificate"),
)
_SETTINGS: Final = ("sslmode", "sslrootcert", "sslcert", "sslkey")
# "connection to server at "db", port 5432 failed: " in front of each host's reason.
_HOST_PREFIX: Final = re.compile(
    r"^(?:connection failed:\s*)?(?:connection to server (?:at|on) .*? failed:\s*)?(?:FATAL:\s*)?"
)


def certificate_problem(exc: Exception) -> str | None:
    """The operator's message when ``exc`` (psycopg's, or the ADBC driver's, which uses
    libpq too) is a failed TLS set-up, else None.

    Example: ``the server's certificate does not verify: server certificate for
    "localhost" does not match host name "10.0.0.5" (server 10.0.0.5:5432,
    sslmode=verify-full, sslrootcert=/etc/wal2delta/tls/ca.crt)``.
    """
    for line in str(exc).splitlines():
        for pattern, heading in _HEADINGS:
            if pattern.search(line):
                return _message(exc, heading, _HOST_PREFIX.sub("", line.strip()).strip())
    return None


def _message(exc: Exception, heading: str, reason: str) -> str:
    settings = _connection_settings(exc)
    host, port = settings.get("host"), settings.get("port")
    address = settings.get("hostaddr") or host
    if "certificate verify failed" in reason and address and port and port.isdigit():
        detail = _verify_reason(address, int(port), settings.get("sslrootcert"), host or address)
        if detail is not None and detail not in reason:
            reason = f"{reason} ({detail})"
    where = [f"server {host}:{port}"] if host and port and not host.startswith("/") else []
    where += [f"{key}={settings[key]}" for key in _SETTINGS if settings.get(key)]
    return f"{heading}: {reason}" + (f" ({', '.join(where)})" if where else "")


def _connection_settings(exc: Exception) -> dict[str, str]:
    """The connection's host, port and TLS settings as libpq used them (no password);
    empty when the error carries no connection (ADBC's)."""
    pgconn = exc.pgconn if isinstance(exc, psycopg.Error) else None
    if pgconn is None:
        return {}
    wanted = {"host", "hostaddr", "port", *_SETTINGS}
    settings: dict[str, str] = {}
    try:
        for option in pgconn.info:
            keyword = option.keyword.decode()
            if keyword in wanted and option.val:
                settings[keyword] = option.val.decode(errors="replace")
        # The host libpq was talking to when it failed (the last one of a list).
        for keyword, value in (("host", pgconn.host), ("hostaddr", pgconn.hostaddr)):
            if value:
                settings[keyword] = value.decode(errors="replace")
    except (psycopg.Error, UnicodeDecodeError, AttributeError):
        return settings
    return settings


def _verify_reason(address: str, port: int, rootcert: str | None, name: str) -> str | None:
    """OpenSSL's specific reason the certificate of the server at ``address`` (``name``,
    sent as SNI as libpq does) does not verify against ``rootcert`` (``certificate has
    expired``), or None when the probe cannot tell."""
    if rootcert is None:
        return None
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False  # libpq reports a wrong host name by itself
        if rootcert == "system":
            context.load_default_certs()
        else:
            context.load_verify_locations(cafile=rootcert)
        with socket.create_connection((address, port), timeout=_PROBE_TIMEOUT) as sock:
            sock.sendall(_SSL_REQUEST)
            if sock.recv(1) != b"S":
                return None
            with context.wrap_socket(sock, server_hostname=name):
                return None  # it verifies now: nothing to add
    except ssl.SSLCertVerificationError as exc:
        return str(exc.verify_message) if exc.verify_message else None
    except (OSError, ValueError):
        return None


__all__ = ["certificate_problem"]
