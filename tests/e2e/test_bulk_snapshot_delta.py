"""The bulk snapshot writes exactly what the MERGE snapshot writes, for every type.

The initial snapshot appends copied rows as Arrow batches (``sink.bulk``); before it, each
row became an insert MERGEd into the table. Both paths run here on the same source, in
lakes of their own: a table with a column of every kind the sink maps (native types,
DECIMAL, text forms of the rest, arrays, bytea, json, user types; NaN and infinities,
NULL next to the empty string, quotes, commas and newlines in text), a table without a
key holding identical rows, a table without any identity, a table published with a row
filter and a column list, and an empty table. Every Delta table must have the same schema
(names, types, order, partitioning) and, row by row in ordinal order, the same values and
metadata - the LSN and commit time being each run's own consistent point and snapshot
time. Both readers run: ADBC (COPY binary, ``capture.adbcreader``) and COPY csv, and both
writers of the appends: delta-rs (``snapshot.writer: auto``) and the Spark engine. A
parallel run (two workers, tables split into page ranges) must hold the same rows
with ordinals unique per table. Then streamed UPDATEs and DELETEs - on copied rows of the
keyed and the keyless table - must leave every table equal to its source.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

import capture.snapshot
from capture.catalog import PostgresCatalog
from capture.slots import current_wal_lsn
from config import AppConfig
from daemon.supervisor import Supervisor
from daemon.wiring import sink_settings
from decoder import Lsn
from sink import BulkTarget, DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.harness import run_statements, table_mismatches
from tests.support.oracle import read_delta_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DDL = r"""
CREATE TYPE mood AS ENUM ('sad', 'happy', 'with space');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TYPE pair AS (a int, b text);
CREATE TABLE public.everything (
    id bigint PRIMARY KEY,
    b bool, i2 int2, i4 int4, i8 int8, o oid,
    f4 float4, f8 float8,
    n102 numeric(10, 2), nneg numeric(3, -2), nfree numeric, nwide numeric(40, 5),
    t text, vc varchar(10), bp char(5), nm name, ch "char",
    ba bytea,
    d date, ts timestamp, tstz timestamptz, tm time, tmtz timetz, iv interval,
    u uuid, j json, jb jsonb, ip inet, cidr_ cidr, mac macaddr, m money, bits bit(4),
    vb varbit, pt point, r int4range, tr tstzrange,
    a_i4 int4[], a_t text[], a_n numeric(6, 2)[], a_b bool[], a_ba bytea[], a_d date[],
    a_tstz timestamptz[], a_f8 float8[], a_free numeric[],
    e mood, dom posint, comp pair, a_e mood[]
);
INSERT INTO public.everything VALUES
 (1, true, -32768, 2147483647, -9223372036854775808, 4294967295,
  1.1, 0.1, 12345678.91, 99900, 'NaN', 123456789012345678901234567890.12345,
  '', '', 'ab', 'name', 'x', '\x', '2024-02-29', '2024-02-29 23:59:59.999999',
  '2024-02-29 23:59:59.999999+05:30', '12:34:56.789', '12:34:56+02', '1 year 2 days 00:00:01',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2]}', '{"b": {"c": null}}',
  '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', 12.34, B'1010', B'10',
  '(1.5,2)', '[1,10)', '[2024-01-01 00:00+00,2024-02-01 00:00+01)',
  '{1,NULL,3}', '{"a,b","c\"d",NULL,"NULL",""}', '{1.10,NULL}', '{t,f}', '{"\\x00ff"}',
  '{2024-01-01,NULL}', '{"2024-01-01 00:00:00+00"}', '{NaN,Infinity,-Infinity,1.5}',
  '{NaN,1}', 'with space', 7, '(1,"x, y")', '{sad,"with space"}'),
 (2, false, 0, 0, 0, 0, 'NaN', 'Infinity', -0.01, -100, 'Infinity', 0.00001,
  E'line\nbreak, "quoted", back\\slash', 'ü€', '', '', '', E'\\x00ff10',
  '0001-01-01', '1970-01-01 00:00:00', '1900-06-30 12:00:00-03', '00:00', '00:00-12:30',
  '-3 mons', '00000000-0000-0000-0000-000000000000', '[]', '[]', '::1', '::/0',
  'ff:ff:ff:ff:ff:ff', -1, B'0000', B'', '(0,0)', 'empty', '(,)',
  '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
  'sad', 1, '(,)', '{}'),
 (3, NULL, NULL, NULL, NULL, NULL, '-Infinity', '-0', NULL, NULL, '-Infinity', NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, true, 1, 1, 1, 1, 1e-45, 5e-324, 0, 0, '0.000', 0, 'NULL', 'null', 'a', '', 'z',
  '\x00', '9999-12-31', '0001-01-01 00:00:00', '2000-01-01 00:00:00+00', '24:00:00',
  '23:59:59.999999+14', '0', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 'null', '"s"',
  '0.0.0.0', '0.0.0.0/0', '00:00:00:00:00:00', 0, B'1111', B'1', '(-1,-1)', '[,)', 'empty',
  '{-1}', '{""}', '{-9999.99}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}',
  'happy', 2147483647, '(0,"")', '{NULL}');
INSERT INTO public.everything (id, t, f8, n102, tstz)
SELECT g, 'row ' || g, g / 7.0, g / 3.0, '2020-01-01 00:00+00'::timestamptz + g * interval '1 min'
FROM generate_series(5, 3000) g;

-- Identical rows and NULLs: a table without any key.
CREATE TABLE public.keyless (a int, b text);
ALTER TABLE public.keyless REPLICA IDENTITY FULL;
INSERT INTO public.keyless SELECT g % 5, CASE WHEN g % 3 = 0 THEN NULL ELSE 'v' END
FROM generate_series(1, 2000) g;
-- No identity at all: inserts only.
CREATE TABLE public.appendonly (x int, y text);
INSERT INTO public.appendonly SELECT g, 'y' FROM generate_series(1, 500) g;
CREATE TABLE public.filtered (id int PRIMARY KEY, region text, secret text);
INSERT INTO public.filtered SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, 's'
FROM generate_series(1, 1000) g;
CREATE TABLE public.empty (id int PRIMARY KEY, v text);
"""

TABLES = ["public.everything", "public.keyless", "public.appendonly", "public.empty"]
FILTERED = {"name": "public.filtered", "where": "region = 'eu'", "columns": ["id", "region"]}
ALL = [*TABLES, "public.filtered"]


class _MergeOnlySink(DeltaSink):
    """The snapshot as it was: every copied row an insert through ``apply`` (MERGE)."""

    def __init__(self, *arguments: Any, **keywords: Any) -> None:
        super().__init__(*arguments, **keywords)
        self.parts = replace(self.parts, bulk=None)


class _CountingSink(DeltaSink):
    """Counts bulk appends, to show the bulk path ran."""

    appends = 0

    def __init__(self, *arguments: Any, **keywords: Any) -> None:
        super().__init__(*arguments, **keywords)
        bulk = self.parts.bulk
        append_bulk = bulk.append_bulk

        def counted(target: BulkTarget, strings: Any, first_ordinal: int) -> int:
            type(self).appends += 1
            return append_bulk(target, strings, first_ordinal)

        bulk.append_bulk = counted


def _config(dsn: str, lake: Path, slot: str, **snapshot: Any) -> AppConfig:
    return make_config(
        dsn,
        lake,
        [*TABLES, FILTERED],
        slot=slot,
        snapshot={"mode": "initial", **snapshot},
    )


def _run(dsn: str, config: AppConfig, spark: Any, sink_class: type[DeltaSink]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    with PostgresCatalog(dsn) as catalog:
        sink = sink_class(spark, sink_settings(config), catalog=catalog)
        Supervisor(config, sink, endpos=Lsn(endpos)).run()


def _comparable(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and value == 0:
        return ("zero", math.copysign(1, value))  # -0.0 must stay -0.0
    if isinstance(value, list):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _comparable(v)) for k, v in value.items()))
    return value


def _rows(table: pa.Table, drop: set[str]) -> list[tuple[object, ...]]:
    names = [n for n in table.column_names if n not in drop]
    ordered = table.sort_by([("_wal2delta_ordinal", "ascending")])
    return [tuple(_comparable(r[n]) for n in names) for r in ordered.select(names).to_pylist()]


def _stamps(table: pa.Table) -> set[tuple[object, object]]:
    lsns, times = table["_wal2delta_lsn"].to_pylist(), table["_wal2delta_commit_ts"].to_pylist()
    return set(zip(lsns, times, strict=True))


def _append_engines(path: str) -> set[str]:
    """The ``engineInfo`` of every append commit in a table's Delta log."""
    engines = set()
    for entry in sorted((Path(path) / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and info.get("operationParameters", {}).get("mode") == "Append":
                engines.add(str(info.get("engineInfo", "")).split(":")[0])
    return engines


def _partitions(path: str) -> list[str]:
    from deltalake import DeltaTable

    return list(DeltaTable(path).metadata().partition_columns)


@pytest.mark.parametrize("reader", ["adbc", "csv"])
@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_bulk_snapshot_writes_what_the_merge_snapshot_writes(  # noqa: PLR0917 - fixtures
    server: str,
    reader: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    spark_session: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The ADBC reader when installed (it is, with the test extra), else COPY csv: both.
    monkeypatch.setattr(capture.snapshot, "adbc_available", lambda: reader == "adbc")
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL.encode())
    merged, bulk, parallel = (tmp_path / n for n in ("merged", "bulk", "parallel"))
    _run(dsn, _config(dsn, merged, "w2d_merge"), spark_session, _MergeOnlySink)
    _CountingSink.appends = 0
    bulk_config = _config(dsn, bulk, "w2d_bulk")
    _run(dsn, bulk_config, spark_session, _CountingSink)
    assert _CountingSink.appends >= len(ALL) - 1  # every table with rows was appended
    _CountingSink.appends = 0
    # 64 KiB chunks: the 3000-row table takes several ranges and appends per worker;
    # this run's appends go through the Spark engine, the one above through delta-rs.
    _run(
        dsn,
        _config(dsn, parallel, "w2d_parallel", parallelism=2, chunk_size=64 * 1024, writer="spark"),
        spark_session,
        _CountingSink,
    )
    assert _CountingSink.appends > len(ALL)

    for name in ALL:
        schema, _, table = name.partition(".")
        expected = read_delta_table(table_path(str(merged), schema, table))
        actual = read_delta_table(table_path(str(bulk), schema, table))
        ranged = read_delta_table(table_path(str(parallel), schema, table))
        assert actual.schema == expected.schema, name
        assert ranged.schema == expected.schema, name
        for lake in (bulk, parallel):
            path = table_path(str(lake), schema, table)
            assert _partitions(path) == _partitions(table_path(str(merged), schema, table))
        if name != "public.empty":  # snapshot.writer: auto (delta-rs), then spark (Sail)
            assert _append_engines(table_path(str(bulk), schema, table)) == {"delta-rs"}
            assert _append_engines(table_path(str(parallel), schema, table)) == {"sail-delta-lake"}
        # Each run stamps its rows with its own consistent point and snapshot time.
        for copy in (expected, actual, ranged):
            assert len(_stamps(copy)) <= 1, name
        stamps = {"_wal2delta_lsn", "_wal2delta_commit_ts", "_wal2delta_row_lsn"}
        assert _rows(actual, stamps) == _rows(expected, stamps), name
        if "_wal2delta_row_lsn" in expected.column_names:
            for copy in (expected, actual, ranged):
                assert copy["_wal2delta_row_lsn"].to_pylist() == copy["_wal2delta_lsn"].to_pylist()
        # Ranges number their rows from bases of their own: same rows, unique ordinals.
        ordinals = ranged["_wal2delta_ordinal"].to_pylist()
        assert len(set(ordinals)) == len(ordinals), name
        identity = stamps | {"_wal2delta_ordinal", "_wal2delta_row_ordinal"}
        assert Counter(_rows(ranged, identity)) == Counter(_rows(expected, identity)), name

    # Streamed changes after the consistent point apply to the appended rows.
    endpos = run_statements(
        dsn,
        [
            "UPDATE everything SET t = 'changed', f4 = 2.5 WHERE id IN (1, 2, 3, 100)",
            "DELETE FROM everything WHERE id IN (4, 200)",
            "UPDATE keyless SET b = 'w' WHERE ctid = (SELECT min(ctid) FROM keyless WHERE a = 1)",
            "DELETE FROM keyless WHERE ctid = (SELECT max(ctid) FROM keyless WHERE a = 2)",
            "DELETE FROM keyless WHERE a = 3 AND b IS NULL",
            "INSERT INTO appendonly VALUES (501, 'z')",
            "INSERT INTO filtered VALUES (2000, 'eu', 's')",
            "INSERT INTO empty VALUES (1, 'first')",
        ],
    )
    with PostgresCatalog(dsn) as catalog:
        sink = DeltaSink(spark_session, sink_settings(bulk_config), catalog=catalog)  # type: ignore[arg-type]
        Supervisor(bulk_config, sink, endpos=Lsn(endpos)).run()
    # These compare with their source; ``everything`` (every type) with the MERGE path's copy.
    mismatches = table_mismatches(
        dsn, bulk, ["public.keyless", "public.appendonly", "public.empty"]
    )
    assert not mismatches, "\n".join(mismatches)
    after = {
        r["id"]: r
        for r in read_delta_table(table_path(str(bulk), "public", "everything")).to_pylist()
    }
    before = {
        r["id"]: r
        for r in read_delta_table(table_path(str(merged), "public", "everything")).to_pylist()
    }
    assert set(after) == set(before) - {4, 200}
    for key, row in after.items():
        changed = {"t": "changed", "f4": 2.5} if key in {1, 2, 3, 100} else {}
        untouched = {k: v for k, v in before[key].items() if not k.startswith("_wal2delta")}
        data = {k: v for k, v in row.items() if not k.startswith("_wal2delta")}
        assert _comparable(list(data.values())) == _comparable(
            list((untouched | changed).values())
        ), key
