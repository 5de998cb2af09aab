"""Exact vectorised readings of PostgreSQL text forms into Delta's Arrow types.

PostgreSQL's text form of a value is the same in a COPY and in a text-mode pgoutput
stream (the type's output function). For the Delta types below, Arrow's casts read it
exactly as the per-value converter (``convert.column_converter``) does - integers, floats,
booleans, ``DECIMAL(p,s)``, dates and timestamps in ISO form; text stays as it is - and
Arrow's parsers are strict: a value they do not read (a BC date, ``infinity``, ``NaN`` in
a DECIMAL, an offset with seconds) makes ``read_exactly`` answer None, and the caller
converts that column value by value instead. ``tests/unit/sink/test_bulk.py`` pins every
reading to the per-value converter. Used by the initial snapshot's appends (``bulk``) and
the streaming planner's columnar rows (``columnar``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from sink.values.typemap import (
    BIGINT,
    BOOLEAN,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    SMALLINT,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    DeltaType,
    ValueForm,
)

TextReader = Callable[[pa.Array], pa.Array]
"""Reads a string array of text forms into an array of one Delta type."""


def _cast_to(arrow: pa.DataType) -> TextReader:
    return lambda text: pc.cast(text, arrow)


def _float4(text: pa.Array) -> pa.Array:
    # As the per-value path: parsed as a double (Python's float), then narrowed.
    return pc.cast(pc.cast(text, DOUBLE.arrow), FLOAT.arrow)


def _boolean(text: pa.Array) -> pa.Array:
    true = pc.equal(text, "t")
    if pc.any(pc.and_(pc.invert(true), pc.not_equal(text, "f"))).as_py():
        raise pa.ArrowInvalid("a boolean text form other than t or f")
    return true


def _same(text: pa.Array) -> pa.Array:
    return text


_NATIVE_READERS: Final[dict[DeltaType, TextReader]] = {
    BOOLEAN: _boolean,
    FLOAT: _float4,
    STRING: _same,
    **{
        t: _cast_to(t.arrow)
        for t in (SMALLINT, INT, BIGINT, DOUBLE, DATE, TIMESTAMP, TIMESTAMP_NTZ)
    },
}
"""Natively stored types whose text forms Arrow reads exactly as psycopg's loaders do."""


def read_exactly(delta: DeltaType, text: pa.Array) -> pa.Array | None:
    """``text``'s values read as ``delta`` by its exact vectorised reading.

    Args:
        delta: the Delta type.
        text: text forms as a string array, or a binary array of UTF-8 (checked here, as
            the per-value converter's decode does).

    Returns:
        The values; None when ``delta`` has no exact vectorised reading, a value is not
        UTF-8, or Arrow's strict parser refuses a value - the caller then converts the
        column value by value (``convert.column_converter``), which decides.
    """
    cast = _vectorised_reader(delta)
    if cast is None:
        return None
    try:
        if pa.types.is_binary(text.type):
            text = text.cast(pa.string())
        return cast(text)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _vectorised_reader(delta: DeltaType) -> TextReader | None:
    """The exact vectorised reading of ``delta``'s text forms; None when there is none."""
    if delta.form is ValueForm.TEXT:
        return _same
    if delta.form is ValueForm.DECIMAL:
        return _cast_to(delta.arrow)
    if delta.form is ValueForm.NATIVE:
        return _NATIVE_READERS.get(delta)
    return None
