"""The commit log records the server timeline of every batch, and the sink reads back the
newest one with the newest LSN written on it (``capture/timeline.py`` uses it to notice a
lake ahead of a promoted server). Real Sail session, records read back with delta-rs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sink import DeltaSink, WrittenTimeline, commits_path, read_commit_records
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, batch, col, insert, rel

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOCS = rel("public.docs", col("id", INT4, key=True), col("body"))


def test_every_batch_records_its_timeline_and_the_newest_one_is_read_back(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        assert sink.parts.timeline.written_timeline() is None, "a new lake has no record"
        sink.apply(replace(batch(insert(DOCS, "1", "a", lsn=100)), timeline=1))
        sink.apply(replace(batch(insert(DOCS, "2", "b", lsn=300)), timeline=1))
        assert sink.parts.timeline.written_timeline() == WrittenTimeline(1, 300)
        sink.apply(replace(batch(insert(DOCS, "3", "c", lsn=200)), timeline=2))
        assert sink.parts.timeline.written_timeline() == WrittenTimeline(2, 200), (
            "the newest timeline's own"
        )
        sink.apply(replace(batch(insert(DOCS, "4", "d", lsn=250)), timeline=None))
        assert sink.parts.timeline.written_timeline() == WrittenTimeline(2, 200), (
            "a batch without one"
        )

        sink.parts.timeline.accept_timeline(3)
        assert sink.parts.timeline.written_timeline() == WrittenTimeline(3, None), (
            "nothing on 3 yet"
        )
        sink.apply(replace(batch(insert(DOCS, "5", "e", lsn=260)), timeline=3))
        assert sink.parts.timeline.written_timeline() == WrittenTimeline(3, 260)
    finally:
        sink.close()
    records = read_commit_records(str(lake))
    intents = sorted(
        (r["batch"], r["high_lsn"], r["timeline"]) for r in records if r["table_name"] is None
    )
    assert intents == [
        (1, 100, 1),
        (2, 300, 1),
        (3, 200, 2),
        (4, 250, None),
        (5, None, 3),
        (6, 260, 3),
    ]
    tables = {(r["batch"], r["timeline"]) for r in records if r["table_name"] == "public.docs"}
    assert tables == {(1, 1), (2, 1), (3, 2), (4, None), (6, 3)}


def test_a_commit_log_written_before_timelines_gets_the_column_with_its_next_batch(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    old_columns = "batch BIGINT, lsn BIGINT, commit_time TIMESTAMP, table_name STRING, " + (
        "table_path STRING, version BIGINT, recorded_at TIMESTAMP, high_lsn BIGINT"
    )
    old = pa.table(
        {
            "batch": pa.array([7], pa.int64()),
            "lsn": pa.array([None], pa.int64()),
            "commit_time": pa.array([None], pa.timestamp("us", tz="UTC")),
            "table_name": pa.array([None], pa.string()),
            "table_path": pa.array([None], pa.string()),
            "version": pa.array([None], pa.int64()),
            "recorded_at": pa.array([None], pa.timestamp("us", tz="UTC")),
            "high_lsn": pa.array([50], pa.int64()),
        }
    )
    spark_session.createDataFrame(old, schema=old_columns).write.format("delta").save(
        commits_path(str(lake))
    )
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        assert sink.parts.timeline.written_timeline() == WrittenTimeline(None, 50), (
            "only positions recorded"
        )
        sink.apply(replace(batch(insert(DOCS, "1", "a", lsn=100)), timeline=4))
        assert sink.parts.timeline.written_timeline() == WrittenTimeline(4, 100)
    finally:
        sink.close()
    intents = sorted(
        (r["batch"], r["high_lsn"], r["timeline"])
        for r in read_commit_records(str(lake))
        if r["table_name"] is None
    )
    assert intents == [(7, 50, None), (8, 100, 4)]
