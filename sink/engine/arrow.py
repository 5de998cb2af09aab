"""The Arrow tables ``DeltaSink`` ships to Spark: MERGE sources built from planned steps.

Every column is one ``pa.array`` call over its values, with an explicit type; values that
do not fit their type become a ``SinkDataError`` naming the table and column. Commit times
are handed to Arrow as microseconds since the epoch (``commit_time_array``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

import pyarrow as pa

from decoder import cause_line
from sink.base import SinkDataError
from sink.engine.sql import (
    DELETE_FLAG,
    KEYLESS_INSERT,
    KEYLESS_KIND,
    KEYLESS_REMOVE,
    KEYLESS_REWRITE,
    MOVED_FLAG,
    MOVED_LSN,
    MOVED_ORDINAL,
    MetadataColumns,
    keep_flag,
    keyless_source_columns,
    moved_from_column,
    quote,
    source_columns,
    touch_columns,
)
from sink.planning.keyless import Candidate, FoldedStep
from sink.planning.plan import MergeStep
from sink.values.typemap import BIGINT, BOOLEAN, INT, TIMESTAMP, DeltaType, PlanColumn


@dataclass(frozen=True, slots=True)
class ArrowColumn:
    """A column of a DataFrame shipped to Spark: name, Spark SQL type, Arrow type."""

    name: str
    spark_sql: str
    arrow: pa.DataType


def typed_columns(names: Sequence[str], types: Sequence[DeltaType]) -> list[ArrowColumn]:
    """Columns named ``names`` of the Delta types ``types``, pairwise."""
    return [ArrowColumn(n, t.spark_sql, t.arrow) for n, t in zip(names, types, strict=True)]


def ddl(columns: Sequence[ArrowColumn]) -> str:
    """The columns as a Spark SQL schema (``name TYPE, ...``)."""
    return ", ".join(f"{quote(c.name)} {c.spark_sql}" for c in columns)


def plan_column(column: PlanColumn) -> ArrowColumn:
    """A planned column as shipped to Spark."""
    return ArrowColumn(column.name, column.delta.spark_sql, column.delta.arrow)


_UNIX_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


_ArrayBuilder = Callable[[Sequence[object], pa.DataType], pa.Array]


def _array(values: Sequence[object], arrow: pa.DataType) -> pa.Array:
    return pa.array(values, type=arrow)


def commit_time_array(values: Sequence[object], arrow: pa.DataType) -> pa.Array:
    """``pa.array(values, type=arrow)`` for a ``TIMESTAMP`` column, the values as integers."""
    try:
        micros = _utc_microseconds(values)
    except TypeError:
        # Not aware datetimes after all: Arrow reads (or rejects) them itself.
        return pa.array(values, type=arrow)
    return pa.array(micros, type=arrow)


def _utc_microseconds(values: Sequence[object]) -> list[int | None]:
    """Microseconds since the Unix epoch of aware datetimes (None stays None).

    Consecutive rows often share one datetime object (the commit time of a transaction),
    so a repeated object is converted once.

    Raises:
        TypeError: a value is not an aware datetime.
    """
    out: list[int | None] = []
    append = out.append
    last: object = None
    last_micros: int | None = None
    for value in values:
        if value is not last:
            if not isinstance(value, datetime):
                if value is not None:
                    raise TypeError(type(value).__name__)
                last_micros = None
            else:
                # Subtracting an aware epoch raises TypeError for a naive datetime.
                last_micros = (value - _UNIX_EPOCH) // _MICROSECOND
            last = value
        append(last_micros)
    return out


def source_table(
    table: str, step: MergeStep, meta: MetadataColumns
) -> tuple[list[ArrowColumn], pa.Table]:
    """Build the MERGE source of ``step`` as Arrow, in ``source_columns`` order.

    Every column is one ``pa.array`` call over its values. The commit times are handed to
    Arrow as microseconds since the epoch, which is what Arrow stores for them: each
    transaction's rows share one datetime object, converted once, where Arrow would read
    every row's datetime again.

    Raises:
        SinkDataError: a column's values do not fit its Arrow type (a DECIMAL value with
            more digits than the column's precision).
    """
    rows = step.rows
    columnar = step.columnar
    # Columnar rows (``MergeStep.columnar``) follow ``rows``: nothing kept or moved.
    extra = 0 if columnar is None else len(columnar)
    columns: list[ArrowColumn] = []
    arrays: list[pa.Array] = []

    def add(
        column: ArrowColumn,
        values: Sequence[object],
        build: _ArrayBuilder = _array,
        columnar_values: pa.Array | None = None,
    ) -> None:
        try:
            if columnar_values is None:
                arrays.append(build(values, column.arrow))
            elif values:
                arrays.append(pa.concat_arrays([build(values, column.arrow), columnar_values]))
            else:
                arrays.append(columnar_values)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise SinkDataError(
                f"cannot build {column.spark_sql} values for column {column.name!r} of "
                f"{table}: {cause_line(exc)}"
            ) from exc
        columns.append(column)

    # One pass turns the rows into columns; strict: every row has every column.
    by_column: list[tuple[object, ...]] = (
        list(zip(*[r.values for r in rows], strict=True)) if rows else [()] * len(step.columns)
    )
    for index, (column, values) in enumerate(zip(step.columns, by_column, strict=True)):
        delta = column.delta
        add(
            ArrowColumn(column.name, delta.spark_sql, delta.arrow),
            values,
            columnar_values=None if columnar is None else columnar.values[index],
        )
    unset: list[object] = [False] * extra
    add(
        ArrowColumn(meta.lsn, BIGINT.spark_sql, BIGINT.arrow),
        [r.lsn for r in rows],
        columnar_values=None if columnar is None else columnar.lsns,
    )
    add(
        ArrowColumn(meta.commit_time, TIMESTAMP.spark_sql, TIMESTAMP.arrow),
        [r.commit_time for r in rows],
        commit_time_array,
        None if columnar is None else columnar.commit_times,
    )
    add(
        ArrowColumn(meta.ordinal, BIGINT.spark_sql, BIGINT.arrow),
        [r.ordinal for r in rows],
        columnar_values=None if columnar is None else columnar.ordinals,
    )
    add(
        ArrowColumn(DELETE_FLAG, BOOLEAN.spark_sql, BOOLEAN.arrow),
        [r.delete for r in rows],
        columnar_values=None if columnar is None else columnar.deletes,
    )
    for index in step.kept_indexes:
        add(
            ArrowColumn(keep_flag(index), BOOLEAN.spark_sql, BOOLEAN.arrow),
            [index in r.keep for r in rows] + unset,
        )
    if step.has_moved_keeps:
        none: list[object] = [None] * extra
        add(
            ArrowColumn(MOVED_FLAG, BOOLEAN.spark_sql, BOOLEAN.arrow),
            [r.moved_from is not None for r in rows] + unset,
        )
        add(
            ArrowColumn(MOVED_LSN, BIGINT.spark_sql, BIGINT.arrow),
            [None if r.moved_from is None else r.moved_from.lsn for r in rows] + none,
        )
        add(
            ArrowColumn(MOVED_ORDINAL, BIGINT.spark_sql, BIGINT.arrow),
            [None if r.moved_from is None else r.moved_from.ordinal for r in rows] + none,
        )
        for position, column in enumerate(step.match_columns):
            delta = column.delta
            add(
                ArrowColumn(moved_from_column(position), delta.spark_sql, delta.arrow),
                [None if r.moved_from is None else r.moved_from.identity[position] for r in rows]
                + none,
            )
    names = [c.name for c in columns]
    assert tuple(names) == source_columns(step, meta), "source view out of step with sql.py"
    return columns, pa.Table.from_arrays(arrays, names=names)


def arrow_table(
    table: str, columns: Sequence[ArrowColumn], arrays: Sequence[Sequence[object]]
) -> pa.Table:
    """One Arrow table from per-column values, with the error ``source_table`` raises."""
    built = []
    for column, values in zip(columns, arrays, strict=True):
        build = commit_time_array if column.arrow == TIMESTAMP.arrow else _array
        try:
            built.append(build(values, column.arrow))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise SinkDataError(
                f"cannot build {column.spark_sql} values for column {column.name!r} of "
                f"{table}: {cause_line(exc)}"
            ) from exc
    return pa.Table.from_arrays(built, names=[c.name for c in columns])


def keyless_source_table(
    table: str, step: FoldedStep, assigned: Sequence[Candidate | None], meta: MetadataColumns
) -> tuple[list[ArrowColumn], pa.Table]:
    """The source of a keyless MERGE (``sql.keyless_source_columns``): new rows, then takes.

    Takes that found no row (``assigned`` None) are left out.
    """
    rows: list[tuple[object, ...]] = []
    width = len(step.columns)
    for new in step.new_rows:
        rows.append(
            (
                *new.values,
                new.row_lsn,
                new.row_ordinal,
                new.lsn,
                new.commit_time,
                new.ordinal,
                KEYLESS_INSERT,
            )
        )
    for take, row in zip(step.takes, assigned, strict=True):
        if row is None:
            continue
        kind = KEYLESS_REMOVE if take.new is None else KEYLESS_REWRITE
        values = take.new if take.new is not None else (None,) * width
        rows.append(
            (
                *values,
                row.row_lsn,
                row.row_ordinal,
                take.new_lsn,
                take.commit_time,
                take.new_ordinal,
                kind,
            )
        )
    columns = [plan_column(c) for c in step.columns] + [
        ArrowColumn(meta.row_lsn, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(meta.row_ordinal, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(meta.lsn, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(meta.commit_time, TIMESTAMP.spark_sql, TIMESTAMP.arrow),
        ArrowColumn(meta.ordinal, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(KEYLESS_KIND, INT.spark_sql, INT.arrow),
    ]
    assert tuple(c.name for c in columns) == keyless_source_columns(meta, step)
    by_column = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
    return columns, arrow_table(table, columns, by_column)


def keyless_touch_table(
    table: str, step: FoldedStep, meta: MetadataColumns
) -> tuple[list[ArrowColumn], pa.Table]:
    """The touched values of a keyless step with their stamps (``sql.touch_columns``)."""
    columns = [plan_column(c) for c in step.columns] + [
        ArrowColumn(meta.lsn, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(meta.commit_time, TIMESTAMP.spark_sql, TIMESTAMP.arrow),
        ArrowColumn(meta.ordinal, BIGINT.spark_sql, BIGINT.arrow),
    ]
    assert tuple(c.name for c in columns) == touch_columns(meta, step)
    rows = [(*t.values, t.lsn, t.commit_time, t.ordinal) for t in step.touches]
    by_column = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
    return columns, arrow_table(table, columns, by_column)


def metadata_columns(meta: MetadataColumns, *, row_ids: bool = False) -> list[ArrowColumn]:
    """The metadata columns of a data table: stamp (LSN, commit time, ordinal), soft-delete
    flag, row ids."""
    columns = [
        ArrowColumn(meta.lsn, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(meta.commit_time, TIMESTAMP.spark_sql, TIMESTAMP.arrow),
    ]
    if meta.soft_delete:
        columns.append(ArrowColumn(meta.deleted, BOOLEAN.spark_sql, BOOLEAN.arrow))
    columns.append(ArrowColumn(meta.ordinal, BIGINT.spark_sql, BIGINT.arrow))
    if row_ids:
        columns.append(ArrowColumn(meta.row_lsn, BIGINT.spark_sql, BIGINT.arrow))
        columns.append(ArrowColumn(meta.row_ordinal, BIGINT.spark_sql, BIGINT.arrow))
    return columns
