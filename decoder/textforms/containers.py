"""Containers: arrays, records, ranges and multiranges - from binary and from Python values.

A container prints each value inside it with that value's own printer, then quotes it the
way its output function does. The quoting lives here once, for both sources:

* ``array_element`` - ``array_out``: quoted when empty, ``NULL`` in any ASCII case, or
  holding braces, the delimiter, a quote, a backslash or white space; inside the quotes
  ``"`` and ``\\`` are *backslash-escaped*.
* ``record_field`` and ``range_bound`` - ``record_out`` and ``range_bound_escape``:
  quoted when empty or holding a quote, a backslash, a parenthesis, a comma (a bracket, for
  a range) or white space; inside the quotes ``"`` and ``\\`` are *doubled*
  (``rangetypes.c``: ``if (ch == '"' || ch == '\\\\') appendStringInfoChar(&buf, ch);``).

White space is what C's ``isspace`` means in the C locale, ASCII only: PostgreSQL tests
bytes, so a non-ASCII space (U+00A0) or a control character Python calls space (U+001C)
is printed without quotes.

The binary readers (``array_text``, ``record_text``, ``range_text``, ``multirange_text``)
take the readers of the values inside; the Python printers (``array_value_text``,
``range_value_text``, ``multirange_value_text``) take the printer of the values inside.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from psycopg.types.range import Range

from decoder.textforms.base import I32, Reader, ReaderLookup

_ASCII_SPACE: Final = frozenset(" \t\n\r\v\f")  # array_isspace; isspace() in the C locale
_RECORD_SPECIAL: Final = '"\\(),'
_RANGE_SPECIAL: Final = '"\\()[],'
_OID: Final = struct.Struct(">I")


def _nullable(data: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    """The int32 length at ``pos`` (-1: NULL), then that many bytes: (the bytes or None,
    the position after them)."""
    length = I32.unpack_from(data, pos)[0]
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > len(data):
        raise ValueError(f"{what} runs past the end")
    return data[pos : pos + length], pos + length


def _counted(data: bytes, pos: int, what: str) -> tuple[bytes, int]:
    """``_nullable`` for a value that cannot be NULL."""
    value, pos = _nullable(data, pos, what)
    if value is None:
        raise ValueError(f"{what} is NULL")
    return value, pos


def braced(parts: Iterable[str], delimiter: str = ",") -> str:
    """``{a,b,c}``: an array level or a multirange."""
    return "{" + delimiter.join(parts) + "}"


# --- arrays ----------------------------------------------------------------------------------


def array_element(text: str, delimiter: str) -> str:
    """An element as ``array_out`` prints it: quoted when empty, ``NULL`` in any case, or
    holding braces, the delimiter, a quote, a backslash or white space; ``"`` and ``\\``
    are backslash-escaped inside the quotes."""
    needs_quotes = (
        text == ""
        or (text.isascii() and text.upper() == "NULL")  # pg_strcasecmp folds ASCII only
        or any(ch in '{}"\\' or ch == delimiter or ch in _ASCII_SPACE for ch in text)
    )
    if not needs_quotes:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def array_text(data: bytes, element: ReaderLookup, delimiter: str = ",") -> str:
    """``array_out`` of an ``array_send`` value.

    The layout: int32 dimension count, int32 NULL flag, element type OID, a (size, lower
    bound) pair per dimension, then each element as int32 length (-1 for NULL) and bytes.
    Elements print with ``element(element type OID)``; an empty array is ``{}``; lower
    bounds other than 1 print as a ``[lower:upper]`` prefix per dimension, then ``=``.
    """
    ndim, _, element_oid = struct.unpack_from(">iiI", data)
    if ndim == 0:
        if len(data) != 12:
            raise ValueError("trailing bytes after an empty array")
        return "{}"
    if not 0 < ndim <= 6:
        raise ValueError(f"invalid array dimension count {ndim}")
    bounds = struct.unpack_from(f">{2 * ndim}i", data, 12)
    sizes, lowers = bounds[0::2], bounds[1::2]
    if any(size < 0 for size in sizes):
        raise ValueError("negative array dimension")
    read = element(element_oid)
    items: list[str] = []
    pos = 12 + 8 * ndim
    for _ in range(math.prod(sizes)):
        value, pos = _nullable(data, pos, "array element")
        items.append("NULL" if value is None else array_element(read(value), delimiter))
    if pos != len(data):
        raise ValueError("trailing bytes after the array elements")
    prefix = ""
    if any(lower != 1 for lower in lowers):
        prefix = "".join(f"[{lo}:{lo + size - 1}]" for lo, size in zip(lowers, sizes, strict=True))
        prefix += "="
    return prefix + _nest(items, sizes, delimiter)


def _nest(items: list[str], sizes: tuple[int, ...], delimiter: str) -> str:
    if len(sizes) == 1:
        return braced(items, delimiter)
    step = len(items) // sizes[0] if sizes[0] else 0
    return braced(
        (_nest(items[i * step : (i + 1) * step], sizes[1:], delimiter) for i in range(sizes[0])),
        delimiter,
    )


def array_value_text(
    items: Sequence[object], element: Callable[[object], str], delimiter: str = ","
) -> str:
    """``array_out`` of an array psycopg loaded as (nested) lists; ``None`` is NULL and
    every other element prints with ``element``. Lower bounds are lost in the loading."""
    parts: list[str] = []
    for item in items:
        if item is None:
            parts.append("NULL")
        elif isinstance(item, list):
            parts.append(array_value_text(item, element, delimiter))
        else:
            parts.append(array_element(element(item), delimiter))
    return braced(parts, delimiter)


# --- records ---------------------------------------------------------------------------------


def _quoted_field(text: str, special: str) -> str:
    """A value as ``record_out`` and ``range_bound_escape`` print it: quoted when empty or
    holding one of ``special`` or white space; ``"`` and ``\\`` are doubled."""
    if text != "" and not any(ch in special or ch in _ASCII_SPACE for ch in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'


def record_field(text: str) -> str:
    """A field as ``record_out`` prints it (a NULL field prints as nothing, not here)."""
    return _quoted_field(text, _RECORD_SPECIAL)


def record_text(data: bytes, field: ReaderLookup) -> str:
    """``record_out`` of a ``record_send`` value.

    The layout: int32 field count, then per field its type OID, int32 length (-1 for
    NULL) and bytes. A NULL field prints as nothing; each other field with
    ``field(type OID)``, quoted when ``record_out`` would quote it.
    """
    count = I32.unpack_from(data)[0]
    if count < 0:
        raise ValueError("negative record field count")
    pos = 4
    parts: list[str] = []
    for _ in range(count):
        type_oid = _OID.unpack_from(data, pos)[0]
        value, pos = _nullable(data, pos + 4, "record field")
        parts.append("" if value is None else record_field(field(type_oid)(value)))
    if pos != len(data):
        raise ValueError("trailing bytes after the record fields")
    return "(" + ",".join(parts) + ")"


# --- ranges and multiranges ------------------------------------------------------------------

_RANGE_EMPTY: Final = 0x01
_RANGE_LB_INC: Final = 0x02
_RANGE_UB_INC: Final = 0x04
_RANGE_LB_INF: Final = 0x08
_RANGE_UB_INF: Final = 0x10


def range_bound(text: str) -> str:
    """A finite bound as ``range_bound_escape`` prints it."""
    return _quoted_field(text, _RANGE_SPECIAL)


def range_deparse(lower_inc: bool, lower: str | None, upper: str | None, upper_inc: bool) -> str:
    """``range_deparse`` of a non-empty range: its brackets around the bounds' texts, an
    infinite bound (None) printing as nothing."""
    return (
        ("[" if lower_inc else "(")
        + ("" if lower is None else range_bound(lower))
        + ","
        + ("" if upper is None else range_bound(upper))
        + ("]" if upper_inc else ")")
    )


def range_text(data: bytes, bound: Reader) -> str:
    """``range_out`` of a ``range_send`` value: a flags byte, then each finite bound as
    int32 length and the subtype's binary form; bounds print with ``bound``."""
    flags = data[0]
    if flags & _RANGE_EMPTY:
        if len(data) != 1:
            raise ValueError("trailing bytes after an empty range")
        return "empty"
    pos = 1
    texts: list[str | None] = []
    for infinite in (flags & _RANGE_LB_INF, flags & _RANGE_UB_INF):
        if infinite:
            texts.append(None)
            continue
        value, pos = _counted(data, pos, "range bound")
        texts.append(bound(value))
    if pos != len(data):
        raise ValueError("trailing bytes after the range bounds")
    return range_deparse(
        bool(flags & _RANGE_LB_INC), texts[0], texts[1], bool(flags & _RANGE_UB_INC)
    )


def range_value_text(value: Range[Any], bound: Callable[[object], str]) -> str:
    """``range_out`` of a range psycopg loaded; finite bounds print with ``bound``."""
    if value.isempty:
        return "empty"
    return range_deparse(
        value.bounds[0] == "[",
        None if value.lower is None else bound(value.lower),
        None if value.upper is None else bound(value.upper),
        value.bounds[1] == "]",
    )


def multirange_text(data: bytes, range_reader: Reader) -> str:
    """``multirange_out`` of a ``multirange_send`` value: int32 count, then each range as
    int32 length and its ``range_send`` bytes; printed ``{range,range}``."""
    count = I32.unpack_from(data)[0]
    pos = 4
    parts: list[str] = []
    for _ in range(count):
        value, pos = _counted(data, pos, "range of the multirange")
        parts.append(range_reader(value))
    if pos != len(data):
        raise ValueError("trailing bytes after the ranges")
    return braced(parts)


def multirange_value_text(ranges: Iterable[Range[Any]], one: Callable[[Range[Any]], str]) -> str:
    """``multirange_out`` of a multirange psycopg loaded; each range prints with ``one``."""
    return braced(one(item) for item in ranges)
