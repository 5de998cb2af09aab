"""The append path (``sink/steps/step_append.py``) on a real embedded Sail session, read back with
delta-rs: which steps are appended, which are merged, and that both end exact.

A step is appended only when none of its rows can be in the table (the module's theory);
each test asserts the path through the table's Delta history (``WRITE`` for an append,
``MERGE`` for a merge) and the rows against the rows the change stream leads to.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sink import SinkRetryableError, table_path
from sink.lake.sources import SourceFiles
from sink.lake.tables import LakeTables
from tests.support.oracle import assert_delta_matches, delta_rows
from tests.support.settings import SinkFactory
from tests.support.sink_changes import INT4, batch, col, delete, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ORDERS = rel("public.orders", col("id", INT4, key=True), col("item"), relation_id=16390)
NOTES = rel("public.notes", col("id", INT4, key=True), col("body"), relation_id=16391)
# No key flagged and REPLICA IDENTITY NOTHING: the key comes from sink.keys, which the
# source does not keep unique.
TAGS = rel("public.tags", col("id", INT4), col("label"), identity="n", relation_id=16392)


def path_of(lake: Path, table: str) -> str:
    return table_path(str(lake), "public", table)


def writes(lake: Path, table: str) -> Counter[str]:
    """The table's Delta commits by operation, the one that made it included (version 0,
    ``CREATE TABLE``): a table whose first step appends is made by that append, with its
    rows; any other is made empty, then written."""
    history = DeltaTable(path_of(lake, table)).history()
    return Counter(str(entry["operation"]) for entry in history)


def rows(*pairs: tuple[int, str | None]) -> list[dict[str, object]]:
    return [{"id": identifier, "item": item} for identifier, item in pairs]


def test_inserts_of_new_keys_are_appended_without_a_merge(
    make_sink: SinkFactory, lake: Path
) -> None:
    sink = make_sink()
    result = sink.apply(
        batch(*(insert(ORDERS, str(i), f"item {i}", lsn=10, ordinal=i) for i in range(5)))
    )
    assert result.table_writes == {"append": 1}
    # The first append made the table: one engine call and one commit, rows included.
    assert DeltaTable(path_of(lake, "orders"), version=0).to_pyarrow_table().num_rows == 5
    sink.apply(batch(insert(ORDERS, "5", "item 5", lsn=20), insert(ORDERS, "6", None, lsn=30)))
    assert writes(lake, "orders") == {"CREATE TABLE": 1, "WRITE": 1}
    expected = rows(*((i, f"item {i}") for i in range(6)), (6, None))
    assert_delta_matches(path_of(lake, "orders"), expected, key=["id"])
    stamps = {
        r["id"]: r["_wal2delta_lsn"]
        for r in delta_rows(path_of(lake, "orders"), include_metadata=True)
    }
    assert stamps == {0: 10, 1: 10, 2: 10, 3: 10, 4: 10, 5: 20, 6: 30}


def test_insert_then_update_and_insert_then_delete_in_one_batch_are_appended_as_they_end(
    make_sink: SinkFactory, lake: Path
) -> None:
    sink = make_sink()
    sink.apply(
        batch(
            insert(ORDERS, "1", "a", lsn=10),
            insert(ORDERS, "2", "b", lsn=10, ordinal=1),
            insert(ORDERS, "3", "c", lsn=10, ordinal=2),
            update(ORDERS, "1", "a2", lsn=20),
            delete(ORDERS, "2", None, lsn=20, ordinal=1),
            # A key inserted, deleted and inserted again within the batch is still new.
            delete(ORDERS, "3", None, lsn=30),
            insert(ORDERS, "3", "c3", lsn=30, ordinal=1),
        )
    )
    assert writes(lake, "orders") == {"CREATE TABLE": 1}
    assert_delta_matches(path_of(lake, "orders"), rows((1, "a2"), (3, "c3")), key=["id"])
    # Every row of a batch inserted and deleted again: nothing to write, no commit.
    result = sink.apply(batch(insert(ORDERS, "9", "x", lsn=40), delete(ORDERS, "9", None, lsn=50)))
    assert result.table_writes == {"none": 1}
    assert writes(lake, "orders") == {"CREATE TABLE": 1}
    assert_delta_matches(path_of(lake, "orders"), rows((1, "a2"), (3, "c3")), key=["id"])


def test_a_step_that_touches_a_key_it_did_not_insert_is_one_merge(
    make_sink: SinkFactory, lake: Path
) -> None:
    sink = make_sink()
    sink.apply(batch(insert(ORDERS, "1", "a", lsn=10), insert(ORDERS, "2", "b", lsn=10, ordinal=1)))
    # Delete-then-insert of a stored key: its first change in the batch is the delete.
    sink.apply(
        batch(
            delete(ORDERS, "1", None, lsn=20),
            insert(ORDERS, "1", "a again", lsn=30),
            insert(ORDERS, "3", "c", lsn=30, ordinal=1),
        )
    )
    # An update of a stored key beside new keys: one MERGE, not an append and a MERGE.
    sink.apply(
        batch(update(ORDERS, "2", "b2", lsn=40), insert(ORDERS, "4", "d", lsn=40, ordinal=1))
    )
    assert writes(lake, "orders") == {"CREATE TABLE": 1, "MERGE": 2}
    expected = rows((1, "a again"), (2, "b2"), (3, "c"), (4, "d"))
    assert_delta_matches(path_of(lake, "orders"), expected, key=["id"])


def test_a_batch_the_lake_may_hold_already_is_merged_after_a_restart(
    make_sink: SinkFactory, lake: Path
) -> None:
    first = batch(insert(ORDERS, "1", "a", lsn=10), insert(ORDERS, "2", "b", lsn=10, ordinal=1))
    make_sink().apply(first)
    # A new process finds the batch's intent in the commit log: the server sends the batch
    # again (it was never acknowledged), and the lake holds it already.
    restarted = make_sink()
    restarted.apply(first)
    restarted.apply(batch(insert(ORDERS, "3", "c", lsn=20)))
    assert writes(lake, "orders") == {"CREATE TABLE": 1, "MERGE": 1, "WRITE": 1}
    assert_delta_matches(path_of(lake, "orders"), rows((1, "a"), (2, "b"), (3, "c")), key=["id"])


def test_a_batch_sent_again_after_a_failed_attempt_is_merged(
    make_sink: SinkFactory, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = make_sink()
    sink.apply(batch(insert(NOTES, "1", "n", lsn=5)))
    failing = batch(insert(ORDERS, "1", "a", lsn=10), insert(NOTES, "2", "m", lsn=10, ordinal=1))
    append_rows = LakeTables.append_rows
    calls = 0

    def append_then_fail(self: LakeTables, path: str, *args: Any, **kwargs: Any) -> None:
        # The append commits, then the engine connection drops before the answer: the
        # batch is not durable as a whole, and the server sends it again.
        nonlocal calls
        calls += 1
        append_rows(self, path, *args, **kwargs)
        if path == path_of(lake, "orders"):
            raise SinkRetryableError("the engine went away after the commit")

    monkeypatch.setattr(LakeTables, "append_rows", append_then_fail)
    with pytest.raises(SinkRetryableError):
        sink.apply(failing)
    monkeypatch.setattr(LakeTables, "append_rows", append_rows)
    sink.apply(failing)
    assert calls == 2  # orders and notes were appended once each
    assert writes(lake, "orders") == {"CREATE TABLE": 1, "MERGE": 1}
    assert writes(lake, "notes") == {"CREATE TABLE": 1, "WRITE": 1, "MERGE": 1}
    assert_delta_matches(path_of(lake, "orders"), rows((1, "a")), key=["id"])
    notes = [{"id": 1, "body": "n"}, {"id": 2, "body": "m"}]
    assert_delta_matches(path_of(lake, "notes"), notes, key=["id"])


def test_a_configured_key_and_soft_deletes_always_merge(make_sink: SinkFactory, lake: Path) -> None:
    sink = make_sink(keys={"public.tags": ["id"]})
    sink.apply(batch(insert(TAGS, "1", "x", lsn=10), insert(TAGS, "2", "y", lsn=10, ordinal=1)))
    assert writes(lake, "tags") == {"CREATE TABLE": 1, "MERGE": 1}
    assert DeltaTable(path_of(lake, "tags"), version=0).to_pyarrow_table().num_rows == 0
    soft = make_sink(soft_delete=True)
    soft.apply(batch(insert(NOTES, "1", "n", lsn=20), insert(NOTES, "2", "m", lsn=20, ordinal=1)))
    soft.apply(batch(delete(NOTES, "1", None, lsn=30)))
    # The tombstone of key 1 is a row with that key: inserting it again must find it.
    soft.apply(batch(insert(NOTES, "1", "back", lsn=40)))
    assert writes(lake, "notes") == {"CREATE TABLE": 1, "MERGE": 3}
    live = [{"id": 1, "body": "back"}, {"id": 2, "body": "m"}]
    assert_delta_matches(path_of(lake, "notes"), live, key=["id"])


def test_a_table_partitioned_by_key_range_gets_its_buckets_in_the_append(
    make_sink: SinkFactory, lake: Path
) -> None:
    sink = make_sink(partition_by_key={"public.orders": {"width": 100}})
    sink.apply(batch(*(insert(ORDERS, str(i), "x", lsn=10, ordinal=i) for i in (1, 150, 420))))
    sink.apply(batch(update(ORDERS, "150", "y", lsn=20)))
    assert writes(lake, "orders") == {"CREATE TABLE": 1, "MERGE": 1}
    assert_delta_matches(
        path_of(lake, "orders"), rows((1, "x"), (150, "y"), (420, "x")), key=["id"]
    )
    table = DeltaTable(path_of(lake, "orders"))
    assert table.metadata().partition_columns == ["_wal2delta_key_bucket"]
    buckets = sorted(
        (r["id"], r["_wal2delta_key_bucket"])
        for r in table.to_pyarrow_table(columns=["id", "_wal2delta_key_bucket"]).to_pylist()
    )
    assert buckets == [(1, 0), (150, 1), (420, 4)]


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "key-range-partitioned"])
def test_small_appends_go_inline_and_large_ones_through_a_source_file(
    make_sink: SinkFactory, lake: Path, monkeypatch: pytest.MonkeyPatch, *, partitioned: bool
) -> None:
    written: list[int] = []
    paths: list[Path] = []
    write = SourceFiles.write

    def spy_write(files: SourceFiles, table: pa.Table) -> Path:
        written.append(table.num_rows)
        paths.append(write(files, table))
        return paths[-1]

    monkeypatch.setattr(SourceFiles, "write", spy_write)
    sink = make_sink(partition_by_key={"public.orders": {"width": 1000}} if partitioned else {})
    sink.apply(batch(*(insert(ORDERS, str(i), f"small {i}", lsn=10, ordinal=i) for i in range(5))))
    assert written == []  # inline: a few rows cost less in the request than in a file
    body = "b" * 120
    large = [insert(ORDERS, str(i), f"{body} {i}", lsn=20, ordinal=i) for i in range(5, 3005)]
    large.append(delete(ORDERS, "7", None, lsn=30))  # inserted and deleted: never written
    assert sink.apply(batch(*large)).table_writes == {"append": 1}
    assert written == [2999]  # 3,000 rows of 120 bytes: through a file, then removed
    assert len(paths) == 1
    assert not paths[0].exists()
    assert writes(lake, "orders") == {"CREATE TABLE": 1, "WRITE": 1}
    expected = rows(
        *((i, f"small {i}") for i in range(5)),
        *((i, f"{body} {i}") for i in range(5, 3005) if i != 7),
    )
    assert_delta_matches(path_of(lake, "orders"), expected, key=["id"])
