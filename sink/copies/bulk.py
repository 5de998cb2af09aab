"""Bulk appends for the initial snapshot: copied rows as Arrow, no MERGE, no per-row objects.

Theory of operation
-------------------
At the snapshot's consistent point a table is empty or truncated (its TRUNCATE deletes
every row at or below that LSN), so its copied rows can be *appended*: what a MERGE of the
same rows as inserts would write, row for row. ``BulkLoader.begin_bulk`` prepares the table
exactly as the MERGE path's first batch would (create it from the relation, TRUNCATE,
follow the relation: metadata columns, hidden row identity, column origins) and hands out
a ``BulkTarget``; ``BulkLoader.append_bulk`` then writes batches of copied rows with it.

Copied rows arrive as Arrow string columns holding PostgreSQL's text form (the COPY's
output, NULL kept apart from the empty string), except columns a reader already decoded
exactly (``capture.adbcreader``: integers, bool, float8, text, bytea), which are only cast
to the column's Arrow type. ``bulk_arrays`` turns each column into its
Delta type with the vectorised Arrow casts of ``textcast``, which read PostgreSQL's text
form exactly as the per-value converter (``convert.column_converter``) does. Arrow's
parsers are strict: a value they do not read (a BC date, ``infinity``, ``NaN`` in a
DECIMAL, an offset with seconds) makes that column of that batch go through the per-value
converter, which stores the same value or raises the same error as the MERGE path; a legal
value the column cannot hold is stored under the MERGE path's convention and returned as a
``Reject`` (``unrepresentable.py``; the sink merges them into the rejects table). Types
without an exact cast (bytea, arrays) always take the per-value path - still one Arrow
array per column, no change objects.

Metadata columns are what the MERGE path writes for an insert: the consistent point as
LSN, the snapshot's commit time, the insert's ordinal (1, 2, ... in copy order; a copy
split into ranges starts each range at its own base so ordinals stay unique per table),
``false`` for the soft-delete flag, and for tables without any key the hidden row identity
(the insert's LSN and ordinal, as ``keyless.py`` stamps an inserted row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import numpy as np
import pyarrow as pa

from decoder import ColumnKind, Lsn, UnknownBinaryFormatError, ValueDecoder, cause_line
from sink.base import SinkDataError
from sink.constants import UnrepresentablePolicy
from sink.engine.arrow import ArrowColumn
from sink.planning.partitioning import key_buckets
from sink.planning.plan import Reject
from sink.values.convert import Converter, optional_text
from sink.values.textcast import read_exactly
from sink.values.typemap import TIMESTAMP, PlanColumn
from sink.values.unrepresentable import Reason, UnrepresentableValueError, original_text, substitute

RANGE_ORDINAL_STRIDE: Final = 1 << 40
"""Ordinal distance between the ranges of one table's copy (2^40 rows per range)."""


@dataclass(frozen=True, slots=True)
class BulkTarget:
    """A table prepared for bulk appends (``BulkLoader.begin_bulk``).

    Attributes:
        table: ``schema.table`` of the source.
        path: the Delta table's location.
        columns: the relation's columns as Delta sees them, in COPY order.
        converters: per column, the per-value converter of its text form.
        frame: every column an append writes, data then metadata, with its types.
        lsn: the consistent point, the copied rows' commit LSN.
        commit_time: the snapshot's commit time.
        deleted: the soft-delete flag column, when soft deletes are on.
        ordinal: the ordinal column.
        lsn_column: the LSN column.
        commit_time_column: the commit time column.
        row_ids: the hidden row identity columns (LSN, ordinal) of a table without a key.
        bucket: the key-range partition: (partition column, key column index, width).
        key_indexes: indexes into ``columns`` of the key, which a reject names; None for
            a table without a key (a reject names the row by its LSN and ordinal).
        on_unrepresentable: ``keep`` stores a legal value its column cannot hold under its
            convention; ``stop`` raises ``SinkDataError``.
        decoder: reads the elements of an array that did not convert, one by one.
    """

    table: str
    path: str
    columns: tuple[PlanColumn, ...]
    converters: tuple[Converter, ...]
    frame: tuple[ArrowColumn, ...]
    lsn: Lsn
    commit_time: datetime
    lsn_column: str
    commit_time_column: str
    ordinal: str
    deleted: str | None = None
    row_ids: tuple[str, str] | None = None
    bucket: tuple[str, int, int] | None = None
    key_indexes: tuple[int, ...] | None = None
    on_unrepresentable: UnrepresentablePolicy = "keep"
    decoder: ValueDecoder | None = None


@dataclass(frozen=True, slots=True)
class BulkRows:
    """What an append of copied rows writes: the rows, and the values stored under a
    convention (``unrepresentable.py``)."""

    table: pa.Table
    rejects: tuple[Reject, ...]


def bulk_table(
    target: BulkTarget, strings: pa.RecordBatch | pa.Table, first_ordinal: int
) -> BulkRows:
    """The Arrow table an append of ``strings`` (text forms, COPY order) writes.

    Args:
        target: the prepared table.
        strings: one string column per relation column, NULL for SQL NULL.
        first_ordinal: the ordinal of the first row; the rows follow consecutively.

    Raises:
        SinkDataError: a value cannot be stored in its Delta type (the MERGE path's error).
    """
    rows = strings.num_rows
    data, rejects = bulk_arrays(target, strings, first_ordinal)
    ordinals = pa.array(np.arange(first_ordinal, first_ordinal + rows, dtype=np.int64))
    meta: dict[str, pa.Array] = {
        target.lsn_column: pa.array(np.full(rows, int(target.lsn), dtype=np.int64)),
        target.commit_time_column: pa.repeat(pa.scalar(target.commit_time, TIMESTAMP.arrow), rows),
        target.ordinal: ordinals,
    }
    if target.deleted is not None:
        meta[target.deleted] = pa.array(np.zeros(rows, dtype=np.bool_))
    if target.row_ids is not None:
        meta[target.row_ids[0]] = meta[target.lsn_column]
        meta[target.row_ids[1]] = ordinals
    if target.bucket is not None:
        name, index, width = target.bucket
        meta[name] = key_buckets(data[index], width)
    by_name = {c.name: a for c, a in zip(target.columns, data, strict=True)} | meta
    arrays = [by_name[c.name].cast(c.arrow) for c in target.frame]
    return BulkRows(
        pa.Table.from_arrays(arrays, names=[c.name for c in target.frame]), tuple(rejects)
    )


def bulk_arrays(
    target: BulkTarget, strings: pa.RecordBatch | pa.Table, first_ordinal: int = 1
) -> tuple[list[pa.Array], list[Reject]]:
    """Each relation column's text forms as an array of its Delta type, and the values
    stored under a convention (rows numbered from ``first_ordinal``).

    Raises:
        SinkDataError: a value cannot be stored in its Delta type.
    """
    out: list[pa.Array] = []
    converters: list[_SubstitutingConverter] = []
    for index, (column, convert) in enumerate(zip(target.columns, target.converters, strict=True)):
        text = strings.column(index)
        if isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks()
        substituting = _SubstitutingConverter(target, column, convert)
        converters.append(substituting)
        out.append(_column_array(target, column, substituting, text))
    rejects: list[Reject] = []
    for substituting in converters:
        for row, original, reason, stored in substituting.found:
            key = None
            if target.key_indexes is not None:
                key = tuple(
                    (target.columns[i].source_name, optional_text(out[i][row].as_py()))
                    for i in target.key_indexes
                )
            rejects.append(
                Reject(
                    substituting.column.name,
                    reason,
                    original,
                    optional_text(stored),
                    key,
                    target.lsn,
                    first_ordinal + row,
                    target.commit_time,
                )
            )
    rejects.sort(key=lambda r: r.ordinal)
    return out, rejects


class _SubstitutingConverter:
    """A column's converter that stores a legal value its type cannot hold under its
    convention, remembering the row (``target.on_unrepresentable`` permitting)."""

    def __init__(self, target: BulkTarget, column: PlanColumn, convert: Converter) -> None:
        self.target = target
        self.column = column
        self.convert = convert
        self.row = 0
        self.found: list[tuple[int, str, Reason, object]] = []

    def __call__(self, data: bytes) -> object:
        try:
            return self.convert(data)
        except Exception as exc:
            column = self.column
            decoder = self.target.decoder or ValueDecoder()
            found = substitute(column.delta, column.type_oid, ColumnKind.TEXT, data, decoder)
            if found is None:
                raise
            if self.target.on_unrepresentable == "stop":
                raise UnrepresentableValueError(
                    f"{found.reason.value} value (sink.on_unrepresentable: stop); store the "
                    "column as string (sink.column_types) or set sink.on_unrepresentable: keep"
                ) from exc
            original = original_text(column.type_oid, ColumnKind.TEXT, data)
            self.found.append((self.row, original, found.reason, found.value))
            return found.value


def _column_array(
    target: BulkTarget, column: PlanColumn, convert: _SubstitutingConverter, text: pa.Array
) -> pa.Array:
    table = target.table
    if pa.types.is_large_string(text.type):
        text = text.cast(pa.string())
    if not pa.types.is_string(text.type):
        # Read already decoded (the ADBC reader's native columns: integers, bool, float8,
        # text, bytea), exactly the per-value converter's values; only the width may differ.
        return _native(table, column, text)
    exact = read_exactly(column.delta, text)
    if exact is not None:
        return exact
    values: list[object] = []
    append = values.append
    try:
        for row, value in enumerate(text.to_pylist()):
            convert.row = row
            append(None if value is None else convert(value.encode()))
    except (UnrepresentableValueError, UnknownBinaryFormatError) as exc:
        raise SinkDataError(
            f"cannot store a value of column {column.name!r} of {table} (initial snapshot): {exc}"
        ) from exc
    except Exception as exc:
        raise SinkDataError(
            f"cannot convert a value of column {column.name!r} of {table} (initial snapshot) "
            f"to {column.delta.spark_sql}: {cause_line(exc)}"
        ) from exc
    try:
        return pa.array(values, type=column.delta.arrow)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise SinkDataError(
            f"cannot build {column.delta.spark_sql} values for column {column.name!r} of "
            f"{table}: {cause_line(exc)}"
        ) from exc


def frame_columns(
    columns: Sequence[PlanColumn], metadata: Sequence[ArrowColumn]
) -> tuple[ArrowColumn, ...]:
    """The columns an append writes: data columns, then metadata."""
    return (
        *(ArrowColumn(c.name, c.delta.spark_sql, c.delta.arrow) for c in columns),
        *metadata,
    )


def _native(table: str, column: PlanColumn, values: pa.Array) -> pa.Array:
    try:
        return values.cast(column.delta.arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SinkDataError(
            f"cannot store {values.type} values of column {column.name!r} of {table} "
            f"(initial snapshot) as {column.delta.spark_sql}: {cause_line(exc)}"
        ) from exc
