"""Schema changes follow names, as PostgreSQL's subscriber does (real servers into Delta).

A column dropped and added back under its name is a new column, not a rename: the
catalog's ``attnum`` tells them apart, and the ``attnum`` each Delta column came from is
recorded in the lake, so the decision holds when the daemon restarts between the DDL and
the next change. A true rename still stops the daemon. A column the relation no longer
carries - dropped, or left out of a changed publication column list - keeps its last value
in rows updated afterwards and is NULL in rows inserted afterwards: exactly the table of a
native subscriber fed by the same publication whose own table keeps the column. A table
whose first batch ends with TRUNCATE is created with its data columns.

Every Delta table is read back with delta-rs and compared with its source table and, where
the source no longer has a column, with the native subscriber's table.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable

from capture.catalog import PostgresCatalog
from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source, sink_settings
from sink import DeltaSink, SinkDataError, table_path
from tests.support.configs import make_config
from tests.support.harness import (
    confirmed_flush,
    run_daemon,
    run_transaction,
    table_mismatches,
    wait_for_flush,
)
from tests.support.oracle import read_delta
from tests.support.subscriber import native_subscriber, wait_for_subscriber

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def execute(dsn: str, *statements: str) -> int:
    """Run ``statements`` one by one (each its own transaction); return the WAL end."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())
        return current_wal_lsn(conn)


def delta_by_id(lake: Path, table: str) -> dict[object, dict[str, object]]:
    return {r["id"]: r for r in read_delta(table_path(str(lake), "public", table))}


RETURNING = """
CREATE TABLE public.wide (id int PRIMARY KEY, b text, note text);
CREATE TABLE public.same (id int PRIMARY KEY, note text, b text);
"""


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_a_column_dropped_and_added_back_under_its_name_is_new_also_across_a_restart(
    server: str, request: pytest.FixtureRequest, tmp_path: Path, spark_session: object
) -> None:
    """The issue's DDL no longer stops the daemon, and older rows show what PostgreSQL shows."""
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    lake = tmp_path / "lake"
    tables = ["public.wide", "public.same"]
    execute(dsn, RETURNING)
    config = make_config(dsn, lake, tables)
    prepare_configured_source(config)
    first = execute(
        dsn,
        "INSERT INTO wide SELECT g, 'old b ' || g, 'n' FROM generate_series(1, 30) g",
        "INSERT INTO same SELECT g, 'n', 'old b ' || g FROM generate_series(1, 30) g",
    )
    run_daemon(dsn, config, spark_session, first)
    # The daemon stops between the DDL and the next change of each table.
    ddl = execute(
        dsn,
        "ALTER TABLE wide DROP b, ADD c text DEFAULT 'x', ADD b text",
        # The relation looks exactly as before; only the attnum of b changed.
        "ALTER TABLE same DROP b, ADD b text DEFAULT 'fresh'",
    )
    run_daemon(dsn, config, spark_session, ddl)
    end = execute(
        dsn,
        "UPDATE wide SET note = 'changed' WHERE id % 3 = 0",
        "UPDATE wide SET b = 'new b' WHERE id % 5 = 0",
        "INSERT INTO wide (id, note) VALUES (31, 'after')",
        "UPDATE same SET note = 'changed' WHERE id % 4 = 0",
        "INSERT INTO same (id, note) VALUES (31, 'after')",
        # Larger than logical_decoding_work_mem: streamed before it commits.
        "INSERT INTO wide SELECT g, repeat('s', 300), 'big', 'b' || g "
        "FROM generate_series(1000, 2500) g",
    )
    run_daemon(dsn, config, spark_session, end)
    assert not table_mismatches(dsn, lake, tables), "\n".join(table_mismatches(dsn, lake, tables))
    wide, same = delta_by_id(lake, "wide"), delta_by_id(lake, "same")
    # Rows written before the DDL: the new b is NULL (no default) or 'fresh', never the
    # dropped column's value; c shows its fast default.
    assert (wide[1]["b"], wide[1]["c"], wide[3]["b"], wide[5]["b"]) == (None, "x", None, "new b")
    assert (same[1]["b"], same[4]["b"], same[31]["b"]) == ("fresh", "fresh", "fresh")


def test_a_column_dropped_and_added_back_while_the_daemon_runs_is_new_from_that_point(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    """The daemon keeps up; its Relation message after the DDL looks like the one before."""
    dsn, lake = pg18_dsn, tmp_path / "lake"
    execute(dsn, "CREATE TABLE public.same (id int PRIMARY KEY, note text, b text)")
    config = make_config(dsn, lake, ["public.same"])
    prepare_configured_source(config)
    settings = replace(sink_settings(config), on_missing_key=config.source.on_missing_key)
    stop = threading.Event()
    with PostgresCatalog(dsn) as catalog:
        sink = DeltaSink(spark_session, settings, catalog=catalog)  # type: ignore[arg-type]
        service = Supervisor(config, sink, stop_event=stop)
        runner = threading.Thread(target=service.run)
        runner.start()
        try:
            first = execute(
                dsn, "INSERT INTO same SELECT g, 'n', 'old b ' || g FROM generate_series(1, 30) g"
            )
            wait_for_flush(dsn, config.source.slot, first)
            end = execute(
                dsn,
                "ALTER TABLE same DROP b, ADD b text DEFAULT 'fresh'",
                "UPDATE same SET note = 'changed' WHERE id % 4 = 0",
                "UPDATE same SET b = 'new b' WHERE id % 5 = 0",
                "INSERT INTO same (id, note) VALUES (31, 'after')",
            )
            wait_for_flush(dsn, config.source.slot, end)
        finally:
            stop.set()
            runner.join()
    assert not table_mismatches(dsn, lake, ["public.same"])
    same = delta_by_id(lake, "same")
    assert [same[i]["b"] for i in (1, 4, 5, 31)] == ["fresh", "fresh", "new b", "fresh"]


def test_a_true_rename_still_stops_with_the_rename_message_after_a_restart(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    lake = tmp_path / "lake"
    execute(pg18_dsn, "CREATE TABLE public.docs (id int PRIMARY KEY, title text, body text)")
    config = make_config(pg18_dsn, lake, ["public.docs"])
    prepare_configured_source(config)
    first = execute(pg18_dsn, "INSERT INTO docs SELECT g, 't', 'b' FROM generate_series(1, 10) g")
    run_daemon(pg18_dsn, config, spark_session, first)
    execute(pg18_dsn, "ALTER TABLE docs RENAME COLUMN body TO content")
    insert = run_transaction(pg18_dsn, "INSERT INTO docs VALUES (11, 'renamed', 'c')")
    for _run in range(2):  # the server sends the refused insert again: nothing is lost
        with pytest.raises(SinkDataError) as caught:
            run_daemon(pg18_dsn, config, spark_session, insert.wal_end)
        message = str(caught.value)
        assert message.startswith("column 'content' of public.docs was renamed or replaced: ")
        assert "Delta holds as column 'body'" in message
        assert confirmed_flush(pg18_dsn, config.source.slot) <= insert.commit_start
        assert set(delta_by_id(lake, "docs")) == set(range(1, 11))


KEPT = """
CREATE TABLE public.dropping (id int PRIMARY KEY, a text, gone text, kept int);
CREATE TABLE public.listed (id int PRIMARY KEY, a text, hidden text);
"""


def test_columns_no_longer_published_keep_their_last_value_as_in_a_native_subscriber(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    """A dropped column and one left out of the column list: updates leave them alone."""
    dsn, lake = pg18_dsn, tmp_path / "lake"
    tables = ["public.dropping", "public.listed"]
    execute(dsn, KEPT)
    config = make_config(dsn, lake, tables)
    prepare_configured_source(config)
    # The subscriber's tables keep every column: its operator drops nothing there.
    with native_subscriber(dsn, KEPT, [config.source.publication[0]]) as subscriber:
        first = execute(
            dsn,
            "INSERT INTO dropping SELECT g, 'a', 'gone ' || g, g FROM generate_series(1, 20) g",
            "INSERT INTO listed SELECT g, 'a', 'hidden ' || g FROM generate_series(1, 20) g",
        )
        run_daemon(dsn, config, spark_session, first)
        execute(dsn, "ALTER TABLE dropping DROP COLUMN gone")
        # The same publication, now with a column list that leaves out hidden.
        narrowed = make_config(
            dsn, lake, ["public.dropping", {"name": "public.listed", "columns": ["id", "a"]}]
        )
        prepare_configured_source(narrowed)
        end = execute(
            dsn,
            "UPDATE dropping SET a = 'updated', kept = kept + 100 WHERE id % 2 = 0",
            "INSERT INTO dropping (id, a, kept) VALUES (21, 'inserted', 21)",
            "DELETE FROM dropping WHERE id = 19",
            "UPDATE listed SET a = 'updated', hidden = 'not published' WHERE id % 2 = 0",
            "INSERT INTO listed VALUES (21, 'inserted', 'not published')",
            # A second update of the same rows keeps the value too.
            "UPDATE dropping SET a = a || '!' WHERE id <= 10",
        )
        run_daemon(dsn, narrowed, spark_session, end)
        wait_for_subscriber(dsn, subscriber, end)
        found = table_mismatches(subscriber, lake, tables)
        assert not found, "\n".join(found)
    # The source no longer has gone: the columns it still has equal Delta's.
    assert not table_mismatches(dsn, lake, ["public.dropping"])
    dropping, listed = delta_by_id(lake, "dropping"), delta_by_id(lake, "listed")
    assert [(dropping[i]["gone"], dropping[i]["a"]) for i in (1, 2, 21)] == [
        ("gone 1", "a!"),
        ("gone 2", "updated!"),
        (None, "inserted"),
    ]
    assert [(listed[i]["hidden"], listed[i]["a"]) for i in (1, 2, 21)] == [
        ("hidden 1", "a"),
        ("hidden 2", "updated"),
        (None, "inserted"),
    ]


def test_a_table_whose_first_batch_ends_with_truncate_is_created_with_its_data_columns(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    lake = tmp_path / "lake"
    execute(pg18_dsn, "CREATE TABLE public.emptied (id int PRIMARY KEY, v text, n numeric(8,2))")
    config = make_config(pg18_dsn, lake, ["public.emptied"])
    prepare_configured_source(config)
    first = execute(
        pg18_dsn,
        "BEGIN; INSERT INTO emptied SELECT g, 'v', g FROM generate_series(1, 5) g; "
        "TRUNCATE emptied; COMMIT",
    )
    run_daemon(pg18_dsn, config, spark_session, first)
    path = table_path(str(lake), "public", "emptied")
    schema = DeltaTable(path).to_pyarrow_table().schema
    assert [(f.name, str(f.type)) for f in schema][:3] == [
        ("id", "int32"),
        ("v", "string"),
        ("n", "decimal128(8, 2)"),
    ]
    assert read_delta(path) == []
    end = execute(pg18_dsn, "INSERT INTO emptied VALUES (6, 'after', 6.5)")
    run_daemon(pg18_dsn, config, spark_session, end)
    assert not table_mismatches(pg18_dsn, lake, ["public.emptied"])
