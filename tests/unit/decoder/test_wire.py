"""The bounds-checked reader: every field type, and errors that name offset and field."""

from __future__ import annotations

import struct

import pytest

from decoder import MalformedMessageError
from decoder.wire import Reader


def test_reader_reads_big_endian_integers_in_order():
    buf = struct.pack(">BhHiIqQ", 7, -2, 65535, -3, 4_000_000_000, -5, 2**64 - 1)
    reader = Reader(buf, 0, "TEST")
    assert reader.u8("a") == 7
    assert reader.i16("b") == -2
    assert reader.u16("c") == 65535
    assert reader.i32("d") == -3
    assert reader.u32("e") == 4_000_000_000
    assert reader.i64("f") == -5
    assert reader.u64("g") == 2**64 - 1
    reader.expect_end()


def test_reader_accepts_a_memoryview_and_copies_it_to_bytes():
    reader = Reader(memoryview(b"xab\0"), 1, "TEST")
    assert isinstance(reader.buf, bytes)
    assert reader.cstring("name") == "ab"


def test_cstring_decodes_utf8_and_stops_after_the_nul():
    reader = Reader("héllo\0rest".encode(), 0, "TEST")
    assert reader.cstring("name") == "héllo"
    assert reader.read_bytes(4, "rest") == b"rest"


def test_short_integer_names_the_field_offset_and_message_type():
    reader = Reader(b"\x01\x02\x03", 1, "INSERT")
    with pytest.raises(MalformedMessageError) as info:
        reader.u32("relation_id")
    assert info.value.offset == 1
    assert info.value.message_type == "INSERT"
    assert "relation_id" in str(info.value)
    assert str(info.value).startswith("cannot decode INSERT message at offset 1:")


def test_unterminated_string_is_malformed_at_its_start():
    reader = Reader(b"Rabc", 1, "RELATION")
    with pytest.raises(MalformedMessageError, match="not terminated") as info:
        reader.cstring("the namespace")
    assert info.value.offset == 1


def test_invalid_utf8_is_malformed_at_the_bad_byte():
    reader = Reader(b"Rab\xff\0", 1, "RELATION")
    with pytest.raises(MalformedMessageError, match="UTF-8") as info:
        reader.cstring("the namespace")
    assert info.value.offset == 3


def test_negative_or_too_long_byte_counts_are_malformed():
    reader = Reader(b"abc", 0, "MESSAGE")
    with pytest.raises(MalformedMessageError, match="negative"):
        reader.read_bytes(-1, "the content")
    with pytest.raises(MalformedMessageError, match="needs 4 bytes but 3 remain"):
        reader.read_bytes(4, "the content")


def test_unpack_reads_a_fixed_group_or_fails_without_moving():
    reader = Reader(b"\x00\x01\x00", 0, "TEST")
    with pytest.raises(MalformedMessageError):
        reader.unpack(struct.Struct(">HH"), "two shorts")
    assert reader.pos == 0
    assert reader.unpack(struct.Struct(">H"), "one short") == (1,)


def test_expect_end_reports_trailing_bytes():
    reader = Reader(b"ab", 1, "STREAM STOP")
    with pytest.raises(MalformedMessageError, match="1 unexpected bytes") as info:
        reader.expect_end()
    assert info.value.offset == 1
