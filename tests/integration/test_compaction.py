"""Small-file compaction between batches (``sink.compaction``), on Sail, read with delta-rs.

A stream of small batches into a keyed table with a change history: with compaction every
third write, the merged table, its history and the commit log each end with far fewer
files than writes, hold exactly the rows of an uncompacted run, and keep accepting MERGEs;
older versions still read as they were.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from structlog.testing import capture_logs

from sink import DeltaSink, table_path
from sink.lake import deltars
from sink.records.commits import commits_path
from sink.upkeep.compaction import Compactor
from sink.values.naming import history_path
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, batch, col, delete, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOCS = rel("public.docs", col("id", INT4, key=True), col("body"))
BATCHES = 12


def _stream(sink: DeltaSink) -> None:
    for n in range(BATCHES):
        lsn = 100 + 10 * n
        changes = [insert(DOCS, str(n * 10 + i), f"v{n}", lsn=lsn, ordinal=i) for i in range(5)]
        if n:
            changes.append(update(DOCS, str(n * 10 - 10), "changed", lsn=lsn, ordinal=5))
            changes.append(delete(DOCS, str(n * 10 - 9), None, lsn=lsn, ordinal=6))
        sink.apply(batch(*changes))
        sink.after_apply()  # as the sink worker does once the batch is reported


def _rows(path: str) -> list[dict[str, Any]]:
    table: pa.Table = DeltaTable(path).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: sorted((k, str(v)) for k, v in r.items()))


def _paths(lake: Path) -> list[str]:
    return [
        table_path(str(lake), "public", "docs"),
        history_path(str(lake), "public", "docs"),
        commits_path(str(lake)),
    ]


def test_compaction_keeps_the_rows_and_bounds_the_files(spark_session: Any, tmp_path: Path) -> None:
    plain, compacted = tmp_path / "plain", tmp_path / "compacted"
    _stream(DeltaSink(spark_session, sink_settings(plain, history=True)))
    sink = DeltaSink(spark_session, sink_settings(compacted, history=True, compact_after_writes=3))
    _stream(sink)
    for before, after in zip(_paths(plain), _paths(compacted), strict=True):
        operations = [c["operation"] for c in DeltaTable(after).history()]
        assert "OPTIMIZE" in operations, after
        assert len(DeltaTable(after).file_uris()) < len(DeltaTable(before).file_uris()) / 2
        if "_wal2delta_commits" not in after:  # the commit log holds its own timestamps
            assert _rows(after) == _rows(before), after
    # Versions before a compaction read as they were (time travel, wal2delta cut).
    docs = table_path(str(compacted), "public", "docs")
    first = DeltaTable(docs, version=0).to_pyarrow_table()  # made by its first append
    assert sorted(first.column("id").to_pylist()) == [0, 1, 2, 3, 4]
    # MERGEs go on after compactions.
    sink.apply(batch(update(DOCS, "0", "after", lsn=1000)))
    bodies = dict(
        zip(
            *DeltaTable(docs).to_pyarrow_table().select(["id", "body"]).to_pydict().values(),
            strict=True,
        )
    )
    assert bodies[0] == "after"


def test_a_due_compaction_waits_for_after_apply_or_the_next_batch(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake, compact_after_writes=2))
    docs = table_path(str(lake), "public", "docs")

    def operations() -> list[str]:
        return [c["operation"] for c in DeltaTable(docs).history()]

    # The table is made by its first append (decision 0130): that commit is its first write.
    sink.apply(batch(insert(DOCS, "1", "a", lsn=10)))
    sink.after_apply()
    assert operations() == ["CREATE TABLE"]  # one write: nothing due
    sink.apply(batch(insert(DOCS, "2", "b", lsn=20)))
    # Due now, but the batch that made it due returned before any compaction.
    assert "OPTIMIZE" not in operations()
    sink.after_apply()
    assert operations()[0] == "OPTIMIZE"
    assert operations().count("OPTIMIZE") == 1
    sink.apply(batch(insert(DOCS, "3", "c", lsn=30)))
    sink.apply(batch(insert(DOCS, "4", "d", lsn=40)))
    # A caller that never calls after_apply: the next batch compacts before it writes.
    sink.apply(batch(insert(DOCS, "5", "e", lsn=50)))
    assert operations()[:2] == ["WRITE", "OPTIMIZE"]  # new keys: appended (step_append.py)
    assert operations().count("OPTIMIZE") == 2
    assert sorted(DeltaTable(docs).to_pyarrow_table().column("id").to_pylist()) == [
        1,
        2,
        3,
        4,
        5,
    ]


def test_zero_never_compacts(tmp_path: Path) -> None:
    compactor = Compactor(0)
    compactor.wrote([str(tmp_path / "missing")] * 5)
    compactor.compact_due()  # would fail loudly if it tried


def test_a_failed_compaction_warns_and_waits_for_the_next_round(tmp_path: Path) -> None:
    compactor = Compactor(2)
    missing = str(tmp_path / "not-a-table")
    with capture_logs() as logs:
        compactor.wrote([missing])
        compactor.compact_due()
        assert not logs  # not due yet
        compactor.wrote([missing])
        compactor.compact_due()
        compactor.compact_due()  # tried once, not again until due again
    assert [e["log_level"] for e in logs] == ["warning"]
    assert logs[0]["table_path"] == missing


def test_a_new_process_counts_the_commits_since_the_last_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    for n in range(4):
        write_deltalake(path, pa.table({"id": [n]}), mode="append")
    compactor = Compactor(4)
    compactor.wrote([path])  # four commits, none a compaction: due at once
    assert DeltaTable(path).history(limit=1)[0]["operation"] == "WRITE"  # noted, not done
    compactor.compact_due()
    assert DeltaTable(path).history(limit=1)[0]["operation"] == "OPTIMIZE"
    write_deltalake(path, pa.table({"id": [9]}), mode="append")
    compactor = Compactor(4)
    compactor.wrote([path])  # one commit since: not due
    compactor.compact_due()
    assert DeltaTable(path).history(limit=1)[0]["operation"] == "WRITE"
    assert sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 9]


def test_a_table_first_written_is_counted_from_its_log_by_the_upkeep_not_by_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a table's log on its first write in a process put one read per new table
    (200 at 4.7 ms each in ``bench tables``) between a batch and its acknowledgement."""
    paths = [str(tmp_path / f"t{n}") for n in range(3)]
    for path in paths:
        for n in range(3):
            write_deltalake(path, pa.table({"id": [n]}), mode="append")
    read: list[str] = []
    history = deltars.history

    def counted(path: str, limit: int) -> list[dict[str, Any]]:
        read.append(path)
        return history(path, limit)

    monkeypatch.setattr(deltars, "history", counted)
    compactor = Compactor(3)
    compactor.wrote(paths)
    compactor.wrote(paths[:1])  # a second write before the upkeep: in the log it reads
    assert read == []
    # A spent budget reads one log a call, and compacts what that made due.
    assert compactor.compact_due(budget_seconds=0.0) is True
    assert read == paths[:1]
    assert DeltaTable(paths[0]).history(limit=1)[0]["operation"] == "OPTIMIZE"
    assert compactor.compact_due() is False
    assert read == paths  # each log once
    assert all(DeltaTable(p).history(limit=1)[0]["operation"] == "OPTIMIZE" for p in paths)
    compactor.wrote(paths)  # counted in memory from here: no read, not due
    assert compactor.compact_due() is False
    assert read == paths


def test_a_budget_spreads_the_tables_due_together_over_calls(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"t{n}") for n in range(3)]
    for path in paths:
        for n in range(2):
            write_deltalake(path, pa.table({"id": [n]}), mode="append")
    compactor = Compactor(2)
    compactor.wrote(paths)  # all three due together

    def compacted() -> list[bool]:
        return [DeltaTable(p).history(limit=1)[0]["operation"] == "OPTIMIZE" for p in paths]

    # A spent budget still compacts one table a call, in the order they came due.
    assert compactor.compact_due(budget_seconds=0.0) is True
    assert compacted() == [True, False, False]
    assert compactor.compact_due(budget_seconds=0.0) is True
    assert compacted() == [True, True, False]
    assert compactor.compact_due(budget_seconds=0.0) is False
    assert compacted() == [True, True, True]
    assert compactor.compact_due(budget_seconds=0.0) is False  # nothing left
    # Without a budget, everything due is done in one call.
    for path in paths:
        write_deltalake(path, pa.table({"id": [9]}), mode="append")
    compactor.wrote(paths)
    compactor.wrote(paths)
    assert compactor.compact_due() is False
    assert compacted() == [True, True, True]
    assert [len(DeltaTable(p).file_uris()) for p in paths] == [1, 1, 1]
