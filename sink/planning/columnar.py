"""Merge-step rows converted column by column: the streaming planner's fast path.

Theory of operation
-------------------
Most changes a batch folds are inserts, updates that send every column and keep their
identity, and deletes. The row path (``plan``) turns each of their values into a Python
object, freezes one ``PlannedRow`` per row, and ``arrow.source_table`` turns the rows back
into columns. For these rows the planner converts only the identity
(``kernel.pick_text_values``, what the fold's dictionary needs) and keeps the message
bytes (a delete's old tuple: its key, the other columns NULL unless REPLICA IDENTITY FULL
sent them, as the row path plans it); a run of them is folded in C
(``kernel.fold_text_rows``), each row an index into its step, no object of its own.
When the step is frozen,
``column_arrays`` gathers the text values of the rows the fold kept into one Arrow array
per column in C (``kernel.gather_text_columns``) and reads each with the exact vectorised
casts of ``textcast``; a column whose type has no exact cast, or holds a value Arrow's
strict parser refuses, is converted value by value with the row path's own converter.

The result equals the row path's MERGE source for the same rows, value for value: the row
path stays the reference (``tests/unit/sink/test_columnar.py`` compares both on generated
batches). Anything unusual - a binary or unchanged-TOAST value, a value the converter
refuses, a value Arrow cannot hold - gives None, and the planner converts those rows one
by one, where the row path raises its precise error. Without the compiled kernel
(``sink.kernel``) no row takes this path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pyarrow as pa

from sink.planning.kernel import ColumnarMeta, gather_text_columns
from sink.planning.plan import ColumnarRows
from sink.values.convert import Converter
from sink.values.textcast import read_exactly
from sink.values.typemap import BIGINT, BOOLEAN, TIMESTAMP, DeltaType

_INT64_SIZE: Final = 8


def columnar_rows(values: tuple[pa.Array, ...], meta: ColumnarMeta) -> ColumnarRows:
    """The live rows of a step: ``values`` (one array per column over every folded change)
    narrowed to ``meta.live``, and the metadata columns ``kernel.columnar_meta`` laid out."""
    count = len(meta.lsns) // _INT64_SIZE
    if meta.live is not None:
        live = _array_over(BIGINT.arrow, count, meta.live)
        values = tuple(array.take(live) for array in values)
    return ColumnarRows(
        values,
        _array_over(BIGINT.arrow, count, meta.lsns),
        _array_over(TIMESTAMP.arrow, count, meta.micros),
        _array_over(BIGINT.arrow, count, meta.ordinals),
        _array_over(BOOLEAN.arrow, count, meta.deletes),
    )


def _array_over(arrow: pa.DataType, count: int, data: bytes) -> pa.Array:
    """``count`` values of the fixed-width type ``arrow`` (no NULLs) over ``data``, no copy."""
    return pa.Array.from_buffers(arrow, count, [None, pa.py_buffer(data)])


def column_arrays(
    types: Sequence[DeltaType],
    converters: Sequence[Converter],
    parts: list[tuple[bytes, int]],
) -> tuple[pa.Array, ...] | None:
    """The values of text-only TupleData parts as one array per column; None on anything else.

    Args:
        types: each column's Delta type.
        converters: each column's text converter (``convert.column_converter``).
        parts: ``TupleData.wire`` of each row.
    """
    gathered = gather_text_columns(parts, len(types))
    if gathered is None:
        return None
    rows = len(parts)
    out: list[pa.Array] = []
    for delta, convert, (offsets, data, validity, nulls) in zip(
        types, converters, gathered, strict=True
    ):
        raw = pa.Array.from_buffers(
            pa.binary(),
            rows,
            [
                None if validity is None else pa.py_buffer(validity),
                pa.py_buffer(offsets),
                pa.py_buffer(data),
            ],
            null_count=nulls,
        )
        array = _read(delta, convert, raw)
        if array is None:
            return None
        out.append(array)
    return tuple(out)


def _read(delta: DeltaType, convert: Converter, raw: pa.Array) -> pa.Array | None:
    """One column's text forms as ``delta`` values: vectorised where exact, else per value."""
    exact = read_exactly(delta, raw)
    if exact is not None:
        return exact.cast(delta.arrow)
    try:
        return pa.array(
            [None if value is None else convert(value) for value in raw.to_pylist()],
            type=delta.arrow,
        )
    except Exception:  # the row path converts again and raises the precise error
        return None
