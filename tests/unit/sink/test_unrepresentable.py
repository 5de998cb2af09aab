"""Legal values a Delta type cannot hold: each classified alike in text and binary mode.

For every date and timestamp PostgreSQL can send (any int32 day count, any int64
microsecond count, the infinities included), the binary value and its text form - printed
by the decoder's port of the output function - either both convert to the same value or
both get the same substitute; never an error. Numerics and arrays likewise for the values
the conventions cover; anything else (bytes PostgreSQL never sends) is not classified.
"""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder import ColumnKind, ValueDecoder, builtin_text_reader
from sink.values.convert import column_converter
from sink.values.typemap import PlanColumn, delta_type
from sink.values.unrepresentable import (
    DATE_INFINITY,
    TIMESTAMP_INFINITY,
    TIMESTAMP_MINUS_INFINITY,
    Reason,
    Substitute,
    array_shape_is_plain,
    original_text,
    substitute,
)

DECODER = ValueDecoder()
TEXT, BINARY = ColumnKind.TEXT, ColumnKind.BINARY
# PostgreSQL's range: 4713 BC to 5874897 AD for dates, 294276 AD for timestamps.
DAYS = st.one_of(st.integers(-2_451_545, 2_145_031_948), st.sampled_from([2**31 - 1, -(2**31)]))
MICROS = st.one_of(
    st.integers(-211_813_488_000_000_000, 9_223_371_331_200_000_000 - 1),
    st.sampled_from([2**63 - 1, -(2**63), 0, 252_423_993_599_999_999]),
)


def _outcome(type_oid: int, kind: ColumnKind, data: bytes) -> tuple[str, object]:
    column = PlanColumn("c", type_oid, -1, delta_type(type_oid, -1))
    try:
        return ("value", column_converter(column, kind, DECODER)(data))
    except Exception:
        found = substitute(column.delta, type_oid, kind, data, DECODER)
        return ("substitute", found)


@settings(max_examples=400, deadline=None)
@given(days=DAYS)
def test_dates_convert_or_substitute_alike_in_both_modes(days: int) -> None:
    binary = struct.pack(">i", days)
    reader = builtin_text_reader(1082)
    assert reader is not None
    text = reader(binary).encode()
    outcome = _outcome(1082, BINARY, binary)
    assert outcome == _outcome(1082, TEXT, text)
    assert outcome[1] is not None
    if outcome[0] == "substitute":
        assert original_text(1082, BINARY, binary) == text.decode()


@pytest.mark.parametrize("type_oid", [1114, 1184])
@settings(max_examples=300, deadline=None)
@given(micros=MICROS)
def test_timestamps_convert_or_substitute_alike_in_both_modes(type_oid: int, micros: int) -> None:
    binary = struct.pack(">q", micros)
    reader = builtin_text_reader(type_oid)
    assert reader is not None
    text = reader(binary).encode()
    outcome = _outcome(type_oid, BINARY, binary)
    assert outcome == _outcome(type_oid, TEXT, text)
    assert outcome[1] is not None


def test_the_sentinels_and_reasons() -> None:
    ntz, tz, day = delta_type(1114, -1), delta_type(1184, -1), delta_type(1082, -1)
    assert substitute(ntz, 1114, TEXT, b"infinity", DECODER) == Substitute(
        TIMESTAMP_INFINITY, Reason.INFINITY
    )
    assert substitute(tz, 1184, TEXT, b"-infinity", DECODER) == Substitute(
        TIMESTAMP_MINUS_INFINITY.replace(tzinfo=UTC), Reason.INFINITY
    )
    assert substitute(day, 1082, TEXT, b"infinity", DECODER) == Substitute(
        DATE_INFINITY, Reason.INFINITY
    )
    assert substitute(day, 1082, TEXT, b"0001-01-01 BC", DECODER) == Substitute(
        None, Reason.OUT_OF_RANGE
    )
    # An offset that pushes year 1 or 9999 across the edge.
    assert substitute(tz, 1184, TEXT, b"9999-12-31 23:00:00-05", DECODER) == Substitute(
        None, Reason.OUT_OF_RANGE
    )
    assert datetime(9999, 12, 31, 23, 59, 59, 999_999) == TIMESTAMP_INFINITY
    assert date(9999, 12, 31) == DATE_INFINITY


@pytest.mark.parametrize(
    "data", [b"", b"not a date", b"2024-13-45", b"20240101"], ids=["empty", "words", "bad", "bare"]
)
def test_bytes_postgresql_never_sends_are_not_classified(data: bytes) -> None:
    assert substitute(delta_type(1082, -1), 1082, TEXT, data, DECODER) is None


NUMERIC_10_2 = ((10 << 16) | 2) + 4


def test_nan_in_a_decimal_is_null_in_both_modes() -> None:
    decimal = delta_type(1700, NUMERIC_10_2)
    nan_binary = struct.pack(">hhHh", 0, 0, 0xC000, 0)
    expected = Substitute(None, Reason.NOT_FINITE)
    assert substitute(decimal, 1700, TEXT, b"NaN", DECODER) == expected
    assert substitute(decimal, 1700, BINARY, nan_binary, DECODER) == expected
    assert original_text(1700, BINARY, nan_binary) == "NaN"
    assert substitute(decimal, 1700, TEXT, b"1.5", DECODER) is None


def _int_array(items: list[int | None], lower: int = 1, ndim: int = 1) -> bytes:
    sizes = [len(items)] if ndim == 1 else [1, len(items)]
    out = [struct.pack(">iiI", ndim, int(None in items), 23)]
    out += [struct.pack(">ii", size, lower) for size in sizes]
    out += [struct.pack(">i", -1) if i is None else struct.pack(">ii", 4, i) for i in items]
    return b"".join(out)


@pytest.mark.parametrize(
    ("text", "binary", "expected"),
    [
        (b"[0:1]={7,8}", _int_array([7, 8], lower=0), Substitute([7, 8], Reason.LOWER_BOUND)),
        (b"{{7,8}}", _int_array([7, 8], ndim=2), Substitute(None, Reason.MULTIDIMENSIONAL)),
    ],
    ids=["lower bound", "two dimensions"],
)
def test_array_shapes_alike_in_both_modes(text: bytes, binary: bytes, expected: Substitute) -> None:
    array = delta_type(1007, -1)
    assert not array_shape_is_plain(TEXT, text)
    assert not array_shape_is_plain(BINARY, binary)
    assert substitute(array, 1007, TEXT, text, DECODER) == expected
    assert substitute(array, 1007, BINARY, binary, DECODER) == expected
    assert original_text(1007, BINARY, binary) == text.decode()
    assert array_shape_is_plain(TEXT, b"{7,8}")
    assert array_shape_is_plain(BINARY, _int_array([7, 8]))
    assert array_shape_is_plain(BINARY, struct.pack(">iiI", 0, 0, 23))


def test_an_array_element_takes_its_own_convention() -> None:
    timestamps = delta_type(1115, -1)
    found = substitute(timestamps, 1115, TEXT, b'{infinity,"2020-01-01 00:00:00",NULL}', DECODER)
    assert found == Substitute([TIMESTAMP_INFINITY, datetime(2020, 1, 1), None], Reason.INFINITY)
    decimals = delta_type(1231, NUMERIC_10_2)
    assert substitute(decimals, 1231, TEXT, b"{1.50,NaN}", DECODER) is not None
