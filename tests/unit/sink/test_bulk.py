"""The bulk snapshot's vectorised casts read text forms exactly as the per-value converters.

Every Delta type ``sink.bulk`` casts with Arrow is checked against ``convert.column_converter``
(the MERGE path's reading of the same text), value by value, on PostgreSQL text forms that
include the edges: extremes, NaN and infinities, offsets, leap days, fractions. Values
Arrow's strict parsers refuse (BC dates, ``infinity``, offsets with seconds, ``NaN`` in a
DECIMAL) must give what the per-value path gives: the value, the value stored under its
convention (``sink.unrepresentable``, the same as the MERGE path's), or the same kind of
error.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from decoder import ColumnKind, Lsn, ValueDecoder
from sink.base import SinkDataError
from sink.copies.bulk import BulkTarget, bulk_arrays, bulk_table
from sink.engine.arrow import ArrowColumn
from sink.planning.partitioning import bucket_of, key_buckets
from sink.values.convert import column_converter
from sink.values.typemap import BIGINT, BOOLEAN, TIMESTAMP, PlanColumn, delta_type
from sink.values.unrepresentable import Reason, substitute
from tests.support.pg_text_forms import TEXT_FORM_CASES


def _column(type_oid: int, modifier: int) -> PlanColumn:
    return PlanColumn("c", type_oid, modifier, delta_type(type_oid, modifier))


def _target(columns: list[PlanColumn]) -> BulkTarget:
    decoder = ValueDecoder()
    return BulkTarget(
        table="public.t",
        path="/nowhere",
        columns=tuple(columns),
        converters=tuple(column_converter(c, ColumnKind.TEXT, decoder) for c in columns),
        frame=(
            *(ArrowColumn(c.name, c.delta.spark_sql, c.delta.arrow) for c in columns),
            ArrowColumn("_lsn", BIGINT.spark_sql, BIGINT.arrow),
            ArrowColumn("_ts", TIMESTAMP.spark_sql, TIMESTAMP.arrow),
            ArrowColumn("_deleted", BOOLEAN.spark_sql, BOOLEAN.arrow),
            ArrowColumn("_ordinal", BIGINT.spark_sql, BIGINT.arrow),
            ArrowColumn("_row_lsn", BIGINT.spark_sql, BIGINT.arrow),
            ArrowColumn("_row_ordinal", BIGINT.spark_sql, BIGINT.arrow),
        ),
        lsn=Lsn(77),
        commit_time=datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        lsn_column="_lsn",
        commit_time_column="_ts",
        ordinal="_ordinal",
        deleted="_deleted",
        row_ids=("_row_lsn", "_row_ordinal"),
    )


def _same(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and value == 0:
        return ("zero", math.copysign(1, value))
    return value


@pytest.mark.parametrize(("type_oid", "modifier", "texts"), TEXT_FORM_CASES)
def test_bulk_values_equal_the_per_value_converter(
    type_oid: int, modifier: int, texts: list[str | None]
) -> None:
    column = _column(type_oid, modifier)
    convert = column_converter(column, ColumnKind.TEXT, ValueDecoder())
    for text in texts:
        try:
            try:
                expected = None if text is None else convert(text.encode())
            except Exception:
                assert text is not None
                found = substitute(
                    column.delta, column.type_oid, ColumnKind.TEXT, text.encode(), ValueDecoder()
                )
                if found is None:
                    raise
                expected = found.value
            expected_array = pa.array([expected], column.delta.arrow).to_pylist()
        except Exception:  # the bulk path must fail for it too
            with pytest.raises(SinkDataError):
                bulk_arrays(_target([column]), pa.table({"f0": pa.array([text], pa.string())}))
            continue
        strings = pa.table({"f0": pa.array([text], pa.string())})
        (actual,), _ = bulk_arrays(_target([column]), strings)
        assert actual.type == column.delta.arrow
        assert [_same(v) for v in actual.to_pylist()] == [_same(v) for v in expected_array], text


def test_a_value_the_column_cannot_hold_is_stored_under_its_convention_and_rejected() -> None:
    column = _column(1082, -1)
    key = _column(20, -1)
    key = PlanColumn("id", key.type_oid, key.type_modifier, key.delta)
    target = _target([key, column])
    keyed = BulkTarget(**{**_fields(target), "key_indexes": (0,)})
    strings = pa.table(
        {
            "f0": pa.array(["1", "2", "3"], pa.string()),
            "f1": pa.array(["2024-01-01", "infinity", "0044-03-15 BC"], pa.string()),
        }
    )
    (ids, days), rejects = bulk_arrays(keyed, strings, 40)
    assert ids.to_pylist() == [1, 2, 3]
    assert [str(d) if d else None for d in days.to_pylist()] == ["2024-01-01", "9999-12-31", None]
    assert [(r.column, r.reason, r.original, r.stored, r.key, r.ordinal) for r in rejects] == [
        ("c", Reason.INFINITY, "infinity", "9999-12-31", (("id", "2"),), 41),
        ("c", Reason.OUT_OF_RANGE, "0044-03-15 BC", None, (("id", "3"),), 42),
    ]
    assert {r.lsn for r in rejects} == {target.lsn}


def test_a_value_the_column_cannot_hold_stops_the_copy_when_the_policy_is_stop() -> None:
    target = _target([_column(1082, -1)])
    stopping = BulkTarget(**{**_fields(target), "on_unrepresentable": "stop"})
    strings = pa.table({"f0": pa.array(["2024-01-01", "infinity"], pa.string())})
    with pytest.raises(SinkDataError, match=r"column 'c' of public\.t.*on_unrepresentable"):
        bulk_arrays(stopping, strings)


def _fields(target: BulkTarget) -> dict[str, object]:
    return {name: getattr(target, name) for name in BulkTarget.__dataclass_fields__}


def test_metadata_columns_are_what_an_insert_gets() -> None:
    target = _target([_column(20, -1)])
    table = bulk_table(target, pa.table({"f0": pa.array(["5", None, "7"])}), 41).table
    assert table.column_names == [c.name for c in target.frame]
    rows = table.to_pylist()
    assert [r["_ordinal"] for r in rows] == [41, 42, 43]
    assert [r["_row_ordinal"] for r in rows] == [41, 42, 43]
    assert {r["_lsn"] for r in rows} == {r["_row_lsn"] for r in rows} == {77}
    assert {r["_ts"] for r in rows} == {target.commit_time}
    assert {r["_deleted"] for r in rows} == {False}
    assert [r["c"] for r in rows] == [5, None, 7]


def test_key_buckets_floor_like_bucket_of() -> None:
    keys = [-101, -100, -1, 0, 1, 99, 100, None, 2**40]
    buckets = key_buckets(pa.array(keys, pa.int64()), 100).to_pylist()
    assert buckets == [None if k is None else bucket_of(k, 100) for k in keys]
