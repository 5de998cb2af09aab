"""Columns dropped while a table waits for its copy, end to end with the real supervisor.

The snapshot shows a table as it was when the snapshot was exported, but a query names the
columns as they are now: a column dropped after the export, before the copy reads the
table, cannot be selected any more (it stopped the daemon: ``column "gone" does not
exist``). The copy locks each table before reading it, reads a dropped column as NULL - its
values are gone from every view of the table - and starts over in a newer snapshot when
the rows cannot be read at all (a dropped key column). Decision 0125.

Every table must end equal to its source, read with delta-rs; the dropped column stays in
Delta, as when a column is dropped while streaming (``test_schema_changes.py``): NULL in the
copied rows, the last value in rows changed between the snapshot and the drop.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable

from capture.slots import current_wal_lsn, slot_state
from config import AppConfig
from daemon.supervisor import Supervisor
from daemon.wiring import sink_settings
from decoder import Lsn, PgTimestamp, Relation
from sink import BulkTarget, DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.harness import confirmed_flush, serving, table_mismatches, wait_until
from tests.support.oracle import read_delta

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

SCHEMA = """
CREATE TABLE public.big (id int PRIMARY KEY, body text);
INSERT INTO public.big SELECT g, repeat('b', 50) FROM generate_series(1, 20000) g;
CREATE TABLE public.keyed (id int PRIMARY KEY, a text, gone text, kept int);
INSERT INTO public.keyed SELECT g, 'a' || g, 'gone ' || g, g FROM generate_series(1, 100) g;
CREATE TABLE public.loose (a int, gone int, b text);
ALTER TABLE public.loose REPLICA IDENTITY FULL;
INSERT INTO public.loose SELECT g % 10, g, 'b' FROM generate_series(1, 50) g;
"""

DROPS = [
    # Changed after the snapshot, before the drop: the stream brings the value.
    "UPDATE keyed SET gone = 'changed' WHERE id = 1",
    "ALTER TABLE keyed DROP COLUMN gone",
    "ALTER TABLE loose DROP COLUMN gone",
    "UPDATE keyed SET a = 'after' WHERE id <= 10",
    "INSERT INTO keyed VALUES (101, 'new', 101)",
    "DELETE FROM keyed WHERE id = 50",
    "UPDATE loose SET b = 'updated' WHERE a = 3",
    "INSERT INTO loose VALUES (99, 'new')",
]


class _AlteringSink(DeltaSink):
    """Runs ``statements`` once, when the copy first appends rows of ``table`` or begins a
    copy of ``table`` while streaming: the other tables wait for their copy then."""

    dsn = ""
    table = "public.big"
    statements: list[str] = []  # noqa: RUF012 - set per instance
    after = 0
    """The WAL position after the statements, once they ran."""

    def _alter(self, table: str) -> None:
        if table != self.table or not self.statements:
            return
        statements, self.statements = self.statements, []
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '20s'")  # a lock the copy holds: fail, not hang
            for statement in statements:
                conn.execute(statement.encode())
            self.after = current_wal_lsn(conn)

    def __init__(self, *arguments: Any, **keywords: Any) -> None:
        super().__init__(*arguments, **keywords)
        # The bulk path serves the snapshot and the copies while streaming alike.
        bulk, copies = self.parts.bulk, self.parts.copies
        append_bulk, begin_copy = bulk.append_bulk, copies.begin_copy

        def altering_append(target: Any, strings: Any, first_ordinal: int) -> int:
            self._alter(target.table)
            return append_bulk(target, strings, first_ordinal)

        def altering_begin(relation: Relation, lsn: Lsn, commit_time: PgTimestamp) -> BulkTarget:
            self._alter(relation.qualified_name)
            return begin_copy(relation, lsn, commit_time)

        bulk.append_bulk = altering_append
        copies.begin_copy = altering_begin


def _run_until_applied(config: AppConfig, sink: _AlteringSink, dsn: str, timeout: float) -> None:
    """Run the daemon until the statements ran and everything up to then is in Delta."""
    stop = threading.Event()
    with serving(Supervisor(config, sink, stop_event=stop), stop) as running:

        def applied() -> bool:
            assert not running.errors, f"the daemon stopped: {running.errors[0]!r}"
            if not sink.after or sink.parts.copies.tables_copying():
                return False
            with psycopg.connect(dsn, autocommit=True) as conn:
                end = current_wal_lsn(conn)
            return _flushed(dsn, config.source.slot) >= max(sink.after, end - 1024**2)

        wait_until(applied, timeout, "the daemon to apply the changes after the drop")
        assert not running.errors, running.errors


def _flushed(dsn: str, slot: str) -> int:
    """The slot's confirmed flush position; 0 while a restarted snapshot replaces it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = slot_state(conn, slot)
    return 0 if state is None or state.confirmed_flush_lsn is None else state.confirmed_flush_lsn


def _by_id(lake: Path, table: str) -> dict[int, dict[str, Any]]:
    return {int(str(r["id"])): r for r in read_delta(table_path(str(lake), "public", table))}


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_columns_dropped_during_the_first_snapshot_are_null_in_the_copy(
    server: str, request: pytest.FixtureRequest, tmp_path: Path, spark_session: Any
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    lake = tmp_path / "lake"
    tables = ["public.big", "public.keyed", "public.loose"]
    # One connection copies, largest table first: keyed and loose wait while big is copied.
    config = make_config(dsn, lake, tables, snapshot={"mode": "initial", "parallelism": 1})
    sink = _AlteringSink(spark_session, sink_settings(config))
    sink.dsn, sink.statements = dsn, list(DROPS)
    _run_until_applied(config, sink, dsn, timeout=180)
    found = table_mismatches(dsn, lake, tables)
    assert not found, "\n".join(found)
    keyed = _by_id(lake, "keyed")
    assert [keyed[i]["gone"] for i in (1, 2, 11, 101)] == ["changed", None, None, None]
    loose = read_delta(table_path(str(lake), "public", "loose"))
    assert {r["gone"] for r in loose} == {None}
    assert len(loose) == 51


def test_a_key_column_dropped_during_the_first_snapshot_starts_it_over(
    pg18_dsn: str, tmp_path: Path, spark_session: Any
) -> None:
    dsn = pg18_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    lake = tmp_path / "lake"
    tables = ["public.big", "public.keyed"]
    config = make_config(
        dsn,
        lake,
        tables,
        snapshot={"mode": "initial", "parallelism": 1},
        source={"reconnect": {"initial_delay": "100ms"}},
    )
    sink = _AlteringSink(spark_session, sink_settings(config))
    sink.dsn = dsn
    sink.statements = [
        "ALTER TABLE keyed DROP COLUMN id",
        "ALTER TABLE keyed REPLICA IDENTITY FULL",
        "INSERT INTO keyed VALUES ('new', 'g', 1)",
        "UPDATE keyed SET kept = -kept WHERE kept <= 10",
    ]
    _run_until_applied(config, sink, dsn, timeout=180)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT a, gone, kept FROM keyed").fetchall()
    delta = read_delta(table_path(str(lake), "public", "keyed"))
    assert sorted((r["a"], r["gone"], r["kept"]) for r in delta) == sorted(rows)
    assert not table_mismatches(dsn, lake, ["public.big"])


SCHEMA_ONLINE = """
CREATE TABLE public.steady (id int PRIMARY KEY, value int NOT NULL);
CREATE TABLE public.joiner (id int PRIMARY KEY, a text, gone text, kept int);
INSERT INTO public.joiner SELECT g, 'a' || g, 'gone ' || g, g FROM generate_series(1, 1000) g;
CREATE PUBLICATION w2d_online FOR TABLE public.steady;
"""


def test_a_column_dropped_while_a_new_table_waits_for_its_online_copy(
    pg18_dsn: str, tmp_path: Path, spark_session: Any
) -> None:
    dsn = pg18_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA_ONLINE)
        conn.execute("INSERT INTO steady SELECT g, g FROM generate_series(1, 10) g")
    lake = tmp_path / "lake"
    config = make_config(
        dsn,
        lake,
        [],
        slot="w2d_online",
        source={"create_publication": False, "publication": "w2d_online"},
        snapshot={"mode": "initial", "new_tables_interval": "1s"},
    )
    sink = _AlteringSink(spark_session, sink_settings(config))
    sink.dsn, sink.table = dsn, "public.joiner"
    # Runs when the copy has its snapshot and the table's shape, before it reads the rows.
    sink.statements = [
        "UPDATE joiner SET gone = 'changed' WHERE id = 1",
        "ALTER TABLE joiner DROP COLUMN gone",
        "UPDATE joiner SET a = 'after' WHERE id <= 10",
        "INSERT INTO joiner VALUES (1001, 'new', 1001)",
        "INSERT INTO steady VALUES (11, 11)",
    ]
    stop = threading.Event()
    with serving(Supervisor(config, sink, stop_event=stop), stop) as running:
        wait_until(
            lambda: (
                bool(running.errors)
                or DeltaTable.is_deltatable(table_path(str(lake), "public", "steady"))
            ),
            60,
            "steady to reach Delta",
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER PUBLICATION w2d_online ADD TABLE public.joiner")

        def applied() -> bool:
            assert not running.errors, f"the daemon stopped: {running.errors[0]!r}"
            if (
                not sink.after
                or sink.parts.copies.tables_copying()
                or sink.parts.copies.copy_requests()
            ):
                return False
            return confirmed_flush(dsn, "w2d_online") >= sink.after

        wait_until(applied, 120, "the copy and the changes after the drop")
        time.sleep(0.5)
        assert not running.errors, running.errors
    found = table_mismatches(dsn, lake, ["public.steady", "public.joiner"])
    assert not found, "\n".join(found)
    joiner = _by_id(lake, "joiner")
    assert [joiner[i]["gone"] for i in (1, 2, 11, 1001)] == ["changed", None, None, None]
