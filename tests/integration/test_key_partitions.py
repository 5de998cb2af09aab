"""Key-range partitioned Delta tables (``sink.partition_by_key``) on a real Sail session.

Every table is read back with delta-rs: its partition column, each row's bucket, and the
rows themselves, which must be what the same changes give in an unpartitioned table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from sink import DeltaSink, SinkDataError, table_path
from tests.support.oracle import assert_delta_matches, delta_rows
from tests.support.settings import SinkFactory, sink_settings
from tests.support.sink_changes import (
    INT4,
    INT8,
    TEXT,
    U,
    batch,
    col,
    delete,
    insert,
    rel,
    truncate,
    update,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BUCKET = "_wal2delta_key_bucket"
DOCS = rel("public.docs", col("id", INT8, key=True), col("body"), col("rev", INT4))
WIDER = rel(
    "public.docs", col("id", INT8, key=True), col("body"), col("rev", INT4), col("tag", TEXT)
)
TENANTS = rel(
    "public.tenants", col("tenant", INT4, key=True), col("id", INT8, key=True), col("body")
)
NAMED = rel("public.named", col("name", TEXT, key=True), col("body"))

#: One table's ``sink.partition_by_key`` entry, as in YAML: ``{width: 10, column: tenant}``.
Buckets = dict[str, Any]


@pytest.fixture
def make_sink(spark_session: Any, lake: Path) -> SinkFactory:
    def make(buckets: dict[str, Buckets] | None = None, **settings: Any) -> DeltaSink:
        """A sink whose ``sink.partition_by_key`` is ``buckets``."""
        return DeltaSink(
            spark_session, sink_settings(lake, partition_by_key=buckets or {}, **settings)
        )

    return make


def path_of(lake: Path, table: str = "docs") -> str:
    return table_path(str(lake), "public", table)


def stored_buckets(path: str, key: str = "id") -> dict[object, object]:
    """Key -> stored bucket of every row (soft-deleted ones included)."""
    rows = delta_rows(path, include_metadata=True, live_only=False)
    return {row[key]: row[BUCKET] for row in rows}


CHANGES = [
    batch(*(insert(DOCS, str(i), "x" * 3000, "1", lsn=10, ordinal=i) for i in range(-3, 40))),
    batch(
        update(DOCS, "5", "five", "2", lsn=20),
        # key changes across buckets, one keeping its unchanged TOAST body
        update(DOCS, "105", U, "2", old=["7", None, None], lsn=20, ordinal=1),
        update(DOCS, "-12", "moved", "2", old=["8", None, None], lsn=20, ordinal=2),
        delete(DOCS, "9", None, None, lsn=20, ordinal=3),
        delete(DOCS, "-3", None, None, lsn=20, ordinal=4),
        insert(DOCS, "1000", "far", "1", lsn=30),
    ),
    batch(update(DOCS, "105", U, "3", lsn=40), update(DOCS, "1000", "far v2", "2", lsn=40)),
]


def test_a_key_partitioned_table_holds_exactly_what_an_unpartitioned_one_holds(
    make_sink: SinkFactory, lake: Path, tmp_path: Path, spark_session: Any
) -> None:
    partitioned = make_sink({"public.docs": {"width": 10}})
    plain = DeltaSink(spark_session, sink_settings(tmp_path / "plain"))
    for changes in CHANGES:
        partitioned.apply(changes)
        plain.apply(changes)
    # A restarted sink replays the last two batches: nothing changes.
    replayed = make_sink({"public.docs": {"width": 10}})
    for changes in CHANGES[1:]:
        replayed.apply(changes)

    path = path_of(lake)
    expected = delta_rows(table_path(str(tmp_path / "plain"), "public", "docs"))
    assert len(expected) == 42
    assert {r["id"]: r["body"] for r in expected}[105] == "x" * 3000
    assert_delta_matches(path, expected, key=["id"])
    assert len(delta_rows(path)) == len(expected), "a row is duplicated across partitions"
    assert DeltaTable(path).metadata().partition_columns == [BUCKET]
    buckets = stored_buckets(path)
    assert buckets == {key: key // 10 for key in buckets}  # type: ignore[operator]
    assert buckets[-12] == -2
    assert buckets[1000] == 100


def test_truncate_soft_delete_and_an_added_column_keep_rows_in_their_partitions(
    make_sink: SinkFactory, lake: Path
) -> None:
    sink = make_sink({"public.docs": {"width": 100}}, soft_delete=True)
    sink.apply(batch(*(insert(DOCS, str(i), f"b{i}", "1", lsn=10, ordinal=i) for i in range(300))))
    sink.apply(
        batch(
            delete(DOCS, "150", None, None, lsn=20),
            delete(DOCS, "9999", None, None, lsn=20, ordinal=1),
            insert(WIDER, "301", "new", "1", "red", lsn=30),
            update(WIDER, "3", "b3", "2", "blue", lsn=30, ordinal=1),
        )
    )
    path = path_of(lake)
    assert DeltaTable(path).metadata().partition_columns == [BUCKET]
    live = {r["id"]: r for r in delta_rows(path)}
    assert len(live) == 300
    assert 150 not in live
    assert [live[301]["tag"], live[3]["tag"], live[4]["tag"]] == ["red", "blue", None]
    # The tombstone of a row Delta never held lands in its own bucket too.
    buckets = stored_buckets(path)
    assert [buckets[9999], buckets[150], buckets[301]] == [99, 1, 3]
    sink.apply(batch(truncate(WIDER, lsn=40), insert(WIDER, "7", "after", "1", None, lsn=40)))
    assert_delta_matches(path, [{"id": 7, "body": "after", "rev": 1, "tag": None}], key=["id"])
    assert stored_buckets(path)[7] == 0


def test_a_composite_key_is_bucketed_by_the_configured_column(
    make_sink: SinkFactory, lake: Path
) -> None:
    sink = make_sink({"public.tenants": {"width": 1, "column": "tenant"}})
    sink.apply(
        batch(
            *(
                insert(TENANTS, str(t), str(i), f"{t}-{i}", lsn=10, ordinal=t * 10 + i)
                for t in range(3)
                for i in range(5)
            )
        )
    )
    sink.apply(
        batch(
            update(TENANTS, "2", "40", "moved", old=["1", "4", None], lsn=20),
            delete(TENANTS, "0", "0", None, lsn=20, ordinal=1),
        )
    )
    path = path_of(lake, "tenants")
    rows = delta_rows(path, include_metadata=True)
    assert len(rows) == 14
    assert all(r[BUCKET] == r["tenant"] for r in rows)
    assert {(r["tenant"], r["id"]): r["body"] for r in rows}[(2, 40)] == "moved"


@pytest.mark.parametrize(
    ("relation", "spec", "message"),
    [
        (TENANTS, {"width": 10}, "name the one to partition by"),
        (TENANTS, {"width": 10, "column": "body"}, "which is not a key column"),
        (NAMED, {"width": 10}, "need an integer column"),
    ],
)
def test_a_key_that_cannot_be_bucketed_is_a_data_error_before_anything_is_merged(
    make_sink: SinkFactory, lake: Path, relation: Any, spec: Buckets, message: str
) -> None:
    name = relation.qualified_name
    sink = make_sink({name: spec})
    values = ["1", "1", "b"] if relation is TENANTS else ["k", "b"]
    with pytest.raises(SinkDataError, match=message):
        sink.apply(batch(insert(relation, *values, lsn=10)))
    # Nothing written: the table was to be made by that first append (decision 0130).
    assert not DeltaTable.is_deltatable(path_of(lake, relation.relation_name))


def test_the_configured_layout_must_match_the_existing_table(
    make_sink: SinkFactory, lake: Path, spark_session: Any
) -> None:
    make_sink().apply(batch(insert(DOCS, "1", "one", "1", lsn=10)))
    mismatched = make_sink({"public.docs": {"width": 10}})
    for _ in range(2):  # a replayed batch meets the same check, not a cached table
        with pytest.raises(SinkDataError, match="exists without the partition column"):
            mismatched.apply(batch(insert(DOCS, "2", "two", "1", lsn=20)))

    other = str(lake / "other")

    def sink(**buckets: Buckets) -> DeltaSink:
        keyed = {f"public.{name}": spec for name, spec in buckets.items()}
        return DeltaSink(spark_session, sink_settings(other, partition_by_key=keyed))

    sink(docs={"width": 10}).apply(batch(insert(DOCS, "15", "one", "1", lsn=10)))
    with pytest.raises(SinkDataError, match="does not list it"):
        sink().apply(batch(insert(DOCS, "16", "two", "1", lsn=20)))
    with pytest.raises(SinkDataError, match="another width"):
        sink(docs={"width": 7}).apply(batch(insert(DOCS, "16", "two", "1", lsn=20)))
    assert_delta_matches(
        table_path(other, "public", "docs"), [{"id": 15, "body": "one", "rev": 1}], key=["id"]
    )
