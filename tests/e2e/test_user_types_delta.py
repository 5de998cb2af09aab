"""User-defined types in binary mode, end to end: Delta equals the source and text mode.

With ``source.binary: true`` pgoutput sends enums, domains, composites and their arrays
in their send formats. The daemon, wired as the CLI wires it (a ``PostgresCatalog``
describes the types), must store exactly the text form PostgreSQL prints - what a
text-mode stream of the same publication stores. The workload below uses an enum (labels
with spaces, one spelled ``NULL``, one added later), a domain over int (also as primary
key, changed by an UPDATE), a domain over numeric, arrays of both with NULLs and a lower
bound other than 1, composites with NULL, empty, quoted and nested fields, arrays of
composites, a composite altered after rows were written, and a transaction large enough
for the server to stream it. The binary daemon runs twice (stopped half-way), the text
daemon once; afterwards every Delta table of either must equal its source table, and the
two lakes must hold the same rows. Runs on PostgreSQL 18 and 15.

A type whose binary layout is unknown (citext) stops the daemon with a ``SinkDataError``
naming table, column and type, before anything of the batch is written or acknowledged.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from capture.catalog import PostgresCatalog
from capture.slots import slot_state
from config import AppConfig
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source, sink_settings
from decoder import ColumnKind, RowChange
from sink import Batch, BatchResult, DeltaSink, SinkDataError, table_path
from tests.support.configs import make_config
from tests.support.harness import run_statements, run_transaction, table_mismatches
from tests.support.oracle import read_delta

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = ["public.feelings", "public.amounts", "public.people"]

DDL = """
CREATE TYPE mood AS ENUM ('sad', 'happy', 'so-so', 'with space', 'NULL');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE DOMAIN price AS numeric(12, 2);
CREATE TYPE pair AS (a int, b text);
CREATE TYPE person AS (
    name text, nick text, pair pair, moods mood[], price price, seen timestamptz
);
CREATE TABLE public.feelings (id int PRIMARY KEY, feeling mood, history mood[]);
CREATE TABLE public.amounts (id posint PRIMARY KEY, qty posint, cost price, qtys posint[]);
CREATE TABLE public.people (id int PRIMARY KEY, who person, crowd person[], pair pair);
"""

FIRST = [
    "INSERT INTO feelings VALUES (1, 'happy', '{sad,happy}'),"
    " (2, 'with space', '{\"with space\",NULL,\"NULL\"}'), (3, NULL, NULL),"
    " (4, 'NULL', '[0:1]={sad,so-so}')",
    "INSERT INTO amounts VALUES (1, 5, 12.5, '{1,2,NULL}'), (2, NULL, NULL, '{}'),"
    " (3, 7, -0.01, NULL)",
    "INSERT INTO people VALUES"
    " (1, ROW('Ann', 'a \"quoted\", (nick)', ROW(1, 'x y'), '{happy,\"with space\"}', 3.5,"
    "         '2024-01-01 12:00:00+02')::person,"
    "     ARRAY[ROW('Bob', NULL, ROW(NULL, ''), '{}', NULL, NULL)::person, NULL],"
    "     ROW(2, 'back\\slash')),"
    " (2, ROW(NULL, NULL, NULL, NULL, NULL, NULL)::person, '{}', NULL),"
    " (3, NULL, NULL, ROW(NULL, NULL))",
    "UPDATE feelings SET feeling = 'sad', history = history || 'happy'::mood WHERE id = 1",
    "UPDATE people SET who.name = 'Anne' WHERE id = 1",
    "DELETE FROM amounts WHERE id = 2",
    "UPDATE amounts SET id = 10, qtys = '[2:3]={4,5}' WHERE id = 3",
]

SECOND = [
    # A label the first daemon run never saw: enums are read from their bytes alone.
    "ALTER TYPE mood ADD VALUE 'late'",
    "INSERT INTO feelings VALUES (5, 'late', '{late,sad}')",
    "UPDATE people SET crowd = array_append(crowd,"
    " ROW('Cy', '}{', ROW(3, ')('), '{sad}', 0, 'infinity')::person) WHERE id = 1",
    "DELETE FROM feelings WHERE id = 3",
    # Every value of pair now has three fields; record_send carries each field's type.
    "ALTER TYPE pair ADD ATTRIBUTE c int CASCADE",
    "UPDATE people SET id = id",
    "UPDATE people SET pair = ROW(4, 'four,4', 4) WHERE id = 3",
]

# Larger than logical_decoding_work_mem: the server streams it before it commits.
STREAMED = [
    "INSERT INTO feelings SELECT g, (enum_range(NULL::mood))[1 + g % 6],"
    " ARRAY[(enum_range(NULL::mood))[1 + g % 5], NULL] FROM generate_series(100, 2100) g",
    "INSERT INTO amounts SELECT g, g, g / 7.0, ARRAY[g, g + 1] FROM generate_series(100, 1100) g",
]


class KindCountingSink(DeltaSink):
    """``DeltaSink`` that also counts the formats the row values arrived in."""

    kinds: Counter[ColumnKind]

    def apply(self, batch: Batch) -> BatchResult:
        for change in batch.changes:
            if isinstance(change, RowChange) and change.new is not None:
                self.kinds.update(value.kind for value in change.new.values)
        return super().apply(batch)


def run_daemon(dsn: str, config: AppConfig, spark_session: Any, endpos: int) -> Counter[ColumnKind]:
    """Run the daemon to ``endpos`` with the catalog-backed Delta sink, as the CLI wires it;
    return how many values arrived in each format."""
    settings = replace(sink_settings(config), on_missing_key=config.source.on_missing_key)
    with PostgresCatalog(dsn) as catalog:
        sink = KindCountingSink(spark_session, settings, catalog=catalog)
        sink.kinds = Counter()
        Supervisor(config, sink, endpos=endpos).run()  # type: ignore[arg-type]
    return sink.kinds


def lake_rows(lake: Path) -> dict[str, list[str]]:
    """Each table's rows without metadata columns, in a comparable, order-free form."""
    return {
        name: sorted(
            repr(sorted((k, v) for k, v in row.items() if not k.startswith("_wal2delta")))
            for row in read_delta(table_path(str(lake), *name.split(".")))
        )
        for name in TABLES
    }


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_user_types_in_binary_mode_land_in_delta_as_postgresql_prints_them(
    server: str, request: pytest.FixtureRequest, tmp_path: Path, spark_session: object
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL.encode())
    text = make_config(dsn, tmp_path / "text", TABLES, slot="w2d_text")
    binary = make_config(
        dsn,
        tmp_path / "binary",
        TABLES,
        slot="w2d_binary",
        source={"binary": True, "publication": "w2d_text"},
    )
    prepare_configured_source(text)
    prepare_configured_source(binary)
    middle = run_statements(dsn, FIRST)
    kinds = run_daemon(dsn, binary, spark_session, middle)
    run_statements(dsn, SECOND)
    end = run_statements(dsn, STREAMED, one_transaction=True)
    kinds += run_daemon(dsn, binary, spark_session, end)
    text_kinds = run_daemon(dsn, text, spark_session, end)
    # Each daemon really received its format (the server could have fallen back to text).
    assert kinds[ColumnKind.BINARY] > 3000
    assert not kinds[ColumnKind.TEXT]
    assert text_kinds[ColumnKind.TEXT] > 3000
    assert not text_kinds[ColumnKind.BINARY]

    for config in (binary, text):
        lake = Path(str(config.sink.path))
        assert not table_mismatches(dsn, lake, TABLES), "\n".join(
            table_mismatches(dsn, lake, TABLES)
        )
    assert lake_rows(Path(str(binary.sink.path))) == lake_rows(Path(str(text.sink.path)))
    # The comparison above is between text forms; spot-check a few against PostgreSQL's.
    people = {r["id"]: r for r in read_delta(table_path(str(binary.sink.path), "public", "people"))}
    assert people[1]["who"] == (
        '(Anne,"a ""quoted"", (nick)","(1,""x y"",)","{happy,""with space""}",3.50,'
        '"2024-01-01 10:00:00+00")'
    )
    assert people[3]["pair"] == '(4,"four,4",4)'
    amounts = {
        r["id"]: r for r in read_delta(table_path(str(binary.sink.path), "public", "amounts"))
    }
    assert amounts["10"]["qtys"] == "[2:3]={4,5}"
    assert amounts["1"]["cost"] == "12.50"


def test_a_type_without_a_known_binary_layout_stops_the_daemon_before_its_batch_is_written(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE EXTENSION citext;"
            "CREATE TABLE public.plain (id int PRIMARY KEY, note text);"
            "CREATE TABLE public.tagged (id int PRIMARY KEY, tag citext)"
        )
    lake = tmp_path / "lake"
    tables = ["public.plain", "public.tagged"]
    config = make_config(pg18_dsn, lake, tables, source={"binary": True})
    prepare_configured_source(config)
    both = run_transaction(
        pg18_dsn,
        "INSERT INTO plain VALUES (1, 'written with the tag or not at all')",
        "INSERT INTO tagged VALUES (1, 'MiXeD')",
    )
    with pytest.raises(SinkDataError) as caught:
        run_daemon(pg18_dsn, config, spark_session, both.wal_end)
    message = str(caught.value)
    assert "column 'tag' of public.tagged" in message
    assert "public.citext" in message
    assert "source binary: false" in message
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        state = slot_state(conn, config.source.slot)
    assert state is not None
    assert state.confirmed_flush_lsn is not None
    assert state.confirmed_flush_lsn <= both.commit_start
    assert not (lake / "public" / "plain").exists() or not read_delta(
        table_path(str(lake), "public", "plain")
    )
