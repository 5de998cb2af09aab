"""Change history and commit log of ``DeltaSink`` on embedded Sail, read back with delta-rs.

The history holds every change once, whatever replays the sink sees (the same batch again,
or the batches cut differently); the commit log holds, per batch, the Delta version each
written table had right after it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable, write_deltalake

from daemon.cut import choose_cut
from decoder import Lsn
from sink import Batch, DeltaSink, table_path
from sink.records.commits import commits_path
from sink.values.naming import history_path
from tests.support.settings import sink_settings
from tests.support.sink_changes import (
    INT4,
    U,
    batch,
    col,
    commit_time,
    delete,
    ended,
    insert,
    rel,
    truncate,
    update,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOCS = rel("public.docs", col("id", INT4, key=True), col("body"), col("rev", INT4))
TAGS = rel("public.tags", col("id", INT4, key=True), col("tag"), relation_id=16385)

HistoryRow = tuple[str, int, int, int | None, str | None, int | None, int | None, Any]


def history(lake: Path, table: str = "docs") -> list[HistoryRow]:
    rows = DeltaTable(history_path(str(lake), "public", table)).to_pyarrow_table().to_pylist()
    out = [
        (
            r["_wal2delta_op"],
            r["_wal2delta_lsn"],
            r["_wal2delta_ordinal"],
            r["id"],
            r.get("body", r.get("tag")),
            r.get("rev"),
            r["_wal2delta_old_id"],
            r["_wal2delta_unchanged_toast"],
        )
        for r in rows
    ]
    return sorted(out, key=lambda r: (r[1], r[2]))


def changes() -> list[Batch]:
    return [
        batch(
            insert(DOCS, "1", "one", "1", lsn=10),
            insert(DOCS, "2", "two", "1", lsn=10, ordinal=1),
            update(DOCS, "1", U, "2", lsn=20),  # body unchanged TOAST: from the insert
        ),
        batch(
            # Key change 2 -> 3, body unchanged TOAST and in no change of this batch.
            update(DOCS, "3", U, "3", lsn=30, old=["2", None, None]),
            update(DOCS, "3", "three", "4", lsn=30, ordinal=1),
            update(DOCS, "3", U, "5", lsn=30, ordinal=2),  # filled from the change before
            delete(DOCS, "1", None, None, lsn=40),
        ),
        batch(truncate(DOCS, lsn=50), insert(DOCS, "7", "seven", "1", lsn=50, ordinal=1)),
    ]


EXPECTED: list[HistoryRow] = [
    ("insert", 10, 0, 1, "one", 1, None, None),
    ("insert", 10, 1, 2, "two", 1, None, None),
    ("update", 20, 0, 1, "one", 2, None, None),
    ("update", 30, 0, 3, None, 3, 2, ["body"]),
    ("update", 30, 1, 3, "three", 4, None, None),
    ("update", 30, 2, 3, "three", 5, None, None),
    ("delete", 40, 0, None, None, None, 1, None),
    ("truncate", 50, 0, None, None, None, None, None),
    ("insert", 50, 1, 7, "seven", 1, None, None),
]


def make_sink(spark_session: Any, lake: Path, history: bool | list[str]) -> DeltaSink:
    return DeltaSink(spark_session, sink_settings(lake, history=history))


def test_history_holds_every_change_once_with_old_keys_and_unchanged_toast_named(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = make_sink(spark_session, lake, ["public.docs"])
    for each in changes():
        sink.apply(each)
    assert history(lake) == EXPECTED
    # The merged table is unchanged by the history: only row 7 after the truncate.
    merged = DeltaTable(table_path(str(lake), "public", "docs")).to_pyarrow_table()
    assert merged.column("id").to_pylist() == [7]


def test_replayed_batches_cut_differently_add_nothing_to_the_history(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    first, second, third = changes()
    sink = make_sink(spark_session, lake, True)
    sink.apply(first)
    sink.apply(second)
    # A restart: a new sink (floors read from the tables) sees the first two batches as
    # one, then the last batch twice, the second time split differently.
    sink = make_sink(spark_session, lake, True)
    sink.apply(batch(*first.changes, *second.changes))
    sink.apply(third)
    sink = make_sink(spark_session, lake, True)
    sink.apply(batch(*second.changes[2:], *third.changes[:1]))
    sink.apply(batch(*third.changes[1:]))
    assert history(lake) == EXPECTED


def test_only_the_listed_tables_keep_a_history(spark_session: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    sink = make_sink(spark_session, lake, ["public.tags"])
    sink.apply(
        batch(insert(DOCS, "1", "one", "1", lsn=10), insert(TAGS, "1", "a", lsn=10, ordinal=1))
    )
    assert not DeltaTable.is_deltatable(history_path(str(lake), "public", "docs"))
    tags = DeltaTable(history_path(str(lake), "public", "tags")).to_pyarrow_table().to_pylist()
    assert [(r["_wal2delta_op"], r["id"], r["tag"]) for r in tags] == [("insert", 1, "a")]


def test_commit_log_records_each_batch_with_the_versions_it_made(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = make_sink(spark_session, lake, ["public.docs"])
    docs = table_path(str(lake), "public", "docs")
    docs_history = history_path(str(lake), "public", "docs")
    tags = table_path(str(lake), "public", "tags")
    seen: list[dict[str, int]] = []
    sink.apply(
        ended(insert(DOCS, "1", "one", "1", lsn=10), insert(TAGS, "1", "a", lsn=10, ordinal=1))
    )
    seen.append({p: DeltaTable(p).version() for p in (docs, docs_history, tags)})
    part = Batch((insert(TAGS, "2", "b", lsn=30),), None, 0, None)  # part of a transaction
    sink.apply(part)
    seen.append({tags: DeltaTable(tags).version()})
    sink.apply(ended(update(DOCS, "1", "uno", "2", lsn=30, ordinal=1)))
    seen.append({p: DeltaTable(p).version() for p in (docs, docs_history)})
    # A batch closed part-way through the next transaction ends at no boundary.
    sink.apply(
        Batch(
            (*ended(insert(TAGS, "3", "c", lsn=40)).changes, insert(TAGS, "4", "d", lsn=50)),
            Lsn(41),
            1,
            None,
        )
    )
    seen.append({tags: DeltaTable(tags).version()})
    commits = DeltaTable(commits_path(str(lake)))
    # A record waits for the next batch's intent and goes into the same commit, so the
    # log has one commit per batch (after version 0, which created it); the last record
    # waits until the sink settles.
    assert commits.version() == 4
    assert {r["batch"] for r in commits.to_pyarrow_table().to_pylist()} == {1, 2, 3, 4}
    assert max(r["batch"] for r in _records(commits)) == 3
    sink.settle()
    commits.update_incremental()
    assert commits.version() == 5
    rows = commits.to_pyarrow_table().to_pylist()
    log = [r for r in rows if r["table_name"] is not None]
    # Each batch with changes first records its intent: its newest change, no table.
    intents = sorted((r["batch"], r["high_lsn"]) for r in rows if r["table_name"] is None)
    assert intents == [(1, 10), (2, 30), (3, 30), (4, 50)]
    by_batch: dict[int, dict[str, int]] = {}
    lsns: dict[int, int | None] = {}
    for row in log:
        by_batch.setdefault(row["batch"], {})[row["table_path"]] = row["version"]
        lsns[row["batch"]] = row["lsn"]
    assert [by_batch[n] for n in sorted(by_batch)] == seen
    # The boundary is the end of the batch's last transaction, past its commit LSN.
    assert [lsns[n] for n in sorted(lsns)] == [Lsn(11), None, Lsn(31), None]
    names = {row["table_name"] for row in log}
    assert names == {"public.docs", "public.docs__changes", "public.tags"}


def test_a_record_lost_in_a_crash_costs_one_boundary_and_no_cut_is_wrong(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = make_sink(spark_session, lake, False)
    sink.apply(ended(insert(DOCS, "1", "one", "1", lsn=10), insert(TAGS, "1", "a", lsn=10)))
    # Two transactions; the batch's record waits for the next intent...
    sink.apply(ended(update(DOCS, "1", "uno", "2", lsn=20), insert(TAGS, "2", "b", lsn=30)))
    # ... and the process is killed: never settled, never closed. The writes are durable.
    del sink
    sink = make_sink(spark_session, lake, False)  # the next process
    # The server sends everything after the last acknowledged position again, in batches
    # cut differently: the first ends at 21, while public.tags already holds the change at 30.
    sink.apply(ended(update(DOCS, "1", "uno", "2", lsn=20)))
    sink.apply(ended(insert(TAGS, "2", "b", lsn=30), insert(TAGS, "3", "c", lsn=40)))
    sink.close()
    rows = DeltaTable(commits_path(str(lake))).to_pyarrow_table().to_pylist()
    intents = sorted((r["batch"], r["high_lsn"]) for r in rows if r["table_name"] is None)
    assert intents == [(1, 10), (2, 30), (3, 20), (4, 40)]
    assert {r["batch"] for r in _records_of(rows)} == {1, 3, 4}, "batch 2's record was lost"
    # Batch 3's boundary (21) is before the lost batch's newest change: never a cut.
    assert choose_cut(rows, Lsn(35)).batch == 1
    assert choose_cut(rows).batch == 4


def _records_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["table_name"] is not None]


def _records(commits: DeltaTable) -> list[dict[str, Any]]:
    return _records_of(commits.to_pyarrow_table().to_pylist())


ORDERS = rel(
    "public.orders", col("id", INT4, key=True), col("status"), col("total", INT4), relation_id=16386
)
OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def scd2_query(lake: Path) -> str:
    """The SCD type 2 query of docs/operations.md, reading this lake's history."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text[text.index("**SCD type 2 from the history.**") :]
    query = section[section.index("```sql\n") + 7 : section.index("\n```", section.index("```sql"))]
    return query.replace(
        "/lake/public/orders__changes", history_path(str(lake), "public", "orders")
    )


def test_the_documented_scd2_query_gives_each_key_its_versions_on_sail(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = make_sink(spark_session, lake, True)
    sink.apply(
        ended(
            insert(ORDERS, "1", "new", "10", lsn=10),
            insert(ORDERS, "2", "new", "20", lsn=10, ordinal=1),
        )
    )
    sink.apply(ended(update(ORDERS, "1", "paid", "10", lsn=20)))
    sink.apply(
        ended(
            update(ORDERS, "3", "moved", "20", lsn=30, old=["2", None, None]),  # key 2 -> 3
            update(ORDERS, "1", "sent", "11", lsn=40),
            update(ORDERS, "1", "sent", "12", lsn=40, ordinal=1),  # same transaction
            delete(ORDERS, "1", None, None, lsn=50),
        )
    )
    # Through Arrow: timestamps stay UTC instants, whatever the session time zone.
    rows = [tuple(r.values()) for r in spark_session.sql(scd2_query(lake)).toArrow().to_pylist()]
    t = commit_time
    assert rows == [
        (1, "new", 10, t(10), t(20)),
        (1, "paid", 10, t(20), t(40)),
        (1, "sent", 12, t(40), t(50)),
        (2, "new", 20, t(10), t(30)),
        (3, "moved", 20, t(30), None),
    ]


def test_a_history_written_before_xids_were_recorded_gains_the_column(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    make_sink(spark_session, lake, True).apply(batch(insert(DOCS, "1", "one", "1", lsn=10)))
    path = history_path(str(lake), "public", "docs")
    # The history as an earlier release wrote it: no _wal2delta_xid column.
    old = DeltaTable(path).to_pyarrow_table().drop_columns(["_wal2delta_xid"])
    write_deltalake(path, old, mode="overwrite", schema_mode="overwrite")
    later = replace(insert(DOCS, "2", "two", "1", lsn=20), xid=77)
    make_sink(spark_session, lake, True).apply(batch(later))
    rows = DeltaTable(path).to_pyarrow_table().sort_by("_wal2delta_lsn").to_pylist()
    assert [(r["id"], r["_wal2delta_xid"]) for r in rows] == [(1, None), (2, 77)]
