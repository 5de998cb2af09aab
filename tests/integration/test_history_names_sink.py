"""A change history on embedded Sail for a table whose column names lie in the history's own
(``history.py``, "Column names"), read back with delta-rs.

Issue 29: a REPLICA IDENTITY FULL table with a column ``kind`` stopped the daemon at its
first batch ("duplicate qualified field name ... _wal2delta_old_kind").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from sink import DeltaSink, table_path
from sink.values.naming import history_path
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, batch, col, delete, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

EVENTS = rel("public.events", col("kind"), col("v", INT4), identity="f")
ODD = rel(
    "public.odd",
    col("id", INT4, key=True),
    col("_kind"),
    col("_wal2delta_op"),
    col("_wal2delta_old_id"),
    relation_id=16385,
)


def history(lake: Path, table: str) -> list[dict[str, Any]]:
    rows = DeltaTable(history_path(str(lake), "public", table)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["_wal2delta_lsn"], r["_wal2delta_ordinal"]))


def test_a_full_table_with_a_column_named_kind_keeps_its_history(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake, history=True))
    sink.apply(
        batch(
            insert(EVENTS, "a", "1", lsn=10),
            insert(EVENTS, "a", "1", lsn=10, ordinal=1),  # the same row twice
            update(EVENTS, "b", "1", lsn=20, old=["a", "1"], old_kind="O"),
        )
    )
    sink.apply(batch(delete(EVENTS, "a", "1", lsn=30, old_kind="O")))
    rows = history(lake, "events")
    assert [
        (r["_wal2delta_op"], r["kind"], r["v"], r["_wal2delta_old__kind"], r["_wal2delta_old_v"])
        for r in rows
    ] == [
        ("insert", "a", 1, None, None),
        ("insert", "a", 1, None, None),
        ("update", "b", 1, "a", 1),
        ("delete", None, None, "a", 1),
    ]
    assert [r["_wal2delta_old_kind"] for r in rows] == [None, None, "row", "row"]
    merged = DeltaTable(table_path(str(lake), "public", "events")).to_pyarrow_table()
    assert merged.column("kind").to_pylist() == ["b"]


def test_columns_named_like_the_historys_own_land_beside_them(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake, history=True))
    sink.apply(batch(insert(ODD, "1", "k", "op", "7", lsn=10)))
    sink.apply(batch(update(ODD, "2", "k2", "op2", "8", lsn=20, old=["1", None, None, None])))
    rows = history(lake, "odd")
    assert [
        (
            r["_wal2delta_op"],
            r["id"],
            r["_kind"],
            r["_wal2delta_new__wal2delta_op"],
            r["_wal2delta_new__wal2delta_old_id"],
            r["_wal2delta_old_id"],
            r["_wal2delta_old_kind"],
        )
        for r in rows
    ] == [
        ("insert", 1, "k", "op", "7", None, None),
        ("update", 2, "k2", "op2", "8", 1, "key"),
    ]
    assert "_wal2delta_old___kind" in rows[0]
    assert "_wal2delta_old__wal2delta_op" in rows[0]
