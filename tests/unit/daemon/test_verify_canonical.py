"""``wal2delta verify``'s canonical row texts: PostgreSQL (embedded 18) and Spark (Sail)
print the same text, and so the same bucket summaries, for a table of awkward values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from daemon.verify.plan import VerifyColumn, VerifyTable
from daemon.verify.sql import (
    pg_canonical,
    pg_rows_query,
    pg_summary_query,
    quote,
    spark_canonical,
    spark_summary_query,
)
from sink import to_delta_value

pytestmark = pytest.mark.integration

COLUMNS = """
    id int PRIMARY KEY, b bool, i2 int2, i8 int8, o oid, f4 float4, f8 float8,
    n numeric(12,4), nneg numeric(2,-3), nun numeric, t text, bp char(5), vc varchar(10),
    by bytea, d date, ts timestamp, tz timestamptz, j jsonb, u uuid, iv interval, ip inet,
    ai int4[], at text[], af float8[], an numeric(6,2)[], ats timestamptz[], ab bytea[], pr pair
"""
# A composite whose fields are all NULL (row 2) is a value, which IS NULL calls NULL.
PAIRS = ["NULL", "ROW(NULL, NULL)", "ROW(1, 'a b')", "ROW(NULL, ',')", "ROW(2, NULL)"]
ROWS = [
    "(1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(2, true, -32768, -9223372036854775808, 4294967295, 'NaN', 'NaN', -12345678.1234, 12000,"
    " 'NaN', '', 'ab', 'N', '\\x00ff', '0001-01-01', '0005-01-02 03:04:05.000006',"
    " '1900-01-01 00:00:00+00', '{\"a\": [1, 2.50]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',"
    " '1 year 2 mons -3 days 04:05:06.7', '10.0.0.1/32', '{}', '{NULL,\"\",\"N\"}',"
    " '{NaN,Infinity,-Infinity,0}', '{1.50,NULL}', '{\"2024-03-10 02:30:00.123456-08\"}',"
    " '{\"\\\\x\",NULL}')",
    "(3, false, 32767, 9223372036854775807, 0, 'Infinity', '-Infinity', 0.0001, -99000,"
    " '-0.00000000000000000001', 'a,b:c😀', 'abcde', '1:x', '\\x', '9999-12-31',"
    " '1999-12-31 23:59:59.999999', '2024-03-10 02:30:00.123456-08', 'null', NULL,"
    " '-00:00:00.000001', '::1', '{1,NULL,-2}', '{\"a,b\",\"c:d\"}', '{5e-324,-0.1}',"
    " '{-9999.99}', '{NULL}', '{\"\\\\x00\"}')",
    "(4, true, 0, 0, 1, 3.4028235e38, 5e-324, 0, 0, 123456789012345678901234567890.123, ' x ',"
    " ' ', 'ü', '\\xdeadbeef', '2000-02-29', '2000-01-01 00:00:00', '1970-01-01 00:00:00+00',"
    " '\"x\"', '00000000-0000-0000-0000-000000000000', '0', '192.168.0.0/16', '{0}', '{}',"
    " '{1.7976931348623157e308,0.1}', '{}', '{}', '{}')",
    "(5, false, 1, 1, 2, 1e-45, 0.3333333333333333, 1.5, 1000, 1.50, 'x', 'x', 'x', '\\x00',"
    " '1970-01-01', '1900-06-30 12:00:00.5', '2262-04-11 23:47:16.854775+00', '[]', NULL,"
    " '-1 days', '0.0.0.0/0', '{2147483647}', '{x}', '{-0.0,1e-310}', '{0.00}',"
    " '{\"0001-01-01 00:00:00+00\"}', '{\"\\\\x01\"}')",
]


Awkward = tuple[psycopg.Connection[Any], VerifyTable]


def _columns(conn: psycopg.Connection[Any]) -> list[VerifyColumn]:
    rows = conn.execute(
        "SELECT attname, atttypid::int, atttypmod FROM pg_attribute "
        "WHERE attrelid = 'public.awkward'::regclass AND attnum > 0 ORDER BY attnum"
    ).fetchall()
    return [VerifyColumn.of(name, name, oid, typmod) for name, oid, typmod in rows]


@pytest.fixture
def awkward(pg18_dsn: str) -> Awkward:
    conn = psycopg.connect(pg18_dsn, autocommit=True)
    conn.execute("CREATE TYPE pair AS (a int, b text)")
    conn.execute(f"CREATE TABLE public.awkward ({COLUMNS})")
    rows = [f"{row[:-1]}, {pair})" for row, pair in zip(ROWS, PAIRS, strict=True)]
    conn.execute("INSERT INTO public.awkward VALUES " + ", ".join(rows))
    table = VerifyTable("public", "awkward", tuple(_columns(conn)), ("id",), None, "")
    return conn, table


def _arrow(conn: psycopg.Connection[Any], table: VerifyTable) -> pa.Table:
    """The source rows as the sink would ship them to Spark."""
    rows = conn.execute(pg_rows_query(table, 1, [0])).fetchall()
    arrays = {}
    for index, column in enumerate(table.columns):
        values = [
            None if row[index] is None else to_delta_value(column.mapped, row[index])
            for row in rows
        ]
        arrays[column.name] = pa.array(values, column.mapped.arrow)
    return pa.table(arrays)


def test_both_engines_print_every_awkward_value_alike(awkward: Awkward, spark_session: Any) -> None:
    conn, table = awkward
    pg_cells = sql.SQL(", ").join(
        pg_canonical(sql.Identifier(c.name), c.mapped) for c in table.columns
    )
    expected = {
        row[0]: row[1:]
        for row in conn.execute(
            sql.SQL("SELECT id, {} FROM public.awkward").format(pg_cells)
        ).fetchall()
    }
    spark_session.createDataFrame(_arrow(conn, table)).createOrReplaceTempView("awkward")
    spark_cells = ", ".join(spark_canonical(quote(c.name), c.mapped) for c in table.columns)
    actual = {
        row[0]: tuple(row[1:])
        for row in spark_session.sql(f"SELECT id, {spark_cells} FROM awkward").collect()
    }
    names = [c.name for c in table.columns]
    differences = [
        f"id {key} column {name}: postgres {want!r}, spark {got!r}"
        for key, row in expected.items()
        for name, want, got in zip(names, row, actual[key], strict=True)
        if want != got
    ]
    # The float exponent comes from a logarithm; where the engines round it differently
    # only the drill-down's Python comparison decides. These values round alike on both.
    assert not differences, "\n".join(differences)
    assert expected[2][names.index("f8")] == "NaN"
    assert expected[3][names.index("n")] == "0.0001"
    assert expected[4][names.index("bp")] == "     "
    assert expected[2][names.index("pr")] == "(,)"


def test_bucket_summaries_agree_for_a_delta_table_holding_the_same_rows(
    awkward: Awkward, spark_session: Any, tmp_path: Path
) -> None:
    conn, table = awkward
    path = str(tmp_path / "awkward")
    # A column the Delta table lacks (added on the source, not yet seen by the daemon)
    # compares as NULL.
    conn.execute("ALTER TABLE public.awkward ADD COLUMN later bytea[]")
    later = VerifyColumn.of("later", None, 1001, -1)
    spark_session.createDataFrame(_arrow(conn, table)).write.format("delta").save(path)
    table = VerifyTable(table.schema, table.name, (*table.columns, later), table.key, None, "")
    in_delta = VerifyTable(table.schema, table.name, table.columns, table.key, None, path)
    for buckets in (1, 3):
        source = {
            int(b): (int(n), int(s))
            for b, n, s in conn.execute(pg_summary_query(table, buckets)).fetchall()
        }
        delta = {
            int(r[0]): (int(r[1]), int(r[2]))
            for r in spark_session.sql(spark_summary_query(in_delta, buckets)).collect()
        }
        assert source == delta
        assert sum(n for n, _ in source.values()) == len(ROWS)
