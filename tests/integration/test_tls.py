"""TLS to the source: a certificate that verifies streams, one that does not stops the daemon.

Debian's PostgreSQL 15 (built with OpenSSL) serves TLS with certificates made for this
run (``tests.support.tls``): the test CA's certificate for ``localhost``, the same name
signed by another CA, and one whose validity ended yesterday. ``pg_hba.conf`` accepts TCP
only over TLS (``hostssl``), the daemon's role by SCRAM with the password from the
configuration file.

With ``sslmode=verify-full`` and the test CA as ``sslrootcert`` the real daemon
(``wal2delta run --endpos``) streams a table into Delta. A wrong host name, an untrusted
CA and an expired certificate each end ``wal2delta run`` by themselves with exit code 2
and a message naming the certificate problem, never the password; no reconnect is tried.
The cases that need no daemon (a missing root certificate, a client certificate or key
that cannot be used or that the server refuses) are checked on the replication
connection itself, and an expired certificate on the snapshot copies' ADBC reader.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import yaml
from psycopg import sql

from capture import ReplicationStream, current_wal_lsn
from capture.errors import CertificateError
from decoder import format_lsn
from devtools.pgserver import DEBIAN_PG15_BIN, LocalPostgres
from tests.conftest import TEST_SERVER_SETTINGS, server_dir
from tests.support.harness import log_events, run_cli, table_mismatches
from tests.support.tls import Authority, KeyPair, hand_to_server_user

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROLE = "wal2delta_tls"
CERT_ROLE = "wal2delta_tls_cert"
PASSWORD = "tls-Secret-Never-Printed-3"


@dataclass
class TlsSource:
    """A PostgreSQL 15 serving TLS, and the certificates of this run."""

    server: LocalPostgres
    ca: Authority
    other_ca: Authority
    good: KeyPair
    expired: KeyPair
    foreign: KeyPair
    client: KeyPair
    foreign_client: KeyPair

    def serve(self, pair: KeyPair) -> None:
        """Restart the server presenting ``pair`` (a restart, not a reload: the next
        connection is sure to get the new certificate)."""
        for source, name in ((pair.cert, "server.crt"), (pair.key, "server.key")):
            target = self.server.data_dir / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            hand_to_server_user(target)
        self.server.restart()

    def admin_dsn(self) -> str:
        # The superuser over TLS without verification: the tests' own side door.
        return f"{self.server.dsn()} sslmode=require"

    def dsn(self, host: str = "localhost", **tls: str) -> str:
        """The daemon role's DSN (no password: the configuration holds it)."""
        settings = {"sslmode": "verify-full", "sslrootcert": str(self.ca.cert), **tls}
        dsn = f"host={host} hostaddr=127.0.0.1 port={self.server.port} dbname=postgres user={ROLE}"
        return " ".join([dsn, *(f"{key}={value}" for key, value in settings.items())])


@pytest.fixture(scope="module")
def tls_source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsSource]:
    if not (DEBIAN_PG15_BIN / "postgres").exists():
        pytest.fail("PostgreSQL 15 is not installed at /usr/lib/postgresql/15/bin (make pg15)")
    pki = tmp_path_factory.mktemp("pki")
    ca, other_ca = Authority("test-ca", pki / "ca"), Authority("other-ca", pki / "other")
    # The server's certificate names localhost only: connecting to 127.0.0.1 by address
    # is a wrong host name.
    names = ("localhost",)
    source = TlsSource(
        server=LocalPostgres(
            server_dir("tls"),
            bin_dir=DEBIAN_PG15_BIN,
            settings={
                **TEST_SERVER_SETTINGS,
                "ssl": "on",
                "ssl_cert_file": "server.crt",
                "ssl_key_file": "server.key",
                "ssl_ca_file": "ca.crt",  # clients may present certificates of the test CA
            },
        ),
        ca=ca,
        other_ca=other_ca,
        good=ca.issue("server", "localhost", dns_names=names),
        expired=ca.issue("expired", "localhost", dns_names=names, expired=True),
        foreign=other_ca.issue("foreign", "localhost", dns_names=names),
        client=ca.issue("client", CERT_ROLE, client=True),
        foreign_client=other_ca.issue("foreign-client", CERT_ROLE, client=True),
    )
    server = source.server
    server.init()
    ca_copy = server.data_dir / "ca.crt"
    shutil.copyfile(ca.cert, ca_copy)
    hand_to_server_user(ca_copy)
    (server.data_dir / "pg_hba.conf").write_text(
        "local all all trust\n"
        f"hostssl all {CERT_ROLE} 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n"
        f"hostssl replication {CERT_ROLE} 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n"
        f"hostssl all {ROLE} 127.0.0.1/32 scram-sha-256\n"
        f"hostssl replication {ROLE} 127.0.0.1/32 scram-sha-256\n"
        f"hostssl all {server.superuser} 127.0.0.1/32 trust\n"
    )
    source.serve(source.good)  # the first start
    with psycopg.connect(source.admin_dsn(), autocommit=True) as conn:
        for role in (ROLE, CERT_ROLE):
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN SUPERUSER REPLICATION PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(PASSWORD)
                )
            )
    yield source
    server.destroy()
    shutil.rmtree(server.data_dir.parent, ignore_errors=True)


def write_config(path: Path, dsn: str, lake: Path, **source: object) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "password": PASSWORD,
                    "slot": "w2d_tls",
                    "publication": "w2d_tls",
                    "tables": ["public.items"],
                    "status_interval": "1s",
                    **source,
                },
                "sink": {"path": str(lake)},
                "spool": {"dir": str(lake.parent / "spool")},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "info"},
            }
        )
    )
    return path


def test_a_certificate_that_verifies_streams_into_delta(
    tls_source: TlsSource, tmp_path: Path
) -> None:
    tls_source.serve(tls_source.good)
    admin = tls_source.admin_dsn()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS public.items")
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
        conn.execute("DROP PUBLICATION IF EXISTS w2d_tls")
        conn.execute("CREATE PUBLICATION w2d_tls FOR TABLE public.items")
        conn.execute("SELECT pg_create_logical_replication_slot('w2d_tls', 'pgoutput')")
        conn.execute("INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 50) g")
        conn.execute("UPDATE items SET label = 'changed' WHERE id <= 10")
        conn.execute("DELETE FROM items WHERE id > 45")
        endpos = format_lsn(current_wal_lsn(conn))
    lake = tmp_path / "lake"
    config = write_config(tmp_path / "wal2delta.yaml", tls_source.dsn(), lake)
    try:
        result = run_cli("run", "-c", str(config), "--endpos", endpos)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-4000:]
        assert PASSWORD not in output
        assert any(e["event"] == "replication started" for e in log_events(result.stderr))
        # pg_hba.conf lets the daemon's role in over TLS only (hostssl).
        assert table_mismatches(admin, lake, ["public.items"]) == []
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = 'w2d_tls' AND NOT active"
            )


@pytest.mark.parametrize(
    ("served", "host", "reason"),
    [
        pytest.param(
            "good",
            "127.0.0.1",
            'does not match host name "127.0.0.1"',
            id="wrong-host-name",
        ),
        pytest.param(
            "foreign", "localhost", "unable to get local issuer certificate", id="untrusted-ca"
        ),
        pytest.param("expired", "localhost", "certificate has expired", id="expired"),
    ],
)
def test_a_certificate_that_does_not_verify_ends_the_run_with_exit_code_2(
    tls_source: TlsSource, tmp_path: Path, served: str, host: str, reason: str
) -> None:
    tls_source.serve(getattr(tls_source, served))
    config = write_config(
        tmp_path / "wal2delta.yaml",
        tls_source.dsn(host=host),
        tmp_path / "lake",
        # No bound on reconnects: only the classification can end this run.
        reconnect={"initial_delay": "100ms", "max_delay": "200ms", "max_attempts": 0},
    )
    result = run_cli("run", "-c", str(config), timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-4000:]
    assert PASSWORD not in output
    events = log_events(result.stderr)
    [stopped] = [e for e in events if e["event"] == "stopped by error"]
    assert stopped["error_type"] == "CertificateError"
    error = str(stopped["error"])
    assert "the server's certificate does not verify: " in error
    assert reason in error
    assert "sslmode=verify-full" in error
    assert f"sslrootcert={tls_source.ca.cert}" in error
    assert not [e for e in events if e["event"] == "retryable error; reconnecting"]


def test_check_config_names_a_certificate_that_does_not_verify(
    tls_source: TlsSource, tmp_path: Path
) -> None:
    """``check-config`` connects when the sink names a table's columns: a certificate that
    does not verify is a configuration error there too, not an unreachable source."""
    tls_source.serve(tls_source.good)
    config = write_config(tmp_path / "wal2delta.yaml", tls_source.dsn(host="127.0.0.1"), tmp_path)
    data = yaml.safe_load(config.read_text())
    data["sink"]["column_types"] = {"public.items": {"label": "string"}}
    config.write_text(yaml.safe_dump(data))
    result = run_cli("check-config", "-c", str(config), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the server's certificate does not verify: " in result.stderr
    assert 'does not match host name "127.0.0.1"' in result.stderr
    assert "could not be reached" not in result.stdout + result.stderr
    assert PASSWORD not in result.stdout + result.stderr


def open_replication(tls_source: TlsSource, **tls: str) -> None:
    """Open (and close) a replication connection as the daemon does."""
    conninfo = psycopg.conninfo.make_conninfo(tls_source.dsn(**tls), password=PASSWORD)
    ReplicationStream.open(conninfo, connect_timeout=5).close()


def test_a_missing_root_certificate_is_named(tls_source: TlsSource, tmp_path: Path) -> None:
    missing = tmp_path / "tls" / "ca.crt"
    with pytest.raises(CertificateError) as raised:
        open_replication(tls_source, sslrootcert=str(missing))
    message = str(raised.value)
    assert "the root certificate (sslrootcert) cannot be used: " in message
    assert f'root certificate file "{missing}" does not exist' in message
    assert raised.value.exit_code == 2
    assert not raised.value.retryable
    assert PASSWORD not in message


def test_a_client_certificate_the_server_refuses_is_named(tls_source: TlsSource) -> None:
    tls_source.serve(tls_source.good)
    client = tls_source.client
    good_client = {"user": CERT_ROLE, "sslcert": str(client.cert), "sslkey": str(client.key)}
    open_replication(tls_source, **good_client)  # the CA's client certificate is let in

    foreign = tls_source.foreign_client
    with pytest.raises(CertificateError) as raised:
        open_replication(
            tls_source, user=CERT_ROLE, sslcert=str(foreign.cert), sslkey=str(foreign.key)
        )
    assert "the server refused the client certificate: " in str(raised.value)
    assert "alert unknown ca" in str(raised.value)
    assert f"sslcert={foreign.cert}" in str(raised.value)

    with pytest.raises(CertificateError) as raised:
        open_replication(tls_source, user=CERT_ROLE)
    assert "the server refused the client certificate: " in str(raised.value)
    assert "connection requires a valid client certificate" in str(raised.value)


def test_a_client_key_others_can_read_is_named(tls_source: TlsSource, tmp_path: Path) -> None:
    tls_source.serve(tls_source.good)
    key = tmp_path / "client.key"
    shutil.copyfile(tls_source.client.key, key)
    key.chmod(0o644)
    with pytest.raises(CertificateError) as raised:
        open_replication(
            tls_source, user=CERT_ROLE, sslcert=str(tls_source.client.cert), sslkey=str(key)
        )
    message = str(raised.value)
    assert "the client certificate or key (sslcert, sslkey) cannot be used: " in message
    assert "has group or world access" in message
    assert raised.value.exit_code == 2


def test_the_snapshot_reader_names_a_certificate_that_does_not_verify(
    tls_source: TlsSource,
) -> None:
    """The ADBC reader of snapshot copies uses libpq too; it stops the same way."""
    from capture.adbcreader import AdbcSnapshotReader

    tls_source.serve(tls_source.expired)
    conninfo = psycopg.conninfo.make_conninfo(tls_source.dsn(), password=PASSWORD)
    with pytest.raises(CertificateError) as raised:
        AdbcSnapshotReader(conninfo, "00000003-00000002-1")
    message = str(raised.value)
    assert "the server's certificate does not verify: " in message
    assert "certificate verify failed" in message
    assert raised.value.exit_code == 2
    assert PASSWORD not in message
