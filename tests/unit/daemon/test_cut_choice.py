"""``wal2delta cut``: choosing the boundary and each table's version from commit-log rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from daemon.cut import CutError, choose_cut, parse_point, render_cut
from decoder import Lsn
from sink import Batch
from sink.records.commits import transaction_boundary
from tests.support.sink_changes import INT4, col, insert, rel

T = rel("public.t", col("id", INT4, key=True))


def row(
    batch: int, lsn: int | None, table: str, version: int, second: int = 0
) -> dict[str, object]:
    return {
        "batch": batch,
        "lsn": lsn,
        "commit_time": datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC),
        "table_name": table,
        "table_path": f"/lake/{table}",
        "version": version,
        "high_lsn": None if lsn is None else lsn - 1,
    }


def intent(batch: int, high: int) -> dict[str, object]:
    return {
        "batch": batch,
        "lsn": None,
        "commit_time": None,
        "table_name": None,
        "table_path": None,
        "version": None,
        "high_lsn": high,
    }


LOG = [
    row(1, 100, "a", 1, 1),
    row(1, 100, "b", 1, 1),
    row(2, None, "a", 2, 1),  # part of a large transaction: no boundary
    row(3, 300, "b", 2, 3),
    row(4, 400, "a", 3, 4),
]


def test_the_cut_takes_each_tables_newest_version_at_or_before_the_boundary() -> None:
    cut = choose_cut(LOG, Lsn(350))
    assert (cut.batch, cut.lsn) == (3, "0/12C")
    assert [(t.table, t.version) for t in cut.tables] == [("a", 2), ("b", 2)]
    newest = choose_cut(LOG)
    assert [(t.table, t.version) for t in newest.tables] == [("a", 3), ("b", 2)]


def test_a_batch_without_boundary_is_never_a_cut() -> None:
    cut = choose_cut(LOG, Lsn(299))
    assert cut.batch == 1
    assert [(t.table, t.version) for t in cut.tables] == [("a", 1), ("b", 1)]


def test_after_a_crash_replayed_batches_are_no_boundary_until_past_the_crashed_batch() -> None:
    log = [
        intent(1, 99),
        row(1, 100, "a", 1),
        row(1, 100, "b", 1),
        intent(2, 199),  # crashed after writing a (version 2), before b and the record
        intent(3, 149),
        row(3, 150, "a", 3),  # replayed: a holds changes up to 199, b only up to 150
        row(3, 150, "b", 2),
        intent(4, 249),
        row(4, 250, "a", 4),
        row(4, 250, "b", 3),
    ]
    assert choose_cut(log, Lsn(200)).batch == 1
    cut = choose_cut(log)
    assert cut.batch == 4
    assert [(t.table, t.version) for t in cut.tables] == [("a", 4), ("b", 3)]


def test_a_time_cuts_at_the_newest_boundary_committed_by_then() -> None:
    assert choose_cut(LOG, parse_point("2026-01-01T00:00:03")).batch == 3
    assert choose_cut(LOG, parse_point("2026-01-01T01:00:03+01:00")).batch == 3
    with pytest.raises(CutError, match="no transaction boundary at or before"):
        choose_cut(LOG, parse_point("2025-12-31T23:59:59Z"))


def test_points_are_lsns_or_iso_times() -> None:
    assert parse_point("0/12C") == 300
    with pytest.raises(ValueError, match="neither an LSN"):
        parse_point("yesterday")


def test_the_rendering_gives_spark_sql_and_delta_rs_for_every_table() -> None:
    text = render_cut(choose_cut(LOG))
    assert "SELECT * FROM delta.`/lake/a` VERSION AS OF 3;" in text
    assert "'b': DeltaTable('/lake/b', version=2)," in text
    assert '"spark_sql": "SELECT * FROM delta.`/lake/b` VERSION AS OF 2"' in render_cut(
        choose_cut(LOG), as_json=True
    )


def test_a_batch_ends_at_its_durable_lsn_only_when_its_last_change_commits_before_it() -> None:
    whole = Batch((insert(T, "1", lsn=10),), Lsn(11), 1, None)
    assert transaction_boundary(whole) == 11
    # Closed at max_rows inside the next transaction: durable_lsn is the previous end.
    inside = Batch((insert(T, "1", lsn=10), insert(T, "2", lsn=20)), Lsn(11), 1, None)
    assert transaction_boundary(inside) is None
    assert transaction_boundary(Batch((insert(T, "2", lsn=20),), None, 0, None)) is None
    assert transaction_boundary(Batch((), Lsn(30), 1, None)) == 30
