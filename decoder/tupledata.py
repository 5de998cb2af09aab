"""The TupleData part of INSERT, UPDATE and DELETE: the decoder's one walk over its columns.

Wire format (``logicalrep_write_tuple``): Int16 column count, then per column a status
byte: ``n`` NULL, ``u`` an unchanged TOASTed value (not sent), ``t`` text or ``b`` binary;
the last two are followed by an Int32 length and that many bytes.

Theory of operation: ``walk_tuple`` is the only loop over these columns in the decoder.
Its callers differ in what they make of a column, not in how they find it:

* ``skip_tuple`` validates and skips a part (the assembler's check of every arriving row
  message, ``parser.row_message_is_valid`` and ``scan_row_message``);
* ``messages.split_columns`` makes ``ColumnValue`` objects (``parse_message`` and
  ``TupleData.values``);
* ``values.load_tuple_wire`` converts each column with a loader of its own (the sink's
  planning and ``decode_tuple``).

The walk has two forms with one behaviour: ``walk_tuple_reference``, in Python, and the
same loop in C (``decoder/_tuplewalk.c``, see ``decoder.native``), which ``walk_tuple``
runs when it was built; whatever the C loop cannot finish it hands to the reference.

The walk is optimistic, because it runs once per column of every row: it composes no
error text and checks no bounds; reading past the buffer raises, and the final offset is
compared with the buffer's end once. Only when it fails does ``_column_error`` look at
the failing column and name what is wrong and where, with the parser's wording, as a
``TupleDataError``; each caller turns that into its own error. A value whose length runs
past the end is noticed only after it, so ``_located`` walks again to find where it
started.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Sequence
from typing import Final

from decoder.native import COMPILED
from decoder.wire import U32

Load = Callable[[bytes], object]
"""Makes a column's value from its bytes."""

_I32_MAX: Final = 2**31 - 1
_DATA_STATUS: Final = frozenset({0x74, 0x62})  # 't', 'b'
_NULL_OR_UNCHANGED: Final = frozenset({0x6E, 0x75})  # 'n', 'u'


class TupleDataError(ValueError):
    """A TupleData part that does not fit its bytes.

    Attributes:
        reason: what is wrong, worded as ``parse_message`` reports it.
        offset: where, in the buffer.
    """

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset


def walk_tuple_reference(  # noqa: PLR0917 - positional on purpose: one call per tuple
    buf: bytes,
    start: int,
    out: list[object] | None,
    text: Sequence[Load],
    binary: Sequence[Load],
    null: object,
    unchanged: object,
    *,
    locate: bool = True,
) -> int:
    """Walk the TupleData part at ``buf[start:]``; return the offset after it.

    Args:
        buf: the bytes holding the part (a whole message: offsets are the message's).
        start: offset of the column count.
        out: receives one value per column, in order; None only validates.
        text: ``text[i]`` makes column ``i``'s value from its bytes when sent as text;
            at least as many entries as the part has columns (unused when ``out`` is None).
        binary: the same for binary values.
        null: the value of a NULL column.
        unchanged: the value of an unchanged TOASTed column.
        locate: False only for ``_located``'s own walk.

    Raises:
        TupleDataError: the part does not fit ``buf``, or has an unknown status byte.
        Exception: whatever a loader raises, unchanged; a loader may be handed the cut
            value of a part that runs past the end of ``buf`` before the walk notices.
    """
    pos = start
    index = 0
    build = out is not None
    if out is not None:  # bound only when building: the validating walk is the hotter one
        append = out.append
    unpack = U32.unpack_from
    # Status bytes are compared one by one: faster than a set lookup on CPython 3.11.
    try:
        count = (buf[pos] << 8) | buf[pos + 1]
        pos += 2
        for index in range(count):
            kind = buf[pos]
            if kind == 0x74 or kind == 0x62:  # noqa: PLR1714 - text, binary: length, bytes
                stop = pos + 5 + unpack(buf, pos + 1)[0]
                if build:
                    append((text[index] if kind == 0x74 else binary[index])(buf[pos + 5 : stop]))
                pos = stop
            elif kind == 0x6E or kind == 0x75:  # noqa: PLR1714 - NULL, unchanged TOAST
                if build:
                    append(null if kind == 0x6E else unchanged)
                pos += 1
            else:
                break  # an unknown status byte
        else:
            if pos <= len(buf):
                return pos
    except (IndexError, struct.error):
        if pos == start:
            remaining = len(buf) - start
            raise TupleDataError(
                _short(2, "the TupleData column count", remaining), start
            ) from None
        if pos <= len(buf):  # at column ``index``: its status, its length or its loader
            error = _column_error(buf, pos, index)
            if error is None:
                raise  # the column is sound: its loader raised this
            raise error from None
    if pos <= len(buf):
        error = _column_error(buf, pos, index)
        assert error is not None, "the walk stops early only at a faulty column"
        raise error
    # A value ran past the end of ``buf``; the walk went on from where it claimed to end.
    if not locate:
        raise _OverrunError
    raise _located(buf, start)


def _walk_tuple_compiled(  # noqa: PLR0917 - as walk_tuple_reference
    buf: bytes,
    start: int,
    out: list[object] | None,
    text: Sequence[Load],
    binary: Sequence[Load],
    null: object,
    unchanged: object,
    *,
    locate: bool = True,
) -> int:
    """``walk_tuple_reference`` in C (``decoder/_tuplewalk.c``); the same answer, faster.

    Whatever the C walk cannot do - a part that does not fit, a loader that raises, a
    buffer that is not ``bytes`` - it leaves to the reference, which raises the precise
    error; the values it appended before giving up are dropped first.
    """
    assert COMPILED is not None
    mark = 0 if out is None else len(out)
    end: int = COMPILED.walk(buf, start, out, text, binary, null, unchanged)
    if end >= 0:
        return end
    if out is not None:
        del out[mark:]
    return walk_tuple_reference(buf, start, out, text, binary, null, unchanged, locate=locate)


walk_tuple: Final = walk_tuple_reference if COMPILED is None else _walk_tuple_compiled
"""The decoder's TupleData walk: compiled when the kernel was built (``decoder.native``),
else the reference. Arguments, result and errors are ``walk_tuple_reference``'s."""


class _OverrunError(Exception):
    """``_located``'s walk reached the value that runs past the end."""


def _located(buf: bytes, start: int) -> TupleDataError:
    """The error of a part whose value runs past the end of ``buf``, located.

    The walk checks each value's end only through the reads after it, so it does not know
    where the faulty value started. Walking again with ``len`` as every loader records
    each value's length up to the faulty one, which is the last and is cut at the end of
    ``buf``: its length says where it started.
    """
    count = (buf[start] << 8) | buf[start + 1]
    lengths: list[object] = []
    with contextlib.suppress(_OverrunError):
        walk_tuple_reference(
            buf, start, lengths, [len] * count, [len] * count, None, None, locate=False
        )
    cut = lengths[-1]
    assert isinstance(cut, int), "only a text or binary value runs past the end"
    error = _column_error(buf, len(buf) - cut - 5, len(lengths) - 1)
    assert error is not None
    return error


def skip_tuple(buf: bytes, start: int) -> int:
    """Validate the TupleData part at ``buf[start:]``; return the offset after it.

    Raises:
        TupleDataError: as ``walk_tuple``.
    """
    return walk_tuple(buf, start, None, (), (), None, None)


def _column_error(buf: bytes, pos: int, index: int) -> TupleDataError | None:
    """What is wrong with column ``index`` starting at ``pos``; None when nothing is."""
    end = len(buf)
    if pos >= end:
        return TupleDataError(_short(1, f"the status byte of column {index}", end - pos), pos)
    kind = buf[pos]
    if kind in _NULL_OR_UNCHANGED:
        return None
    if kind not in _DATA_STATUS:
        return TupleDataError(f"unknown column status byte 0x{kind:02x}", pos)
    if pos + 5 > end:
        return TupleDataError(_short(4, f"the length of column {index}", end - pos - 1), pos + 1)
    (length,) = U32.unpack_from(buf, pos + 1)
    if length > _I32_MAX:
        return TupleDataError(f"column {index} has a negative length {length - 2**32}", pos + 1)
    if pos + 5 + length > end:
        return TupleDataError(
            _short(length, f"the value of column {index}", end - pos - 5), pos + 5
        )
    return None


def _short(needed: int, field: str, remaining: int) -> str:
    # The wording of wire.Reader.short, so every path names a short part alike.
    return f"message ends before {field}: it needs {needed} bytes but {remaining} remain"
