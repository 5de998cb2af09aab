"""Many tables in one batch (``sink.concurrency``, ``sink.table_min_rows``) on a real Sail
session, every table read back with delta-rs.

* Tables applied at once end exactly as tables applied one after the other.
* A table whose MERGE fails does not stop the others' MERGEs, but the batch fails: nothing
  of it may be acknowledged, and the commit log records no version for it
  (docs/architecture.md, invariant 1).
* Held-back changes of small tables reach Delta with a later batch, and a batch that leaves
  changes held records no cut in the commit log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from decoder import Relation
from sink import Batch, DeltaSink, SinkError, table_path
from sink.records.commits import commits_path
from tests.support.oracle import delta_rows
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, batch, col, delete, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TABLES = [rel(f"public.t{i}", col("id", INT4, key=True), col("body")) for i in range(8)]


def _batches() -> list[Batch]:
    """Three batches over every table: inserts, then updates and deletes."""
    lsn = 100
    first, second, third = [], [], []
    for index, table in enumerate(TABLES):
        for key in range(5):
            first.append(
                insert(
                    table,
                    str(key),
                    f"{table.relation_name} {key}",
                    lsn=lsn,
                    ordinal=index * 10 + key,
                )
            )
        second.append(
            update(table, "1", f"{table.relation_name} one", lsn=lsn + 100, ordinal=index)
        )
        third.append(delete(table, "2", None, lsn=lsn + 200, ordinal=index))
    return [batch(*first), batch(*second), batch(*third)]


def _contents(lake: Path, tables: list[Relation]) -> dict[str, list[dict[str, object]]]:
    return {
        t.qualified_name: sorted(
            delta_rows(table_path(str(lake), t.schema_name, t.relation_name)),
            key=lambda row: str(row["id"]),
        )
        for t in tables
    }


def test_tables_applied_at_once_end_as_tables_applied_one_by_one(
    spark_session: Any, tmp_path: Path
) -> None:
    results = {}
    for concurrency in (1, 4):
        lake = tmp_path / f"lake{concurrency}"
        sink = DeltaSink(spark_session, sink_settings(lake, concurrency=concurrency))
        try:
            for applied in _batches():
                result = sink.apply(applied)
                assert set(result.rows_by_table) == {t.qualified_name for t in TABLES}
        finally:
            sink.close()
        results[concurrency] = _contents(lake, TABLES)
    assert results[4] == results[1]
    assert results[4]["public.t3"] == [
        {"id": 0, "body": "t3 0"},
        {"id": 1, "body": "t3 one"},
        {"id": 3, "body": "t3 3"},
        {"id": 4, "body": "t3 4"},
    ]


def _break_delta_log(lake: Path, table: Relation) -> Path:
    """Write an unreadable next commit into the table's log: its next MERGE fails."""
    path = Path(table_path(str(lake), table.schema_name, table.relation_name))
    version = DeltaTable(str(path)).version() + 1
    broken = path / "_delta_log" / f"{version:020d}.json"
    broken.write_text("this is not a Delta commit\n")
    return broken


def test_a_failing_table_fails_the_batch_while_the_others_commit(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake, concurrency=4))
    first, second, _ = _batches()
    try:
        sink.apply(first)
        broken = _break_delta_log(lake, TABLES[3])
        with pytest.raises(SinkError, match=r"public\.t3"):
            sink.apply(second)
    finally:
        sink.close()
    contents = _contents(lake, [t for t in TABLES if t is not TABLES[3]])
    for name, rows in contents.items():
        assert {"id": 1, "body": f"{name.split('.')[1]} one"} in rows, (
            f"{name}'s MERGE ran to its end although another table failed"
        )
    recorded = DeltaTable(commits_path(str(lake))).to_pyarrow_table().to_pylist()
    second_lsn = max(c.commit_lsn for c in second.changes)
    assert not [row for row in recorded if row["table_name"] and row["lsn"] == second_lsn], (
        "the failed batch is recorded nowhere in the commit log"
    )
    # Once the table is repaired, the same batch applies again and ends equal.
    broken.unlink()
    sink = DeltaSink(spark_session, sink_settings(lake, concurrency=4))
    try:
        sink.apply(second)
    finally:
        sink.close()
    rows = delta_rows(table_path(str(lake), "public", "t3"))
    assert {"id": 1, "body": "t3 one"} in rows


def test_held_back_changes_of_small_tables_arrive_with_a_later_batch(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(
        spark_session, sink_settings(lake, concurrency=2, table_min_rows=3, table_max_age="1h")
    )
    big, small = TABLES[0], TABLES[1]
    try:
        result = sink.apply(
            batch(
                insert(big, "1", "a", lsn=100),
                insert(big, "2", "b", lsn=100, ordinal=1),
                insert(big, "3", "c", lsn=100, ordinal=2),
                insert(small, "1", "x", lsn=100, ordinal=3),
            )
        )
        assert result.held_lsn == 100
        assert result.held_changes == 1
        assert set(result.rows_by_table) == {"public.t0"}
        assert sink.held_deadline() is not None
        small_path = table_path(str(lake), "public", "t1")
        assert not Path(small_path).exists(), "a held table is not written"
        recorded = DeltaTable(commits_path(str(lake))).to_pyarrow_table().to_pylist()
        assert all(row["lsn"] is None for row in recorded), "a batch holding changes is no cut"
        release = Batch(
            (), durable_lsn=None, transaction_count=0, last_commit_time=None, release_held=True
        )
        result = sink.apply(release)
        assert result.held_lsn is None
        assert delta_rows(small_path) == [{"id": 1, "body": "x"}]
    finally:
        sink.close()
