"""Real ALTER TABLE statements on PostgreSQL 18, followed into Delta by the daemon.

Added columns become Delta columns and, when added with a constant default, existing Delta
rows get that default (PostgreSQL shows it in every old row although no WAL record carries
it). Dropped columns stay in Delta: rows updated afterwards keep their last value there,
rows inserted afterwards hold NULL. A dropped column whose name comes back is reset in the
rows that predate it. Each scenario ends with every Delta table, read with delta-rs, equal
to its source table. Renames and type changes Delta cannot hold stop the daemon with a
clear error before any change of the new shape is acknowledged, also when the ALTER sits
inside a streamed transaction.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from capture.slots import current_wal_lsn, slot_state
from config import AppConfig
from daemon.wiring import prepare_configured_source
from sink import SinkDataError, table_path
from tests.support.configs import make_config
from tests.support.harness import run_daemon, run_transaction
from tests.support.oracle import compare_table, read_delta

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def stream(dsn: str, lake: Path, tables: list[str], workload: list[str]) -> tuple[AppConfig, int]:
    """Create the slot, run ``workload`` statement by statement; return config and end LSN."""
    config = make_config(dsn, lake, tables)
    prepare_configured_source(config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in workload:
            conn.execute(statement.encode())
        return config, current_wal_lsn(conn)


def assert_tables_match(dsn: str, lake: Path, tables: list[str]) -> None:
    mismatches = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in tables:
            schema, _, table = name.partition(".")
            comparison = compare_table(conn, name, table_path(str(lake), schema, table))
            assert comparison.source_rows > 0, f"{name} must keep rows"
            if not comparison.matches:
                mismatches.append(comparison.describe())
    assert not mismatches, "\n".join(mismatches)


def confirmed_flush(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = slot_state(conn, slot)
    assert state is not None
    assert state.confirmed_flush_lsn is not None
    return state.confirmed_flush_lsn


def wal_position(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return current_wal_lsn(conn)


EVOLVING = """
CREATE TABLE public.items (id int PRIMARY KEY, name text, qty int);
CREATE TABLE public.pairs (a int, b text);
ALTER TABLE public.pairs REPLICA IDENTITY FULL;
CREATE TABLE public.tags (id int PRIMARY KEY, tag text, extra int);
"""

EVOLVING_WORKLOAD = [
    "INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 50) g",
    "INSERT INTO pairs SELECT g % 5, 'p' || (g % 5) FROM generate_series(1, 10) g",
    "INSERT INTO tags SELECT g, 't' || g, g FROM generate_series(1, 5) g",
    # Fast defaults: old rows show 'red' and 10 at once, without any WAL record for them.
    "ALTER TABLE items ADD COLUMN colour text DEFAULT 'red', ADD COLUMN note text",
    "ALTER TABLE pairs ADD COLUMN weight int DEFAULT 10",
    "UPDATE items SET colour = 'blue' WHERE id % 10 = 0",
    "UPDATE items SET note = 'n' || id WHERE id % 7 = 0",
    # REPLICA IDENTITY FULL: the old tuples carry weight = 10, which only the backfill put
    # into Delta; without it these would match no Delta row.
    "UPDATE pairs SET b = b || '!' WHERE a = 1",
    "DELETE FROM pairs WHERE a = 2",
    "INSERT INTO items (id, name, qty) VALUES (51, 'after', 1)",
    # A dropped column stays in Delta; rows written afterwards hold NULL there.
    "ALTER TABLE items DROP COLUMN qty",
    "UPDATE items SET name = name || '*' WHERE id <= 5",
    "INSERT INTO items (id, name) VALUES (52, 'no qty')",
    # The dropped name comes back: every existing row shows the new default, not the old
    # values Delta still holds.
    "ALTER TABLE items ADD COLUMN qty int DEFAULT 99",
    "UPDATE items SET qty = 1 WHERE id = 1",
    # Dropping the last column and adding another is not a rename.
    "ALTER TABLE tags DROP COLUMN extra",
    "ALTER TABLE tags ADD COLUMN label text DEFAULT 'l'",
    "INSERT INTO tags VALUES (6, 'six', 'x')",
    # ALTER inside a transaction large enough to be streamed: the rows inserted before it
    # in the same transaction show the default too.
    """
    BEGIN;
    INSERT INTO items (id, name) SELECT g, repeat('x', 200) FROM generate_series(1000, 3000) g;
    ALTER TABLE items ADD COLUMN size int DEFAULT 42;
    INSERT INTO items (id, name, size) SELECT g, 'big', g FROM generate_series(3001, 3100) g;
    UPDATE items SET size = NULL WHERE id BETWEEN 1000 AND 1010;
    COMMIT;
    """,
]


def test_added_dropped_and_returning_columns_follow_the_source_with_fast_defaults(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(EVOLVING)
    lake = tmp_path / "lake"
    tables = ["public.items", "public.pairs", "public.tags"]
    config, endpos = stream(pg18_dsn, lake, tables, EVOLVING_WORKLOAD)
    run_daemon(pg18_dsn, config, spark_session, endpos)
    assert_tables_match(pg18_dsn, lake, tables)
    items = {r["id"]: r for r in read_delta(table_path(str(lake), "public", "items"))}
    # The dropped-then-returned column: untouched old rows show the new default.
    assert (items[2]["qty"], items[1]["qty"], items[3000]["size"]) == (99, 1, 42)
    # Dropped columns stay in Delta: old rows keep their value, later ones hold NULL.
    tags = {r["id"]: r for r in read_delta(table_path(str(lake), "public", "tags"))}
    assert [(tags[i]["extra"], tags[i]["label"]) for i in (1, 6)] == [(1, "l"), (None, "x")]
    # REPLICA IDENTITY FULL without a key keeps the source's identical rows (compared as
    # multisets above): 10 inserted, the two with a = 2 deleted.
    assert len(read_delta(table_path(str(lake), "public", "pairs"))) == 8


def test_a_column_renamed_inside_a_streamed_transaction_stops_before_its_rows_are_acknowledged(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.docs (id int PRIMARY KEY, title text, body text)")
    lake = tmp_path / "lake"
    config = make_config(pg18_dsn, lake, ["public.docs"])
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO docs SELECT g, 't' || g, 'b' FROM generate_series(1, 10) g")
    renaming = run_transaction(
        pg18_dsn,
        "INSERT INTO docs SELECT g, 't', repeat('y', 300) FROM generate_series(11, 1500) g",
        "ALTER TABLE docs RENAME COLUMN title TO heading",
        "INSERT INTO docs VALUES (1501, 'renamed', 'b')",
    )
    with pytest.raises(SinkDataError) as caught:
        run_daemon(pg18_dsn, config, spark_session, renaming.wal_end)
    message = str(caught.value)
    assert "column 'heading' of public.docs was renamed or replaced" in message
    assert "'title'" in message
    assert confirmed_flush(pg18_dsn, config.source.slot) <= renaming.commit_start
    rows = read_delta(table_path(str(lake), "public", "docs"))
    assert "heading" not in rows[0]
    assert 1501 not in {r["id"] for r in rows}


def test_renaming_the_last_column_is_told_from_drop_and_add_by_the_catalog(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.docs (id int PRIMARY KEY, title text, body text)")
    lake = tmp_path / "lake"
    config = make_config(pg18_dsn, lake, ["public.docs"])
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO docs SELECT g, 't' || g, 'b' FROM generate_series(1, 10) g")
        # The ALTER's own transaction publishes nothing; the insert is the new shape.
        conn.execute("ALTER TABLE docs RENAME COLUMN body TO content")
    insert = run_transaction(pg18_dsn, "INSERT INTO docs VALUES (11, 'renamed', 'c')")
    with pytest.raises(SinkDataError) as caught:
        run_daemon(pg18_dsn, config, spark_session, insert.wal_end)
    message = str(caught.value)
    assert "column 'content' of public.docs was renamed or replaced" in message
    assert "fewer dropped columns" in message
    assert "'body'" in message
    assert confirmed_flush(pg18_dsn, config.source.slot) <= insert.commit_start
    rows = read_delta(table_path(str(lake), "public", "docs"))
    assert {r["id"] for r in rows} == set(range(1, 11))


def test_a_type_change_delta_cannot_hold_stops_naming_both_types_while_a_longer_varchar_goes_on(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.docs (id int PRIMARY KEY, title varchar(10), rev int)")
    lake = tmp_path / "lake"
    config = make_config(pg18_dsn, lake, ["public.docs"])
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO docs SELECT g, 't' || g, g FROM generate_series(1, 10) g")
        conn.execute("ALTER TABLE docs ALTER COLUMN title TYPE varchar(200)")
        conn.execute("INSERT INTO docs VALUES (11, repeat('long', 20), 11)")
        widened = current_wal_lsn(conn)
    # The varchar change keeps the Delta type: the daemon follows it to the end.
    run_daemon(pg18_dsn, config, spark_session, widened)
    assert_tables_match(pg18_dsn, lake, ["public.docs"])
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE docs ALTER COLUMN rev TYPE bigint")
    insert = run_transaction(pg18_dsn, "INSERT INTO docs VALUES (12, 'big', 3000000000)")
    with pytest.raises(SinkDataError) as caught:
        run_daemon(pg18_dsn, config, spark_session, insert.wal_end)
    message = str(caught.value)
    assert "column 'rev' of public.docs is INT in Delta, but its type int8 is now stored as " in (
        message
    )
    assert "3000000000" not in message
    assert confirmed_flush(pg18_dsn, config.source.slot) <= insert.commit_start
    assert 12 not in {r["id"] for r in read_delta(table_path(str(lake), "public", "docs"))}
