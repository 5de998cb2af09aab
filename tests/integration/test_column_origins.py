"""The record of the Delta columns' source attributes (``_wal2delta_columns``,
``sink/records/bookkeeping.py``): rows it cannot hold yet are appended, any other flush
merges, and no flush - after a failure that committed, or in a new process - writes a
column's row twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from sink import SinkError
from sink.constants import COLUMNS_TABLE
from sink.lake.tables import LakeTables
from sink.planning.evolution import ColumnOrigin
from sink.records.bookkeeping import Bookkeeping
from tests.support.settings import sink_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def record(lake: Path) -> tuple[list[tuple[str, str, str, int]], str]:
    """The record's rows (schema, table, column, attnum), sorted, and its newest commit's
    operation."""
    table = DeltaTable(str(lake / COLUMNS_TABLE))
    rows = table.to_pyarrow_table().to_pylist()
    found = sorted((r["schema_name"], r["table_name"], r["column_name"], r["attnum"]) for r in rows)
    return found, str(table.history(limit=1)[0]["operation"])


def bookkeeping(spark_session: Any, lake: Path) -> Bookkeeping:
    settings = sink_settings(lake)
    return Bookkeeping(LakeTables(spark_session, settings.metadata), str(lake), settings.metadata)


def test_the_columns_of_a_batchs_new_tables_are_appended(spark_session: Any, lake: Path) -> None:
    keeper = bookkeeping(spark_session, lake)
    for table, oid in (("orders", 100), ("tags", 200)):
        assert keeper.column_origins("public", table) == {}
        keeper.record_column_origins(
            "public", table, [("id", ColumnOrigin(1, oid, 10)), ("item", ColumnOrigin(2, oid, 10))]
        )
    keeper.flush_column_origins()
    assert record(lake) == (
        [
            ("public", "orders", "id", 1),
            ("public", "orders", "item", 2),
            ("public", "tags", "id", 1),
            ("public", "tags", "item", 2),
        ],
        "WRITE",  # appended: no MERGE for rows the record cannot hold
    )
    assert keeper.flush_column_origins() is None  # nothing pending: nothing written
    assert DeltaTable(str(lake / COLUMNS_TABLE)).version() == 1  # made, then the append


def test_a_flush_of_rows_the_record_holds_merges(spark_session: Any, lake: Path) -> None:
    first = bookkeeping(spark_session, lake)
    first.record_column_origins("public", "docs", [("rev", ColumnOrigin(3, 100, 10))])
    first.flush_column_origins()
    assert record(lake) == ([("public", "docs", "rev", 3)], "WRITE")

    # The column was dropped and added again (a new attnum): the row is replaced.
    first.record_column_origins("public", "docs", [("rev", ColumnOrigin(4, 100, 20))])
    first.flush_column_origins()
    assert record(lake) == ([("public", "docs", "rev", 4)], "MERGE")

    # A new process reads the record: the same row merges again, beside a new one.
    second = bookkeeping(spark_session, lake)
    second.record_column_origins(
        "public", "docs", [("rev", ColumnOrigin(4, 100, 20)), ("body", ColumnOrigin(2, 100, 20))]
    )
    second.flush_column_origins()
    rows, operation = record(lake)
    assert operation == "MERGE"
    assert rows == [("public", "docs", "body", 2), ("public", "docs", "rev", 4)]


def test_a_flush_that_failed_after_its_commit_is_merged_when_tried_again(
    spark_session: Any, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keeper = bookkeeping(spark_session, lake)
    append = LakeTables.append

    def commits_then_fails(self: LakeTables, *args: Any, **kwargs: Any) -> None:
        append(self, *args, **kwargs)
        raise RuntimeError("the connection dropped before the answer came")

    keeper.record_column_origins("public", "docs", [("id", ColumnOrigin(1, 100, 10))])
    with monkeypatch.context() as patch:
        patch.setattr(LakeTables, "append", commits_then_fails)
        with pytest.raises(SinkError, match="the connection dropped"):
            keeper.flush_column_origins()
    assert record(lake) == ([("public", "docs", "id", 1)], "WRITE")  # it did commit

    keeper.flush_column_origins()  # the rows stayed pending: tried again
    rows, operation = record(lake)
    assert operation == "MERGE"
    assert Counter(rows) == {("public", "docs", "id", 1): 1}
