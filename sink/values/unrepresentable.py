"""Legal PostgreSQL values a typed Delta column cannot hold, and what is stored instead.

Theory of operation
-------------------
PostgreSQL accepts values that the Delta type chosen for their column (``typemap``) has no
room for: ``±infinity`` and dates or timestamps before year 1 or after year 9999 in DATE
and TIMESTAMP columns, ``NaN`` and ``±Infinity`` in a ``numeric(p, s)`` stored as
DECIMAL, and arrays with several dimensions or a lower bound other than 1 in a
one-dimensional ARRAY column. A native subscriber keeps each exactly; a Delta column
cannot. None of them may stop the stream (the slot could not advance past the
transaction), so each is stored under one documented convention, ``Substitute``:

========================  ==================================  ==========================
value                     stored                              ``Reason``
========================  ==================================  ==========================
``infinity``              DATE ``9999-12-31``, TIMESTAMP(_NTZ)  ``infinity``
                          ``9999-12-31 23:59:59.999999``
``-infinity``             ``0001-01-01`` (``00:00:00``)        ``infinity``
before year 1 / after     NULL                                ``out_of_range``
year 9999 (BC, 10000+)
``NaN``, ``±Infinity`` in NULL                                ``not_finite``
a DECIMAL
a multi-dimensional       NULL                                ``multidimensional``
array
an array whose lower      its elements (``{7,8}``)            ``lower_bound``
bound is not 1
an array holding one of   the array, each such element        the element's reason
the values above          stored as above
========================  ==================================  ==========================

The sentinels are what Spark users write for "open ended" (``9999-12-31``) and the
smallest value Spark holds; NULL is stored where no value of the type would be true.
In every case the value's exact PostgreSQL text form is kept as well, in the rejects
table (``rejects.py``), with the table, key, column and position of the change, so
nothing is lost and ``wal2delta verify`` can tell a convention from a difference. Users
who need the values themselves in the column store it as text (``sink.column_types``).

A value is only classified here after its converter failed (or refused it: an array
with a lower bound), so the common path pays nothing. Anything that is not one of the
cases above - bytes PostgreSQL would never send - is not classified: ``substitute``
answers None and the caller's error stands.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from decoder import ColumnKind, ValueDecoder, builtin_text_reader, cause_line
from sink.values.typemap import ARRAY_ELEMENT_OIDS, DeltaType, ValueForm


class Reason(enum.Enum):
    """Why a legal value is stored under a convention (the ``reason`` label and column)."""

    INFINITY = "infinity"
    OUT_OF_RANGE = "out_of_range"
    NOT_FINITE = "not_finite"
    MULTIDIMENSIONAL = "multidimensional"
    LOWER_BOUND = "lower_bound"


@dataclass(frozen=True, slots=True)
class Substitute:
    """What is stored for a value its Delta column cannot hold.

    Attributes:
        value: the stored value (a sentinel, the elements of an array, or None).
        reason: why.
    """

    value: object
    reason: Reason


DATE_INFINITY: Final = dt.date(9999, 12, 31)
DATE_MINUS_INFINITY: Final = dt.date(1, 1, 1)
TIMESTAMP_INFINITY: Final = dt.datetime(9999, 12, 31, 23, 59, 59, 999_999)
TIMESTAMP_MINUS_INFINITY: Final = dt.datetime(1, 1, 1)

_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_TEXT_INFINITY: Final = {b"infinity": True, b"-infinity": False}
_TEXT_NOT_FINITE: Final = frozenset({b"NaN", b"Infinity", b"-Infinity"})
_NUMERIC_SPECIAL_SIGNS: Final = frozenset({0xC000, 0xD000, 0xF000})
_YEAR: Final = re.compile(rb"(\d{4,})-\d\d-\d\d")
_TEXT_ARRAY_OID: Final = 1009
_ARRAY_HEADER: Final = struct.Struct(">iiI")
_I32: Final = struct.Struct(">i")


class UnrepresentableValueError(ValueError):
    """A value the Delta column cannot hold; the message names no row data.

    Attributes:
        substitute: what may be stored instead, when the value is one of the legal
            values this module classifies; None when it is not.
    """

    def __init__(self, message: str, substitute: Substitute | None = None) -> None:
        super().__init__(message)
        self.substitute = substitute


def substitute(
    delta: DeltaType, type_oid: int, kind: ColumnKind, data: bytes, decoder: ValueDecoder
) -> Substitute | None:
    """What to store for a value of ``delta`` that did not convert; None when it is not a
    legal value the type cannot hold (the conversion error then stands).

    Args:
        delta: the column's Delta type.
        type_oid: the column's PostgreSQL type.
        kind: ``ColumnKind.TEXT`` or ``ColumnKind.BINARY``.
        data: the value's bytes as pgoutput sent them.
        decoder: loads array elements again, one by one.
    """
    if delta.form is ValueForm.DECIMAL:
        return _not_finite(kind, data)
    if delta.form is ValueForm.ARRAY:
        element_oid = ARRAY_ELEMENT_OIDS.get(type_oid)
        if element_oid is None or delta.element is None:
            return None
        try:
            return _array(delta.element, element_oid, kind, data, decoder)
        except Exception:
            # Bytes that are no array, or an element that is not a legal value either: not
            # classified, and the caller's conversion error stands.
            return None
    if delta.form is ValueForm.NATIVE and delta.spark_sql in _TEMPORAL:
        return _temporal(delta, kind, data)
    return None


def original_text(type_oid: int, kind: ColumnKind, data: bytes) -> str:
    """The value's PostgreSQL text form: as sent in text mode, printed from binary.

    Raises:
        ValueError: a binary value of a type whose layout the decoder has no port of
            (never one this module classifies).
    """
    if kind is ColumnKind.TEXT:
        return data.decode("utf-8")
    reader = builtin_text_reader(type_oid)
    if reader is None:
        raise ValueError(f"no text form for binary values of type OID {type_oid}")
    return reader(data)


# --- dates and timestamps --------------------------------------------------------------------


def _temporal(delta: DeltaType, kind: ColumnKind, data: bytes) -> Substitute | None:
    infinite = _infinite(delta, kind, data)
    if infinite is not None:
        sentinels = _SENTINELS[delta.spark_sql]
        return Substitute(sentinels[0] if infinite else sentinels[1], Reason.INFINITY)
    if _out_of_range(kind, data):
        return Substitute(None, Reason.OUT_OF_RANGE)
    return None


def _infinite(delta: DeltaType, kind: ColumnKind, data: bytes) -> bool | None:
    """True for ``infinity``, False for ``-infinity``, None for a finite value."""
    if kind is ColumnKind.TEXT:
        return _TEXT_INFINITY.get(data)
    if delta.spark_sql == "DATE":
        if len(data) != 4:
            return None
        days = _I32.unpack(data)[0]
        return True if days == _INT32_MAX else False if days == -_INT32_MAX - 1 else None
    if len(data) != 8:
        return None
    micros = int.from_bytes(data, "big", signed=True)
    return True if micros == _INT64_MAX else False if micros == -_INT64_MAX - 1 else None


def _out_of_range(kind: ColumnKind, data: bytes) -> bool:
    """Whether a finite date or timestamp that did not load lies outside years 1-9999.

    Binary values are day or microsecond counts, which only fail to load out of range.
    A text value must show it: a BC era, a year of five digits or more, or year 1 or 9999
    pushed across the edge by its UTC offset.
    """
    if kind is ColumnKind.BINARY:
        return len(data) in {4, 8}
    if data.endswith(b" BC"):
        return True
    year = _YEAR.match(data)
    return year is not None and (len(year[1]) > 4 or int(year[1]) in {1, 9999})


_TEMPORAL: Final = frozenset({"DATE", "TIMESTAMP", "TIMESTAMP_NTZ"})
_SENTINELS: Final[dict[str, tuple[object, object]]] = {
    "DATE": (DATE_INFINITY, DATE_MINUS_INFINITY),
    "TIMESTAMP_NTZ": (TIMESTAMP_INFINITY, TIMESTAMP_MINUS_INFINITY),
    "TIMESTAMP": (
        TIMESTAMP_INFINITY.replace(tzinfo=dt.UTC),
        TIMESTAMP_MINUS_INFINITY.replace(tzinfo=dt.UTC),
    ),
}


# --- numeric ---------------------------------------------------------------------------------


def _not_finite(kind: ColumnKind, data: bytes) -> Substitute | None:
    if kind is ColumnKind.TEXT:
        special = data in _TEXT_NOT_FINITE
    else:
        special = len(data) >= 8 and int.from_bytes(data[4:6], "big") in _NUMERIC_SPECIAL_SIGNS
    return Substitute(None, Reason.NOT_FINITE) if special else None


# --- arrays ----------------------------------------------------------------------------------


def array_shape_is_plain(kind: ColumnKind, data: bytes) -> bool:
    """Whether an array value has at most one dimension and lower bound 1 (or is empty).

    The array converters check it before loading: psycopg's loaders drop lower bounds,
    which would change the value silently.
    """
    if kind is ColumnKind.TEXT:
        # A bound prefix ([0:1]=...) or a nested brace; an element that starts with a brace
        # is quoted in array_out's text.
        return not data.startswith((b"[", b"{{"))
    if len(data) < 12:
        return True
    ndim = _I32.unpack_from(data)[0]
    if ndim == 0:
        return True
    return ndim == 1 and len(data) >= 20 and _I32.unpack_from(data, 16)[0] == 1


def _array(
    element: DeltaType, element_oid: int, kind: ColumnKind, data: bytes, decoder: ValueDecoder
) -> Substitute | None:
    split = _split_array(kind, data, decoder)
    if split is None:
        return None
    dimensions, lower_bound_moved, items = split
    if dimensions > 1:
        return Substitute(None, Reason.MULTIDIMENSIONAL)
    load = decoder.loader(element_oid, kind)
    reasons: list[Reason] = []
    values: list[object] = []
    for item in items:
        if item is None:
            values.append(None)
            continue
        value, reason = _element(element, element_oid, kind, item, (load, decoder))
        if reason is not None:
            reasons.append(reason)
        values.append(value)
    if lower_bound_moved:
        reasons.insert(0, Reason.LOWER_BOUND)
    if not reasons:
        return None
    return Substitute(values, reasons[0])


def _element(
    element: DeltaType,
    element_oid: int,
    kind: ColumnKind,
    data: bytes,
    loading: tuple[Callable[[bytes], object], ValueDecoder],
) -> tuple[object, Reason | None]:
    """One element's stored value, and its reason when it is stored under a convention.

    ``loading`` is the element type's loader and the decoder that classifies a failure.

    Raises:
        UnrepresentableValueError: the element is not a legal value this module classifies.
    """
    load, decoder = loading
    try:
        value = load(data)
    except Exception as exc:
        found = substitute(element, element_oid, kind, data, decoder)
        if found is None:
            raise UnrepresentableValueError(
                f"an element of type OID {element_oid} did not load: {cause_line(exc)}"
            ) from exc
        return found.value, found.reason
    if element.form is ValueForm.DECIMAL and not (isinstance(value, Decimal) and value.is_finite()):
        return None, Reason.NOT_FINITE
    return value, None


def _split_array(
    kind: ColumnKind, data: bytes, decoder: ValueDecoder
) -> tuple[int, bool, list[bytes | None]] | None:
    """(dimensions, whether a lower bound is not 1, the elements' bytes in order)."""
    if kind is ColumnKind.TEXT:
        loaded = decoder.loader(_TEXT_ARRAY_OID, ColumnKind.TEXT)(data)
        if not isinstance(loaded, list):
            return None
        dimensions = 1
        first: object = loaded
        while isinstance(first, list) and first and isinstance(first[0], list):
            dimensions += 1
            first = first[0]
        lower_bound_moved = data.startswith(b"[") and not data.startswith(b"[1:")
        if dimensions > 1:
            return dimensions, lower_bound_moved, []
        return 1, lower_bound_moved, [None if s is None else str(s).encode() for s in loaded]
    return _split_binary_array(data)


def _split_binary_array(data: bytes) -> tuple[int, bool, list[bytes | None]] | None:
    if len(data) < 12:
        return None
    ndim, _, _ = _ARRAY_HEADER.unpack_from(data)
    if ndim == 0:
        return 1, False, []
    if not 0 < ndim <= 6 or len(data) < 12 + 8 * ndim:
        return None
    bounds = struct.unpack_from(f">{2 * ndim}i", data, 12)
    if ndim > 1:
        return ndim, False, []
    size, lower = bounds
    items: list[bytes | None] = []
    position = 20
    for _ in range(size):
        length = _I32.unpack_from(data, position)[0]
        position += 4
        if length < 0:
            items.append(None)
            continue
        items.append(data[position : position + length])
        position += length
    return 1, lower != 1, items


__all__ = [
    "DATE_INFINITY",
    "DATE_MINUS_INFINITY",
    "TIMESTAMP_INFINITY",
    "TIMESTAMP_MINUS_INFINITY",
    "Reason",
    "Substitute",
    "UnrepresentableValueError",
    "array_shape_is_plain",
    "original_text",
    "substitute",
]
