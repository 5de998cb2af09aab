"""The rejects table of ``DeltaSink`` on embedded Sail, read back with delta-rs.

Every value stored under a convention has exactly one reject, whatever replays the sink
sees (the same batches again, or cut differently after a crash), with the row's key, the
change's position and the value's exact text; tables without a key name the row by its
position. ``on_unrepresentable: stop`` refuses the batch before anything is written.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sink import Batch, DeltaSink, SinkDataError, rejects_path, table_path
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, batch, col, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NUMERIC_10_2 = ((10 << 16) | 2) + 4
SPANS = rel(
    "public.spans",
    col("id", INT4, key=True),
    col("valid_to", 1114),
    col("n", 1700, typmod=NUMERIC_10_2),
)
EVENTS = rel("public.events", col("kind"), col("at", 1082), identity="f", relation_id=16390)


def _changes() -> list[Batch]:
    return [
        batch(
            insert(SPANS, "1", "infinity", "1.5", lsn=100),
            insert(SPANS, "2", "2024-01-01 00:00:00", "NaN", lsn=101),
            insert(EVENTS, "a", "0044-03-15 BC", lsn=102),
        ),
        batch(
            update(SPANS, "1", "2024-06-01 00:00:00", "1.5", lsn=200),
            update(SPANS, "2", "-infinity", "NaN", lsn=201),
            insert(EVENTS, "b", "infinity", lsn=202, ordinal=1),
        ),
    ]


def _rejects(lake: Path) -> list[tuple[object, ...]]:
    rows = DeltaTable(rejects_path(str(lake))).to_pyarrow_table().to_pylist()
    return sorted(
        (
            r["table_name"],
            r["column_name"],
            r["reason"],
            r["original"],
            r["stored"],
            None if r["key"] is None else json.loads(r["key"]),
            r["_wal2delta_lsn"],
            r["_wal2delta_ordinal"],
        )
        for r in rows
    )


EXPECTED = [
    ("public.events", "at", "infinity", "infinity", "9999-12-31", None, 202, 1),
    ("public.events", "at", "out_of_range", "0044-03-15 BC", None, None, 102, 0),
    ("public.spans", "n", "not_finite", "NaN", None, {"id": "2"}, 101, 0),
    ("public.spans", "n", "not_finite", "NaN", None, {"id": "2"}, 201, 0),
    (
        "public.spans",
        "valid_to",
        "infinity",
        "-infinity",
        "0001-01-01 00:00:00",
        {"id": "2"},
        201,
        0,
    ),
    (
        "public.spans",
        "valid_to",
        "infinity",
        "infinity",
        "9999-12-31 23:59:59.999999",
        {"id": "1"},
        100,
        0,
    ),
]


def test_every_reject_is_written_once_across_replays(tmp_path: Path, spark_session: object) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(lake)
    first, second = _changes()
    sink = DeltaSink(spark_session, settings)  # type: ignore[arg-type]
    result = sink.apply(first)
    assert result.unrepresentable == {
        ("public.spans", "valid_to", "infinity"): 1,
        ("public.spans", "n", "not_finite"): 1,
        ("public.events", "at", "out_of_range"): 1,
    }
    sink.apply(second)
    sink.close()
    assert _rejects(lake) == EXPECTED
    # A new process replays both batches, then the second one cut into two.
    replayed = DeltaSink(spark_session, settings)  # type: ignore[arg-type]
    replayed.apply(first)
    replayed.apply(batch(*second.changes[:1]))
    replayed.apply(batch(*second.changes[1:]))
    replayed.close()
    assert _rejects(lake) == EXPECTED
    rows = DeltaTable(table_path(str(lake), "public", "spans")).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], str(r["valid_to"]), r["n"]) for r in rows) == [
        (1, "2024-06-01 00:00:00", Decimal("1.50")),
        (2, "0001-01-01 00:00:00", None),
    ]


def test_stop_refuses_the_batch_before_writing(tmp_path: Path, spark_session: object) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(lake, on_unrepresentable={"public.events": "stop"})
    sink = DeltaSink(spark_session, settings)  # type: ignore[arg-type]
    first, _ = _changes()
    with pytest.raises(SinkDataError, match=r"column 'at' of public\.events.*outside years"):
        sink.apply(first)
    sink.close()
    assert not Path(table_path(str(lake), "public", "spans")).exists()
    assert not Path(rejects_path(str(lake))).exists()


def test_rejects_of_several_tables_in_one_batch_are_not_written_twice(
    tmp_path: Path, spark_session: object
) -> None:
    # The plan lists tables in order of first appearance: events' rejects (100, 102) before
    # spans' (101). The floor must be the newest of all, or a replay writes 102 again.
    lake = tmp_path / "lake"
    settings = sink_settings(lake)
    interleaved = batch(
        insert(EVENTS, "a", "infinity", lsn=100),
        insert(SPANS, "1", "infinity", "1.5", lsn=101),
        insert(EVENTS, "b", "-infinity", lsn=102),
    )
    for _ in range(2):  # a new process replays the batch
        sink = DeltaSink(spark_session, settings)  # type: ignore[arg-type]
        sink.apply(interleaved)
        sink.close()
    positions = [(r[0], r[6]) for r in _rejects(lake)]
    assert sorted(positions) == [
        ("public.events", 100),
        ("public.events", 102),
        ("public.spans", 101),
    ]
