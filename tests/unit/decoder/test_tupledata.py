"""The one TupleData walk: every mode agrees on where a part ends and on what is wrong with it.

``walk_tuple`` validates (no output) or builds (a value per column); ``parse_message``,
``scan_row_message``, ``row_message_is_valid``, ``TupleData.values`` and
``load_tuple_wire`` all go through it. A damaged part must give the same verdict, reason
and offset whichever mode meets it, and a loader's own error must pass through unchanged.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decoder import (
    UNCHANGED_TOAST,
    ColumnKind,
    ColumnValue,
    Insert,
    MalformedMessageError,
    Oid,
    ProtocolOptions,
    TupleData,
    load_tuple_wire,
    parse_message,
)
from decoder.messages import split_columns
from decoder.tupledata import TupleDataError, skip_tuple, walk_tuple
from tests.support.decoder_data import tuples
from tests.support.pgoutput_builder import encode_message, encode_tuple

OPTIONS = ProtocolOptions(1)


def _identity(data: bytes) -> object:
    return data


def _verdict(call):
    try:
        return ("ok", call())
    except TupleDataError as error:
        return ("error", error.reason, error.offset)


@given(tuples, st.binary(max_size=3))
def test_validating_and_building_walks_agree_on_a_sound_part(data, tail):
    part = b"\x00" + encode_tuple(data) + tail  # one leading byte: offsets are the buffer's
    built: list[object] = []
    count = len(data.values)
    end = walk_tuple(part, 1, built, [_identity] * count, [_identity] * count, None, "u")
    assert skip_tuple(part, 1) == end == len(part) - len(tail)
    assert split_columns(part, 1) == (data.values, end)
    expected = [
        None if v.kind is ColumnKind.NULL else "u" if v.data is None else v.data
        for v in data.values
    ]
    assert built == expected


@given(
    tuples,
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(0, 30),
)
def test_every_walk_gives_the_same_verdict_on_a_damaged_part(data, damage, cut):
    part = bytearray(encode_tuple(data))
    for position, value in damage:
        if part:
            part[position % len(part)] = value
    damaged = bytes(part[: max(0, len(part) - cut)])
    count = int.from_bytes(damaged[:2], "big") if len(damaged) >= 2 else 0
    skip = _verdict(lambda: skip_tuple(damaged, 0))
    split = _verdict(lambda: split_columns(damaged, 0)[1])
    ignore = [_identity] * count
    build = _verdict(lambda: walk_tuple(damaged, 0, [], ignore, ignore, None, None))
    assert skip == split == build


def test_a_damaged_part_is_named_with_its_offset_by_the_parser():
    message = encode_message(
        Insert(
            xid=None,
            relation_id=Oid(7),
            new_tuple=TupleData(
                (ColumnValue(ColumnKind.NULL), ColumnValue(ColumnKind.TEXT, b"ab"))
            ),
        ),
        OPTIONS,
    )
    assert message[6:] == b"\x00\x02nt\x00\x00\x00\x02ab"
    cases = {
        message[:7]: "message ends before the TupleData column count: it needs 2 bytes but 1",
        message[:9]: "message ends before the status byte of column 1",
        message[:11]: "message ends before the length of column 1: it needs 4 bytes but 1",
        message[:-1]: "message ends before the value of column 1: it needs 2 bytes but 1",
        message[:9] + b"x" + message[10:]: "unknown column status byte 0x78",
        message[:10] + b"\xff\xff\xff\xfe" + message[14:]: "column 1 has a negative length -2",
    }
    offsets = {message[:7]: 6, message[:9]: 9, message[:11]: 10, message[:-1]: 14}
    for damaged, reason in cases.items():
        with pytest.raises(MalformedMessageError, match=reason) as caught:
            parse_message(damaged, options=OPTIONS, in_stream=False)
        assert caught.value.message_type == "INSERT"
        assert caught.value.offset == offsets.get(damaged, 9 if b"x" in damaged else 10)


def test_a_loaders_own_error_passes_through_the_walk_unchanged():
    part = encode_tuple(
        TupleData((ColumnValue(ColumnKind.TEXT, b"1"), ColumnValue(ColumnKind.NULL)))
    )

    def failing(data: bytes) -> object:
        raise IndexError("the loader's own")

    with pytest.raises(IndexError, match="the loader's own"):
        load_tuple_wire(part, 0, [failing, failing], [failing, failing])
    assert load_tuple_wire(part, 0, [int, int], [int, int]) == [1, None]
    unchanged = encode_tuple(TupleData((ColumnValue(ColumnKind.UNCHANGED_TOAST),)))
    assert load_tuple_wire(unchanged, 0, [int], [int]) == [UNCHANGED_TOAST]
