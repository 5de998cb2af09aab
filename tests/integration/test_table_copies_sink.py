"""A table copied while streaming, at the sink (``sink/copies/copies.py``), on a real Sail session,
read back with delta-rs.

The order of events a copy goes through, with the stream's changes at each step: applied
before the copy starts; dropped (and holding the acknowledgement) from its start until the
stream is rewound; after the rewind, skipped before the copy's consistent point and
applied after it. The copy replaces the table in one commit.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from decoder import Lsn, datetime_to_pg_timestamp
from sink import DeltaSink, SinkError, table_path
from sink.copies.copies import RESYNC_PREFIX, resync_message
from sink.lake.deltalog import read_table_files
from tests.support.oracle import delta_rows
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, batch, col, commit_time, insert, message, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOCS = rel("public.docs", col("id", INT4, key=True), col("body"))
OTHER = rel("public.other", col("id", INT4, key=True), col("body"))


def _adopted_from(path: str, staging: Path) -> bool:
    """Whether every live file of the table at ``path`` is one the copy wrote to ``staging``."""
    live = read_table_files(path).live_paths
    return bool(live) and all(f.startswith(f"{staging.name}/") for f in live)


def _rows(lake: Path, table: str) -> list[dict[str, object]]:
    return sorted(delta_rows(table_path(str(lake), "public", table)), key=lambda r: str(r["id"]))


def test_a_copy_replaces_the_table_in_one_commit_and_meets_the_stream_at_its_point(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        sink.apply(batch(insert(DOCS, "1", "old", lsn=100), insert(OTHER, "1", "a", lsn=100)))
        path = table_path(str(lake), "public", "docs")
        before = DeltaTable(path).version()

        sink.parts.copies.start_copies(["public.docs"], "resync")
        result = sink.apply(
            batch(update(DOCS, "1", "dropped before S", lsn=200), insert(OTHER, "2", "b", lsn=200))
        )
        assert result.held_lsn == 200, "the first dropped change holds the acknowledgement"
        assert _rows(lake, "docs") == [{"id": 1, "body": "old"}]
        assert _rows(lake, "other") == [{"id": 1, "body": "a"}, {"id": 2, "body": "b"}]

        point = Lsn(300)  # the temporary slot's consistent point
        target = sink.parts.copies.begin_copy(
            DOCS, point, datetime_to_pg_timestamp(commit_time(300))
        )
        copied = pa.table({"id": ["1", "5"], "body": ["copied", "five"]})
        assert sink.parts.copies.append_bulk(target, copied, 1) == 2
        assert DeltaTable(path).version() == before, "the table is untouched while copying"
        sink.parts.copies.finish_copy(DOCS, target, point, "resync")
        assert DeltaTable(path).version() == before + 1, "one commit replaces the table"
        assert _rows(lake, "docs") == [{"id": 1, "body": "copied"}, {"id": 5, "body": "five"}]
        staging = Path(target.path)
        assert _adopted_from(path, staging), "the staged files are not written again"
        assert not (staging / "_delta_log").exists(), "the staging table's log is removed"
        assert sink.parts.copies.copy_rewind_due()

        # Until the stream is rewound, changes stay dropped (commit order per table).
        result = sink.apply(batch(update(DOCS, "5", "after S, early", lsn=400)))
        assert result.held_lsn == 200
        assert _rows(lake, "docs")[1] == {"id": 5, "body": "five"}

        sink.discard_held()  # the session restarts from the acknowledged position
        assert not sink.parts.copies.copy_rewind_due()
        result = sink.apply(
            batch(
                update(DOCS, "1", "dropped before S", lsn=200),  # in the copy: skipped
                update(DOCS, "5", "after S", lsn=400),
            )
        )
        assert result.held_lsn is None
        assert _rows(lake, "docs") == [{"id": 1, "body": "copied"}, {"id": 5, "body": "after S"}]
    finally:
        sink.close()

    # A new sink (a restarted daemon) keeps skipping what the copy holds.
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        sink.apply(batch(update(DOCS, "1", "replayed before S", lsn=250)))
        assert _rows(lake, "docs")[0] == {"id": 1, "body": "copied"}
    finally:
        sink.close()


def test_a_copy_that_starts_waits_for_the_batch_being_applied(
    spark_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch in flight was screened before the copy started: its MERGE reads the table
    before the copy's commit. Were the copy to replace the table meanwhile, the MERGE's
    commit would conflict with it (Sail merges without retries: "Failed to commit
    transaction: 0", seen in the online-copy crash harness)."""
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        sink.apply(batch(insert(DOCS, "1", "old", lsn=100)))
        merging, release = threading.Event(), threading.Event()
        apply_tables = sink._write_tables

        def held_at_the_merge(*arguments: Any) -> Any:
            merging.set()
            assert release.wait(60)
            return apply_tables(*arguments)

        monkeypatch.setattr(sink, "_write_tables", held_at_the_merge)
        applying = threading.Thread(
            target=sink.apply, args=(batch(update(DOCS, "1", "in flight", lsn=200)),)
        )
        applying.start()
        assert merging.wait(60)
        starting = threading.Thread(
            target=sink.parts.copies.start_copies, args=(["public.docs"], "resync")
        )
        starting.start()
        starting.join(0.5)
        assert starting.is_alive(), "the copy starts only once the batch is applied"
        release.set()
        applying.join(60)
        starting.join(60)
        assert not applying.is_alive()
        assert not starting.is_alive()
        assert _rows(lake, "docs") == [{"id": 1, "body": "in flight"}]
        monkeypatch.undo()

        result = sink.apply(batch(update(DOCS, "1", "dropped", lsn=300)))
        assert result.held_lsn == 300, "changes after the start are dropped"
        _copy(sink, DOCS, 400, pa.table({"id": ["1"], "body": ["copied"]}))
        assert _rows(lake, "docs") == [{"id": 1, "body": "copied"}]
    finally:
        sink.close()


def test_a_resync_message_is_recorded_as_a_request_once(spark_session: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake))
    request = replace(
        message(resync_message(["public.docs"]), lsn=500, commit_lsn=500), prefix=RESYNC_PREFIX
    )
    try:
        sink.apply(batch(insert(DOCS, "1", "a", lsn=400), request))
        assert sink.parts.copies.copy_requests() == [("public.docs", "resync")]
        target = sink.parts.copies.begin_copy(
            DOCS, Lsn(600), datetime_to_pg_timestamp(commit_time(600))
        )
        sink.parts.copies.start_copies(["public.docs"], "resync")
        sink.parts.copies.append_bulk(target, pa.table({"id": ["1"], "body": ["a"]}), 1)
        sink.parts.copies.finish_copy(DOCS, target, Lsn(600), "resync")
        sink.discard_held()
        # The same message replayed after a crash: the copy made after it satisfies it.
        sink.apply(batch(request))
        assert sink.parts.copies.copy_requests() == []
    finally:
        sink.close()


def _copy(sink: DeltaSink, relation: Any, lsn: int, rows: pa.Table) -> str:
    """Copy ``relation`` at ``lsn`` holding ``rows``, through the sink; the staging path."""
    target = sink.parts.copies.begin_copy(
        relation, Lsn(lsn), datetime_to_pg_timestamp(commit_time(lsn))
    )
    sink.parts.copies.append_bulk(target, rows, 1)
    sink.parts.copies.finish_copy(relation, target, Lsn(lsn), "resync")
    sink.discard_held()
    return target.path


def test_a_new_table_appears_with_its_whole_copy_in_its_first_version(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        sink.parts.copies.start_copies(["public.docs"], "new table")
        staging = Path(_copy(sink, DOCS, 300, pa.table({"id": ["1", "2"], "body": ["a", "b"]})))
        table = DeltaTable(table_path(str(lake), "public", "docs"))
        assert table.version() == 0, "no version of the table holds less than the copy"
        assert _adopted_from(table_path(str(lake), "public", "docs"), staging)
        assert _rows(lake, "docs") == [{"id": 1, "body": "a"}, {"id": 2, "body": "b"}]
        sink.apply(batch(update(DOCS, "2", "streamed", lsn=400)))
        assert _rows(lake, "docs") == [{"id": 1, "body": "a"}, {"id": 2, "body": "streamed"}]
    finally:
        sink.close()


def test_what_an_interrupted_copy_left_is_removed_by_the_next_copy_but_live_files_stay(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        sink.apply(batch(insert(DOCS, "1", "old", lsn=100)))
        sink.parts.copies.start_copies(["public.docs"], "resync")
        # A copy that stopped right after its commit: its log is still there.
        adopted = Path(_copy(sink, DOCS, 300, pa.table({"id": ["1"], "body": ["copied"]})))
        # A copy that stopped before its commit: a staging table no live file names.
        sink.parts.copies.start_copies(["public.docs"], "resync")
        abandoned = sink.parts.copies.begin_copy(
            DOCS, Lsn(350), datetime_to_pg_timestamp(commit_time(350))
        )
        sink.parts.copies.append_bulk(
            abandoned, pa.table({"id": ["1"], "body": ["never landed"]}), 1
        )
        sink.parts.copies.abandon_copy("public.docs", "resync")
        (adopted / "_delta_log").mkdir()
        assert Path(abandoned.path).exists()

        sink.parts.copies.start_copies(["public.docs"], "resync")
        target = sink.parts.copies.begin_copy(
            DOCS, Lsn(400), datetime_to_pg_timestamp(commit_time(400))
        )
        assert not Path(abandoned.path).exists(), "the unfinished staging table is deleted"
        assert not (adopted / "_delta_log").exists(), "the adopted one loses its log only"
        assert _rows(lake, "docs") == [{"id": 1, "body": "copied"}], "live files stay"
        sink.parts.copies.append_bulk(target, pa.table({"id": ["1"], "body": ["again"]}), 1)
        sink.parts.copies.finish_copy(DOCS, target, Lsn(400), "resync")
        assert _rows(lake, "docs") == [{"id": 1, "body": "again"}]
    finally:
        sink.close()


def test_a_key_range_partitioned_table_adopts_its_partitioned_copy(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(
        spark_session, sink_settings(lake, partition_by_key={"public.docs": {"width": 10}})
    )
    try:
        sink.apply(batch(insert(DOCS, "1", "old", lsn=100)))
        sink.parts.copies.start_copies(["public.docs"], "resync")
        rows = pa.table({"id": ["1", "15", "27"], "body": ["a", "b", "c"]})
        staging = Path(_copy(sink, DOCS, 300, rows))
        path = table_path(str(lake), "public", "docs")
        assert _adopted_from(path, staging)
        assert len(read_table_files(path).live) == 3, "a file per key range, as copied"
        assert [r["body"] for r in _rows(lake, "docs")] == ["a", "b", "c"]
        sink.apply(batch(update(DOCS, "15", "streamed", lsn=400)))
        assert [r["body"] for r in _rows(lake, "docs")] == ["a", "streamed", "c"]
    finally:
        sink.close()


def test_a_table_with_a_column_the_copy_lacks_is_replaced_through_the_engine_and_keeps_it(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    wide = rel("public.docs", col("id", INT4, key=True), col("body"), col("gone"))
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        sink.apply(batch(insert(wide, "1", "old", "x", lsn=100)))
        sink.parts.copies.start_copies(["public.docs"], "resync")
        staging = Path(_copy(sink, DOCS, 300, pa.table({"id": ["1"], "body": ["copied"]})))
        assert _rows(lake, "docs") == [{"id": 1, "body": "copied", "gone": None}]
        assert not staging.exists(), "the engine rewrote the rows; the staging table is gone"
    finally:
        sink.close()


def test_a_table_with_deletion_vectors_is_replaced_in_one_commit(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake, deletion_vectors=["public.docs"]))
    try:
        sink.apply(batch(insert(DOCS, "1", "old", lsn=100), insert(DOCS, "2", "old", lsn=100)))
        path = table_path(str(lake), "public", "docs")
        before = DeltaTable(path).version()
        sink.parts.copies.start_copies(["public.docs"], "resync")
        _copy(sink, DOCS, 300, pa.table({"id": ["2", "3"], "body": ["b", "c"]}))
        assert DeltaTable(path).version() == before + 1
        assert _rows(lake, "docs") == [{"id": 2, "body": "b"}, {"id": 3, "body": "c"}]
        sink.apply(batch(update(DOCS, "3", "streamed", lsn=400)))
        assert _rows(lake, "docs") == [{"id": 2, "body": "b"}, {"id": 3, "body": "streamed"}]
        assert DeltaTable(path).protocol().min_reader_version == 3, "still a deletion-vector table"
    finally:
        sink.close()


def test_a_table_partitioned_otherwise_than_its_copy_is_not_adopted_and_keeps_its_rows(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        sink.apply(batch(insert(DOCS, "1", "old", lsn=100)))
    finally:
        sink.close()
    # sink.partition_by_key set after the table was created: the copy is partitioned, and
    # the table's files would lack the partition column's values.
    sink = DeltaSink(
        spark_session, sink_settings(lake, partition_by_key={"public.docs": {"width": 10}})
    )
    try:
        sink.parts.copies.start_copies(["public.docs"], "resync")
        target = sink.parts.copies.begin_copy(
            DOCS, Lsn(300), datetime_to_pg_timestamp(commit_time(300))
        )
        sink.parts.copies.append_bulk(target, pa.table({"id": ["1", "15"], "body": ["a", "b"]}), 1)
        with pytest.raises(SinkError, match="partition"):
            sink.parts.copies.finish_copy(DOCS, target, Lsn(300), "resync")
        assert _rows(lake, "docs") == [{"id": 1, "body": "old"}]
    finally:
        sink.close()
