"""A lost slot with ``snapshot.on_slot_loss: resync``, end to end on PostgreSQL 18.

The slot is dropped, then invalidated (``max_slot_wal_keep_size``), each while the daemon
is stopped and rows are inserted, updated and deleted at the source. The next run replaces
the slot and copies every table again while streaming: every Delta table ends equal to
the source - rows deleted during the gap gone - and every Delta version written after the
gap holds a whole table (the old content or the copy), never an empty or half-copied one.
With the default ``stop`` the run refuses, naming the setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable

from capture.errors import SlotInvalidatedError, SlotNotFoundError
from capture.slots import current_wal_lsn, slot_state
from config import AppConfig
from daemon.supervisor import Supervisor
from daemon.wiring import sink_settings
from sink import DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.oracle import compare_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

SLOT = "w2d_slot_loss"
TABLES = ("public.accounts", "public.events")
SCHEMA = """
CREATE TABLE public.accounts (id int PRIMARY KEY, balance int NOT NULL);
CREATE TABLE public.events (id bigint PRIMARY KEY, note text);
INSERT INTO public.accounts SELECT g, g FROM generate_series(1, 20000) g;
INSERT INTO public.events SELECT g, 'e' || g FROM generate_series(1, 5000) g;
"""
GAP = [
    "DELETE FROM accounts WHERE id % 10 = 0",
    "UPDATE accounts SET balance = -balance WHERE id % 7 = 0",
    "INSERT INTO events SELECT g, 'gap' FROM generate_series(5001, 6000) g",
    "DELETE FROM events WHERE id <= 100",
]


def _config(dsn: str, lake: Path, on_slot_loss: str) -> AppConfig:
    return make_config(
        dsn,
        lake,
        list(TABLES),
        slot=SLOT,
        snapshot={"mode": "initial", "on_slot_loss": on_slot_loss},
    )


def _run_to_now(config: AppConfig, spark_session: Any) -> None:
    with psycopg.connect(config.source.conninfo(), autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    sink = DeltaSink(spark_session, sink_settings(config))
    try:
        Supervisor(config, sink, endpos=endpos).run()
    finally:
        sink.close()


def _versions(lake: Path) -> dict[str, int]:
    return {t: DeltaTable(_path(lake, t)).version() for t in TABLES}


def _path(lake: Path, table: str) -> str:
    schema, name = table.split(".")
    return table_path(str(lake), schema, name)


def _assert_whole_after(lake: Path, before: dict[str, int], counts: dict[str, set[int]]) -> None:
    """Every version written after ``before`` holds one of the whole-table row counts."""
    for table in TABLES:
        delta = DeltaTable(_path(lake, table))
        for version in range(before[table] + 1, delta.version() + 1):
            delta.load_as_version(version)
            rows = delta.to_pyarrow_table(columns=["id"]).num_rows
            assert rows in counts[table], f"{table} version {version} holds {rows} rows"


def _source_counts(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, int]:
    out = {}
    for table in TABLES:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        out[table] = int(str(row[0]))
    return out


def _assert_equal(conn: psycopg.Connection[tuple[object, ...]], lake: Path) -> None:
    for table in TABLES:
        comparison = compare_table(conn, table, _path(lake, table))
        assert comparison.matches, comparison.describe()


def test_a_dropped_and_an_invalidated_slot_are_replaced_and_every_table_copied_online(
    pg18_dsn: str, tmp_path: Path, spark_session: Any
) -> None:
    lake = tmp_path / "lake"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    _run_to_now(_config(pg18_dsn, lake, "resync"), spark_session)

    # 1. The slot is dropped while the daemon is stopped.
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        before_counts = _source_counts(conn)
        conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
        for statement in GAP:
            conn.execute(statement)  # type: ignore[arg-type]
        after_counts = _source_counts(conn)
    with pytest.raises(SlotNotFoundError, match="on_slot_loss: resync"):
        _run_to_now(_config(pg18_dsn, lake, "stop"), spark_session)
    before = _versions(lake)
    _run_to_now(_config(pg18_dsn, lake, "resync"), spark_session)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _assert_equal(conn, lake)
    _assert_whole_after(lake, before, {t: {before_counts[t], after_counts[t]} for t in TABLES})

    # 2. The slot is invalidated: the server removes WAL it still needs.
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        conn.execute("SELECT pg_reload_conf()")
        try:
            before_counts = _source_counts(conn)
            conn.execute("DELETE FROM accounts WHERE id % 3 = 0")
            conn.execute("UPDATE events SET note = 'invalidated' WHERE id % 2 = 0")
            for _ in range(4):
                conn.execute(
                    "INSERT INTO events SELECT -g, repeat('w', 500) FROM generate_series(1, 2000) g"
                )
                conn.execute("DELETE FROM events WHERE id < 0")
                conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
            state = slot_state(conn, SLOT)
            assert state is not None
            assert state.wal_status == "lost", f"the slot was not invalidated: {state}"
            after_counts = _source_counts(conn)
            with pytest.raises(SlotInvalidatedError, match="on_slot_loss: resync"):
                _run_to_now(_config(pg18_dsn, lake, "stop"), spark_session)
            before = _versions(lake)
            _run_to_now(_config(pg18_dsn, lake, "resync"), spark_session)
        finally:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")
        _assert_equal(conn, lake)
        state = slot_state(conn, SLOT)
        assert state is not None
        assert state.wal_status != "lost"
    _assert_whole_after(lake, before, {t: {before_counts[t], after_counts[t]} for t in TABLES})
