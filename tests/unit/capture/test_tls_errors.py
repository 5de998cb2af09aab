"""Which failed connections ``map_psycopg_errors`` makes a terminal ``CertificateError``
(``capture.tls``): libpq's certificate and key messages, as psycopg raises them for a
connection attempt; a TLS connection that breaks (a server restarting) stays a retried
lost connection. The messages are libpq's own wording (the integration test
``tests/integration/test_tls.py`` gets them from a real server)."""

from __future__ import annotations

import psycopg
import pytest

from capture.errors import (
    EXIT_CONFIG,
    CaptureError,
    CertificateError,
    ReplicationConnectionLostError,
    map_psycopg_errors,
)

PREFIX = 'connection failed: connection to server at "10.0.4.17", port 5432 failed: '


def mapped(message: str) -> CaptureError:
    with pytest.raises(CaptureError) as raised, map_psycopg_errors("connecting to the source"):
        raise psycopg.OperationalError(message)
    return raised.value


@pytest.mark.parametrize(
    ("libpq", "heading"),
    [
        (
            'server certificate for "db.internal" does not match host name "10.0.4.17"',
            "the server's certificate does not verify",
        ),
        (
            'server certificate for "db.internal" (and 1 other name) does not match host '
            'name "10.0.4.17"',
            "the server's certificate does not verify",
        ),
        ("SSL error: certificate verify failed", "the server's certificate does not verify"),
        (
            'root certificate file "/etc/wal2delta/tls/ca.crt" does not exist\nEither provide '
            "the file, use the system's trusted roots with sslrootcert=system, or change "
            "sslmode to disable server certificate verification.",
            "the root certificate (sslrootcert) cannot be used",
        ),
        (
            'could not read root certificate file "/etc/wal2delta/tls": shutdown while in init',
            "the root certificate (sslrootcert) cannot be used",
        ),
        (
            'private key file "/etc/wal2delta/tls/client.key" has group or world access; file '
            "must have permissions u=rw (0600) or less if owned by the current user",
            "the client certificate or key (sslcert, sslkey) cannot be used",
        ),
        (
            'certificate present, but not private key file "/etc/wal2delta/tls/client.key"',
            "the client certificate or key (sslcert, sslkey) cannot be used",
        ),
        ("SSL error: tlsv1 alert unknown ca", "the server refused the client certificate"),
        (
            "FATAL:  connection requires a valid client certificate",
            "the server refused the client certificate",
        ),
        (
            "server does not support SSL, but SSL was required",
            "the server does not offer TLS and the connection requires it",
        ),
    ],
)
def test_a_certificate_or_key_problem_is_terminal_and_named(libpq: str, heading: str) -> None:
    error = mapped(PREFIX + libpq)
    assert isinstance(error, CertificateError)
    assert error.exit_code == EXIT_CONFIG
    assert not error.retryable
    first_line = libpq.splitlines()[0].removeprefix("FATAL:  ")
    assert str(error) == f"connecting to the source: {heading}: {first_line}"
    assert isinstance(error.__cause__, psycopg.OperationalError)


@pytest.mark.parametrize(
    "libpq",
    [
        "SSL SYSCALL error: EOF detected",
        "SSL connection has been closed unexpectedly",
        "server closed the connection unexpectedly",
        "Connection refused\n\tIs the server running on that host and accepting TCP/IP "
        "connections?",
    ],
)
def test_a_tls_connection_that_breaks_is_still_a_retried_lost_connection(libpq: str) -> None:
    error = mapped(PREFIX + libpq)
    assert type(error) is ReplicationConnectionLostError
    assert error.retryable
