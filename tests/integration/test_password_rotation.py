"""A rotated password file is used by the next connection: no restart after a rotation.

The server authenticates the daemon's role with SCRAM (a ``pg_hba.conf`` line ahead of the
test cluster's ``trust`` lines); the daemon reads ``source.password_file``. The password
is changed on the server and in the file, the walsender is terminated, and the daemon's
next session connects with the new password and goes on streaming. The failing source
of ``wal2delta run`` prints no password either, nor does the traceback of a replication
connection that fails inside ``capture`` (psycopg's frames hold the connection string).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import structlog
from psycopg import sql

from capture import ReplicationStream
from config import parse_config
from daemon.logging import configure_logging
from daemon.supervisor import Supervisor
from daemon.wiring import capture_settings, prepare_configured_source
from decoder import Wal2DeltaError
from devtools.pgserver import LocalPostgres, free_tcp_port
from tests.conftest import TEST_SERVER_SETTINGS, server_dir
from tests.support.configs import make_config
from tests.support.harness import run_cli, serving, wait_until
from tests.support.model_sink import ModelSink

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROLE = "wal2delta_rotating"
FIRST = "first-Password-1"
SECOND = "second-Password-2"


@pytest.fixture
def scram_server() -> Iterator[LocalPostgres]:
    """A cluster where ``ROLE`` must give its password (SCRAM), over TCP and replication."""
    server = LocalPostgres(server_dir("rotation"), settings=TEST_SERVER_SETTINGS)
    server.init()
    hba = server.data_dir / "pg_hba.conf"
    hba.write_text(
        f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n"
        f"host replication {ROLE} 127.0.0.1/32 scram-sha-256\n" + hba.read_text()
    )
    server.start()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER REPLICATION PASSWORD {}").format(
                sql.Identifier(ROLE), sql.Literal(FIRST)
            )
        )
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    yield server
    server.destroy()
    shutil.rmtree(server.data_dir.parent, ignore_errors=True)


def write_secret(path: Path, password: str) -> None:
    """Replace the file atomically, as the kubelet swaps a mounted Secret's files."""
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(password + "\n")
    staged.replace(path)


def role_dsn(server: LocalPostgres, password: str | None = None) -> str:
    dsn = f"host=127.0.0.1 port={server.port} dbname=postgres user={ROLE}"
    return dsn if password is None else f"{dsn} password={password}"


def test_a_rotated_password_file_is_used_by_the_next_session(
    scram_server: LocalPostgres, tmp_path: Path
) -> None:
    admin = scram_server.dsn()
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(role_dsn(scram_server)).close()  # no trust for this role
    secret = tmp_path / "secrets" / "password"
    secret.parent.mkdir()
    write_secret(secret, FIRST)
    config = make_config(
        role_dsn(scram_server),
        tmp_path / "lake",
        ["public.items"],
        source={
            "password_file": str(secret),
            "reconnect": {"initial_delay": "200ms", "max_delay": "1s"},
        },
    )
    prepare_configured_source(config)
    model = ModelSink()
    stop = threading.Event()
    service = Supervisor(config, model, stop_event=stop)

    def rows() -> int:
        return len(model.tables.get("public.items", {}))

    with serving(service, stop) as running:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (1, 'before the rotation')")
        wait_until(lambda: rows() == 1, 60, "the first row")

        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(ROLE), sql.Literal(SECOND)
                )
            )
        write_secret(secret, SECOND)
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(role_dsn(scram_server, FIRST)).close()
        with psycopg.connect(admin, autocommit=True) as conn:
            [(terminated,)] = conn.execute(
                "SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active_pid IS NOT NULL",
                (config.source.slot,),
            ).fetchall()
        assert terminated == 1

        wait_until(lambda: service.metrics.reconnects._value.get() >= 1, 60, "a reconnect")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (2, 'after the rotation')")
        wait_until(lambda: rows() == 2, 60, "the row written after the rotation")
        assert service.state.connected
        with psycopg.connect(admin, autocommit=True) as conn:
            [(user,)] = conn.execute(
                "SELECT r.active_pid IS NOT NULL AND a.usename = %s "
                "FROM pg_replication_slots r JOIN pg_stat_activity a ON a.pid = r.active_pid "
                "WHERE r.slot_name = %s",
                (ROLE, config.source.slot),
            ).fetchall()
        assert user is True, "the new session streams as the rotated role"
    assert not running.errors
    assert model.tables["public.items"][(repr(2),)]["label"] == "after the rotation"


def test_a_failing_source_run_prints_no_password(tmp_path: Path) -> None:
    """``wal2delta run`` against a port nothing listens on: errors, no password."""
    password = "run-Secret-Never-Printed-7"
    config = tmp_path / "wal2delta.yaml"
    config.write_text(
        f"""
source:
  dsn: "host=127.0.0.1 port={free_tcp_port()} dbname=app user=wal2delta connect_timeout=2"
  password: {password}
  slot: wal2delta_app
  publication: wal2delta_app
  create_publication: false
  reconnect: {{initial_delay: 100ms, max_delay: 200ms, max_attempts: 1}}
sink:
  path: {tmp_path / "lake"}
metrics: {{enabled: false}}
logging: {{format: json, level: debug}}
"""
    )
    result = run_cli("run", "-c", str(config), timeout=240)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "stopped by error" in output, output[-3000:]
    assert password not in output


def test_a_failed_replication_connect_logs_its_traceback_without_the_password(
    restored_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    password = "traceback-Secret-Never-Logged-9"
    config = parse_config(
        {
            "source": {
                "dsn": f"host=127.0.0.1 port={free_tcp_port()} dbname=app user=wal2delta",
                "password": password,
                "slot": "wal2delta_app",
                "publication": "wal2delta_app",
                "create_publication": False,
            },
            "sink": {"path": "/tmp/unused-lake"},
        },
        environ={},
    )
    settings = capture_settings(config)
    configure_logging("json", "debug")
    try:
        ReplicationStream.open(settings.conninfo, connect_timeout=2)
    except Wal2DeltaError as exc:
        structlog.get_logger("wal2delta.test").exception("replication failed")
        control = structlog.processors.dict_tracebacks(None, "error", {"exc_info": exc})
    output = capsys.readouterr()
    [event] = [json.loads(line) for line in output.err.splitlines() if line.startswith("{")]
    frames = [frame for chained in event["exception"] for frame in chained["frames"]]
    assert any(frame["name"] == "open" for frame in frames)  # capture/stream.py
    assert any("psycopg" in frame["filename"] for frame in frames)
    assert password not in output.out + output.err
    # structlog's own default would have printed it from psycopg's frame locals.
    assert password in json.dumps(control, default=str)
