"""Small helpers the integration and end-to-end tests share: the CLI, the daemon, the slot,
waiting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from capture import PostgresCatalog, current_wal_lsn, slot_state
from config import AppConfig
from daemon import Supervisor, sink_settings
from decoder import Lsn, format_lsn, parse_lsn
from sink import DeltaSink, table_path
from tests.support.oracle import compare_table

ROOT = Path(__file__).resolve().parents[2]


def child_environment(**extra: str) -> dict[str, str]:
    """The environment for a child Python process that must import this checkout."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_cli(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``wal2delta ARGS`` to completion and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env=child_environment(**env),
    )


def log_events(text: str) -> list[dict[str, object]]:
    """The JSON log events in a daemon's output (lines that are not JSON are skipped)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def start_daemon(config: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """Start ``wal2delta run -c CONFIG`` in the background, its log appended to ``log``.

    The log goes to a file: a pipe nobody reads would block the daemon when full.
    """
    with log.open("ab") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "run", "-c", str(config), *extra],
            cwd=ROOT,
            env=child_environment(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def confirmed_flush(dsn: str, slot: str) -> int:
    """The slot's ``confirmed_flush_lsn`` as the server records it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = slot_state(conn, slot)
    assert state is not None
    assert state.confirmed_flush_lsn is not None
    return state.confirmed_flush_lsn


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except psycopg.OperationalError:
            pass  # the server may be restarting
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def wait_for_flush(dsn: str, slot: str, target: int, timeout: float = 180) -> None:
    """Wait until the slot exists and its confirmed flush position reaches ``target``."""

    def reached() -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            state = slot_state(conn, slot)
        flushed = state.confirmed_flush_lsn if state is not None else None
        return flushed is not None and flushed >= target

    wait_until(reached, timeout, f"slot {slot} to confirm its flush position")


@dataclass
class Serving:
    """A supervisor running on a thread (``serving``): the thread and what it ended with."""

    thread: threading.Thread
    errors: list[BaseException] = field(default_factory=list)


@contextmanager
def serving(
    service: Supervisor,
    stop: threading.Event,
    *,
    join_timeout: float = 60,
    before_join: Callable[[], None] | None = None,
) -> Iterator[Serving]:
    """Run ``service`` on a thread for the block; at its end set ``stop``, call
    ``before_join`` (something that unblocks the service) and wait for the thread."""
    running = Serving(threading.Thread(target=lambda: _run_service(service, running)))
    running.thread.start()
    try:
        yield running
    finally:
        stop.set()
        if before_join is not None:
            before_join()
        running.thread.join(join_timeout)


def _run_service(service: Supervisor, running: Serving) -> None:
    try:
        service.run()
    except BaseException as exc:
        running.errors.append(exc)


def run_daemon(dsn: str, config: AppConfig, spark_session: Any, endpos: int) -> None:
    """One daemon run to ``endpos`` with a fresh catalog-backed Delta sink, as the CLI wires
    it (a new run after a restart, in this process)."""
    with PostgresCatalog(dsn) as catalog:
        sink = DeltaSink(spark_session, sink_settings(config), catalog=catalog)
        Supervisor(config, sink, endpos=Lsn(endpos)).run()


def table_mismatches(dsn: str, lake: Path | str, tables: Sequence[str]) -> list[str]:
    """Every table of ``dsn`` compared with its Delta table (``tests.support.oracle``); each
    must have rows. Returns the descriptions of those that differ."""
    found = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in tables:
            schema, _, table = name.partition(".")
            comparison = compare_table(conn, name, table_path(str(lake), schema, table))
            assert comparison.source_rows > 0, f"{name} is empty in the source"
            if not comparison.matches:
                found.append(comparison.describe())
    return found


def run_statements(dsn: str, statements: Sequence[str], *, one_transaction: bool = False) -> int:
    """Run ``statements`` (each its own transaction unless told); return the WAL position."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if one_transaction:
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement.encode())
        else:
            for statement in statements:
                conn.execute(statement.encode())
        return current_wal_lsn(conn)


@dataclass(frozen=True)
class CommittedAt:
    """Where one transaction's commit record lies in the WAL."""

    commit_start: int
    """A slot restarted at ``confirmed_flush`` skips exactly the transactions whose commit
    record starts before it: a daemon that does not have the transaction may acknowledge up to
    here, no further. A keepalive's walEnd can reach this very point (the walsender has read
    the transaction's last change record), so tests may not demand less."""
    wal_end: int
    """The WAL position after the commit: an ``endpos`` that takes the transaction in."""


def run_transaction(dsn: str, *statements: str) -> CommittedAt:
    """Run ``statements`` as one transaction; find its commit record with pg_walinspect."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The test servers run with synchronous_commit off; pg_walinspect reads flushed WAL.
        conn.execute("SET synchronous_commit = on")
        since = current_wal_lsn(conn)
        with conn.transaction():
            for statement in statements:
                conn.execute(statement.encode())
            xid_row = conn.execute("SELECT pg_current_xact_id()::xid::text").fetchone()
        wal_end = current_wal_lsn(conn)
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        row = conn.execute(
            "SELECT start_lsn::text FROM"
            " pg_get_wal_records_info(%s::pg_lsn, pg_current_wal_flush_lsn())"
            " WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'"
            " AND xid::text = %s",
            (format_lsn(since), xid_row[0] if xid_row else None),
        ).fetchone()
    assert row is not None, "the transaction's commit record is not in the WAL range"
    return CommittedAt(commit_start=parse_lsn(row[0]), wal_end=wal_end)


WAL_PAGE = 8192
"""``wal_block_size`` of the test servers (PostgreSQL's default)."""

_PAD_PREFIX = "wal2delta-pad"
_PAD_OVERHEAD = 24 + 5 + 24 + len(_PAD_PREFIX) + 1
"""Bytes of a non-transactional logical message record besides its content: the record
header, a long data header, ``xl_logical_message`` up to the prefix, and the prefix."""


def end_wal_on_page_boundary(conn: psycopg.Connection[Any], attempts: int = 20) -> int:
    """Write logical messages (which no publication streams) until the last WAL record
    ends exactly on a page boundary, flushed; return that boundary (PostgreSQL 17+).

    The insert position then reads a page header (24 bytes) past the boundary: the
    position nothing reaches (``capture.slots.wal_end_position``). Other writers (the
    bgwriter, autovacuum) may add a record meanwhile; the padding starts over then.
    """
    for _ in range(attempts):
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        room = WAL_PAGE - parse_lsn(str(row[0])) % WAL_PAGE
        size = room - _PAD_OVERHEAD
        if size < 256:  # too close for one record with a long data header: cross it
            size = 512
        conn.execute(
            "SELECT pg_logical_emit_message(false, %s, repeat('x', %s), true)",
            (_PAD_PREFIX, size),
        )
        row = conn.execute(
            "SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text"
        ).fetchone()
        assert row is not None
        insert, flush = parse_lsn(str(row[0])), parse_lsn(str(row[1]))
        if insert % WAL_PAGE == 24 and flush == insert - 24:
            return flush
    pytest.fail(f"the WAL did not end on a page boundary in {attempts} attempts")


def insert_position(conn: psycopg.Connection[Any]) -> int:
    """``pg_current_wal_insert_lsn()`` as the server reports it (a start position)."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(str(row[0]))
