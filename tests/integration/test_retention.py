"""Retention (``sink.retention``, ``sink.retention``): old files vacuumed on Sail-written
tables, read back with delta-rs.

A lake written for a while, then left alone longer than the retention while only one of
its tables goes on changing: a vacuum deletes the data and deletion-vector files only
old versions read, while every version of the retention window reads as it was (time
travel), the newest versions read, and the version a cut names for the table not
written since - replaced by a compaction long ago - still reads exactly; a cut at an
older boundary is refused. The sink vacuums by itself when configured.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from daemon.cut import CutError, choose_cut
from decoder import Lsn, RowChange
from sink import DeltaSink, commits_path, read_commit_records, table_path
from sink.lake.deltalog import read_table_files
from sink.upkeep.retention import Retention, vacuum_interval
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, col, delete, ended, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

DOCS = rel("public.docs", col("id", INT4, key=True), col("body"))
TAGS = rel("public.tags", col("id", INT4, key=True), col("tag"), relation_id=16385)
RETENTION = 6.0


def _rows(path: str, version: int | None = None) -> dict[int, str]:
    table = DeltaTable(path, version=version)
    data = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    value = "body" if "body" in data.column_names else "tag"
    return {r["id"]: r[value] for r in data.select(["id", value]).to_pylist()}


def _stored(path: str) -> set[str]:
    """Every data and deletion-vector file under the table's directory."""
    root = Path(path)
    return {
        str(f.relative_to(root))
        for f in root.rglob("*")
        if f.is_file() and "_delta_log" not in f.parts and f.suffix in {".parquet", ".bin"}
    }


def _versions(path: str, records: list[dict[str, Any]]) -> list[int]:
    return sorted(int(r["version"]) for r in records if r["table_path"] == path)


def test_a_vacuum_keeps_the_retention_window_and_every_version_a_cut_names(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(lake, deletion_vectors=["public.docs"], compact_after_writes=0)
    sink = DeltaSink(spark_session, settings)
    docs, tags = (table_path(str(lake), "public", t) for t in ("docs", "tags"))
    # The old part: both tables change; docs gets deletion vectors.
    body = {n: f"b{n}" for n in range(1, 61)}
    seed = [insert(DOCS, str(n), body[n], lsn=10, ordinal=n) for n in body]
    sink.apply(ended(*seed, insert(TAGS, "1", "t1", lsn=10, ordinal=99)))
    history = [dict(body)]
    for n in range(1, 5):
        lsn = 10 + 10 * n
        changes: list[RowChange] = [
            update(DOCS, str(n * 7), f"u{n}", lsn=lsn, ordinal=0),
            delete(DOCS, str(n * 11), None, lsn=lsn, ordinal=1),
            # tags is copy-on-write: the update rewrites the file holding row 1.
            update(TAGS, "1", f"t1.{n}", lsn=lsn, ordinal=2),
            insert(TAGS, str(n + 1), f"t{n + 1}", lsn=lsn, ordinal=3),
        ]
        body[n * 7] = f"u{n}"
        del body[n * 11]
        sink.apply(ended(*changes))
        history.append(dict(body))
    sink.settle()
    assert read_table_files(docs).live_vectors
    old_docs = DeltaTable(docs).version()
    # Upkeep after the last write replaces every file the recorded version reads.
    DeltaTable(docs).optimize.compact()
    assert not read_table_files(docs).live_vectors
    time.sleep(RETENTION + 1)
    # The recent part: only tags change.
    for n in range(5, 8):
        lsn = 100 + n
        sink.apply(
            ended(
                update(TAGS, "1", f"t1.{n}", lsn=lsn),
                insert(TAGS, str(n + 1), "x", lsn=lsn, ordinal=1),
            )
        )
    sink.settle()
    records: list[dict[str, Any]] = read_commit_records(str(lake))
    before = {path: _stored(path) for path in (docs, tags)}

    retention = Retention(RETENTION, str(lake), every=0)
    retention.wrote([docs, tags, commits_path(str(lake))])
    retention.vacuum_due()
    vacuumed_before = datetime.now(UTC) - timedelta(seconds=RETENTION)

    after = {path: _stored(path) for path in (docs, tags)}
    gone = before[docs] - after[docs]
    # Superseded deletion vectors are deleted; the data files all stay: the version the cut
    # names (before the compaction) reads every one of them.
    assert gone, "docs' older vectors are older than the retention"
    assert all(f.endswith(".bin") for f in gone), gone
    assert any(f.endswith(".parquet") for f in before[tags] - after[tags])
    # The cut names docs' last recorded version, replaced by the compaction long ago: kept.
    cut = choose_cut(records, vacuumed_before=vacuumed_before)
    named = {t.path: t.version for t in cut.tables}
    assert named[docs] == old_docs
    assert _rows(docs, old_docs) == history[-1]
    assert _rows(docs) == history[-1]
    # Every tags version of the retention window reads (time travel), the newest too.
    window = [
        int(r["version"])
        for r in records
        if r["table_path"] == tags and r["recorded_at"] >= vacuumed_before
    ]
    assert window, "the recent batches are younger than the retention"
    for version in window:
        assert _rows(tags, version)[1].startswith("t1.")
    assert _rows(tags)[1] == "t1.7"
    # Older versions nobody keeps are gone: docs' with a vector superseded since, tags'
    # first, whose file a later MERGE rewrote.
    with pytest.raises(Exception, match=r"(?i)not found|no such file"):
        _rows(docs, _versions(docs, records)[1])
    with pytest.raises(Exception, match=r"(?i)not found|no such file"):
        _rows(tags, _versions(tags, records)[0])
    # A cut at an older boundary is refused, not answered with versions that may be gone.
    first = min(int(r["lsn"]) for r in records if r["lsn"] is not None)
    with pytest.raises(CutError, match=r"sink\.retention"):
        choose_cut(records, Lsn(first), vacuumed_before=vacuumed_before)
    assert choose_cut(records, Lsn(first)).batch == 1  # without retention: as before
    # A second vacuum finds nothing more to delete.
    retention.vacuum_due()
    assert {path: _stored(path) for path in (docs, tags)} == after


def test_the_sink_vacuums_each_table_it_writes_when_retention_is_set(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    tags = table_path(str(lake), "public", "tags")
    sink = DeltaSink(spark_session, sink_settings(lake, compact_after_writes=2))
    # Five writes, compacted after the second and the fourth: the version the last batch
    # recorded (the one a cut at the newest boundary names, which the vacuum keeps) holds
    # only live files.
    for n in range(1, 6):
        sink.apply(ended(insert(TAGS, str(n), f"t{n}", lsn=10 * n)))
        sink.after_apply()
    sink.close()
    stored = _stored(tags)
    assert len(stored) > len(DeltaTable(tags).file_uris())  # compacted away, still stored
    time.sleep(2)
    # The next process, with retention: a table is vacuumed when first written, then every
    # quarter of the retention, at most hourly.
    sink = DeltaSink(spark_session, sink_settings(lake, compact_after_writes=0, retention="1s"))
    sink.apply(ended(insert(TAGS, "9", "t9", lsn=100)))
    sink.after_apply()
    live = {uri.removeprefix(tags + "/") for uri in DeltaTable(tags).file_uris()}
    assert live <= _stored(tags)
    assert stored - _stored(tags) == stored - live, "every file compacted away is deleted"
    assert _rows(tags) == {1: "t1", 2: "t2", 3: "t3", 4: "t4", 5: "t5", 9: "t9"}
    assert vacuum_interval(1.0) == 3600
    assert vacuum_interval(7 * 86400) == 7 * 86400 / 4


def test_a_deadline_spreads_the_vacuums_due_together_over_calls(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"t{n}") for n in range(3)]
    for path in paths:
        write_deltalake(path, pa.table({"id": [1]}))
        write_deltalake(path, pa.table({"id": [2]}), mode="overwrite")
    time.sleep(0.2)
    retention = Retention(0.1, str(tmp_path), every=3600)
    retention.wrote(paths)  # all three due together

    def stored() -> list[int]:
        return [len(list(Path(p).glob("*.parquet"))) for p in paths]

    assert stored() == [2, 2, 2]
    past = time.monotonic() - 1
    # A passed deadline still vacuums one table a call, in the order they came due.
    assert retention.vacuum_due(past) is True
    assert stored() == [1, 2, 2]
    assert retention.vacuum_due(past) is True
    assert retention.vacuum_due(past) is False
    assert stored() == [1, 1, 1]
    assert retention.vacuum_due(past) is False  # each waits for its next turn now
