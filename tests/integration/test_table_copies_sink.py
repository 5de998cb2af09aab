"""A table copied while streaming, at the sink (``sink/copies.py``), on a real Sail session,
read back with delta-rs.

The order of events a copy goes through, with the stream's changes at each step: applied
before the copy starts; dropped (and holding the acknowledgement) from its start until the
stream is rewound; after the rewind, skipped before the copy's consistent point and
applied after it. The copy replaces the table in one commit.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from decoder import Lsn, datetime_to_pg_timestamp
from sink import DeltaSink, table_path
from sink.copies import RESYNC_PREFIX, resync_message
from tests.support.oracle import delta_rows
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, batch, col, commit_time, insert, message, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOCS = rel("public.docs", col("id", INT4, key=True), col("body"))
OTHER = rel("public.other", col("id", INT4, key=True), col("body"))


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

        sink.start_copies(["public.docs"], "resync")
        result = sink.apply(
            batch(update(DOCS, "1", "dropped before S", lsn=200), insert(OTHER, "2", "b", lsn=200))
        )
        assert result.held_lsn == 200, "the first dropped change holds the acknowledgement"
        assert _rows(lake, "docs") == [{"id": 1, "body": "old"}]
        assert _rows(lake, "other") == [{"id": 1, "body": "a"}, {"id": 2, "body": "b"}]

        point = Lsn(300)  # the temporary slot's consistent point
        target = sink.begin_copy(DOCS, point, datetime_to_pg_timestamp(commit_time(300)))
        copied = pa.table({"id": ["1", "5"], "body": ["copied", "five"]})
        assert sink.append_bulk(target, copied, 1) == 2
        assert DeltaTable(path).version() == before, "the table is untouched while copying"
        sink.finish_copy(DOCS, target, point, "resync")
        assert DeltaTable(path).version() == before + 1, "one commit replaces the table"
        assert _rows(lake, "docs") == [{"id": 1, "body": "copied"}, {"id": 5, "body": "five"}]
        assert sink.copy_rewind_due()

        # Until the stream is rewound, changes stay dropped (commit order per table).
        result = sink.apply(batch(update(DOCS, "5", "after S, early", lsn=400)))
        assert result.held_lsn == 200
        assert _rows(lake, "docs")[1] == {"id": 5, "body": "five"}

        sink.discard_held()  # the session restarts from the acknowledged position
        assert not sink.copy_rewind_due()
        result = sink.apply(
            batch(
                update(DOCS, "1", "dropped before S", lsn=200),  # in the copy: skipped
                update(DOCS, "5", "after S", lsn=400),
            )
        )
        assert result.held_lsn is None
        assert _rows(lake, "docs") == [{"id": 1, "body": "copied"}, {"id": 5, "body": "after S"}]
        assert not Path(target.path).exists(), "the staging table is removed"
    finally:
        sink.close()

    # A new sink (a restarted daemon) keeps skipping what the copy holds.
    sink = DeltaSink(spark_session, sink_settings(lake))
    try:
        sink.apply(batch(update(DOCS, "1", "replayed before S", lsn=250)))
        assert _rows(lake, "docs")[0] == {"id": 1, "body": "copied"}
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
        assert sink.copy_requests() == [("public.docs", "resync")]
        target = sink.begin_copy(DOCS, Lsn(600), datetime_to_pg_timestamp(commit_time(600)))
        sink.start_copies(["public.docs"], "resync")
        sink.append_bulk(target, pa.table({"id": ["1"], "body": ["a"]}), 1)
        sink.finish_copy(DOCS, target, Lsn(600), "resync")
        sink.discard_held()
        # The same message replayed after a crash: the copy made after it satisfies it.
        sink.apply(batch(request))
        assert sink.copy_requests() == []
    finally:
        sink.close()
