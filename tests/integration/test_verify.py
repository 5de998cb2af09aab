"""``tests.support.oracle.compare_table``: the oracle the end-to-end tests rely on."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.support.oracle import compare_table

pytestmark = pytest.mark.integration


def test_a_key_held_by_two_delta_rows_is_a_mismatch(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.pairs (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO pairs VALUES (1, 'a'), (2, 'b')")
        rows = {"id": pa.array([1, 2], pa.int32()), "v": pa.array(["a", "b"])}
        write_deltalake(str(tmp_path / "same"), pa.table(rows))
        same = compare_table(conn, "public.pairs", tmp_path / "same")
        assert same.matches, same.describe()

        doubled = {"id": pa.array([1, 2, 2], pa.int32()), "v": pa.array(["a", "b", "b"])}
        write_deltalake(str(tmp_path / "doubled"), pa.table(doubled))
        comparison = compare_table(conn, "public.pairs", tmp_path / "doubled")
    assert not comparison.matches
    assert comparison.duplicated == [("int:2",)]
    assert "several delta rows: key ('int:2',)" in comparison.describe()


FORMS = {
    "id": pa.array([1], pa.int32()),
    "u": pa.array(["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    "t": pa.array(["24:00:00"]),
    "ip": pa.array(["10.0.0.1"]),
    "j": pa.array(['{"a": 2, "b": 1}']),
    "n": pa.array(["1.50"]),
    "c": pa.array(["ab "]),
    "tags": pa.array([["10.0.0.1", None]], pa.list_(pa.string())),
    "at": pa.array([dt.datetime(2024, 3, 10, 9, 30, tzinfo=dt.UTC)], pa.timestamp("us", "UTC")),
    # A composite whose fields are all NULL is no NULL; nor is an element of an array.
    "p": pa.array(["(,)"]),
    "ps": pa.array([['(1,"a b")', None, "(,)"]], pa.list_(pa.string())),
}


@pytest.mark.parametrize("vectors", [False, True], ids=["plain", "deletion-vectors"])
def test_columns_delta_holds_as_strings_compare_as_their_postgresql_text(
    pg18_dsn: str, tmp_path: Path, *, vectors: bool
) -> None:
    # Which columns are text comes from the Delta table's schema; a table with the deletion
    # vectors feature is read through delta-rs's SQL engine (string views).
    configuration = {"delta.enableDeletionVectors": "true"} if vectors else None
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE pair AS (a int, b text)")
        conn.execute(
            "CREATE TABLE public.forms (id int PRIMARY KEY, u uuid, t time, ip inet, j jsonb,"
            " n numeric, c char(3), tags inet[], at timestamptz, p pair, ps pair[])"
        )
        conn.execute(
            "INSERT INTO forms VALUES (1, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '24:00',"
            " '10.0.0.1', '{\"b\": 1, \"a\": 2}', 1.50, 'ab', '{10.0.0.1,NULL}',"
            " '2024-03-10 01:30:00-08', ROW(NULL, NULL),"
            ' \'[0:2]={"(1,\\"a b\\")",NULL,"(,)"}\')'
        )
        write_deltalake(str(tmp_path / "same"), pa.table(FORMS), configuration=configuration)
        same = compare_table(conn, "public.forms", tmp_path / "same")
        assert same.matches, same.describe()

        netmask = FORMS | {"tags": pa.array([["10.0.0.1/32", None]], pa.list_(pa.string()))}
        write_deltalake(str(tmp_path / "other"), pa.table(netmask), configuration=configuration)
        other = compare_table(conn, "public.forms", tmp_path / "other")
    assert len(other.different) == 1, other.describe()


def test_a_table_without_a_key_needs_every_copy_of_a_row(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.copies (kind text, n int)")
        conn.execute("INSERT INTO copies VALUES ('dup', 1), ('dup', 1), (NULL, NULL)")
        rows = {"kind": pa.array(["dup", None]), "n": pa.array([1, None], pa.int32())}
        write_deltalake(str(tmp_path / "once"), pa.table(rows))
        comparison = compare_table(conn, "public.copies", tmp_path / "once")
    assert comparison.missing == [("text:dup", "int:1")]
    assert not comparison.unexpected
