"""Value conversion: psycopg loaders by type OID, and the text forms we produce ourselves.

The interval pairs below were printed by PostgreSQL 18 (``interval_send`` next to
``::text``); a run over 3,000 random intervals found no difference either.
"""

from __future__ import annotations

import struct

import pytest
from psycopg import postgres

from decoder import (
    UNCHANGED_TOAST,
    ColumnKind,
    ColumnValue,
    EnumType,
    MalformedMessageError,
    TupleData,
    UnknownBinaryFormatError,
    ValueDecoder,
    decode_tuple,
)
from decoder.values import format_interval
from tests.support.pgoutput_builder import INT4_OID, TEXT_OID, relation

PG18_INTERVALS = [
    ((0, 0, 0), "00:00:00"),
    ((0, 1, 0), "1 day"),
    ((0, -1, 0), "-1 days"),
    ((0, 0, 1), "1 mon"),
    ((0, 0, 2), "2 mons"),
    ((0, 0, 12), "1 year"),
    ((-14706000000, 3, -14), "-1 years -2 mons +3 days -04:05:06"),
    ((1, 0, 0), "00:00:00.000001"),
    ((360000000000, 0, 0), "100:00:00"),
    ((-500000, 0, 0), "-00:00:00.5"),
    ((-1000000, 0, 12), "1 year -00:00:01"),
    ((0, 1, -1), "-1 mons +1 day"),
    ((9223372036854775807, 2147483647, 2147483647), "infinity"),
    ((-9223372036854775808, -2147483648, -2147483648), "-infinity"),
    ((1500000, 0, 0), "00:00:01.5"),
    ((3600000000, -3, 0), "-3 days +01:00:00"),
    ((0, 0, 2136000000), "178000000 years"),
    ((0, 0, -12), "-1 years"),
]

INTERVAL = postgres.types["interval"]
JSONB = postgres.types["jsonb"]
JSON = postgres.types["json"]


@pytest.mark.parametrize(("fields", "text"), PG18_INTERVALS, ids=[t for _, t in PG18_INTERVALS])
def test_binary_interval_renders_exactly_as_postgresql_prints_it(fields, text):
    assert format_interval(*fields) == text
    binary = struct.pack(">qii", *fields)
    assert ValueDecoder().decode_value(INTERVAL.oid, ColumnKind.BINARY, binary) == text


def test_text_interval_is_kept_as_postgresql_text():
    decoder = ValueDecoder()
    assert decoder.decode_value(INTERVAL.oid, ColumnKind.TEXT, b"1 mon 2 days") == "1 mon 2 days"


def test_json_and_jsonb_are_their_text_in_both_formats():
    decoder = ValueDecoder()
    doc = b'{"b": 1, "a": [1.50]}'
    assert decoder.decode_value(JSON.oid, ColumnKind.TEXT, doc) == doc.decode()
    assert decoder.decode_value(JSON.oid, ColumnKind.BINARY, doc) == doc.decode()
    assert decoder.decode_value(JSONB.oid, ColumnKind.TEXT, doc) == doc.decode()
    assert decoder.decode_value(JSONB.oid, ColumnKind.BINARY, b"\x01" + doc) == doc.decode()
    with pytest.raises(ValueError, match="jsonb binary format version"):
        decoder.decode_value(JSONB.oid, ColumnKind.BINARY, b"\x02" + doc)


def test_arrays_of_text_kept_types_are_lists_of_text_in_both_formats():
    decoder = ValueDecoder()
    text = decoder.decode_value(INTERVAL.array_oid, ColumnKind.TEXT, b'{"1 day","-00:00:01"}')
    assert text == ["1 day", "-00:00:01"]
    # Binary array: ndim, has-null flag, element OID, then (length, lower bound), elements.
    elements = [struct.pack(">qii", 0, 1, 0), struct.pack(">qii", -1_000_000, 0, 0)]
    binary = struct.pack(">iiIii", 1, 0, INTERVAL.oid, 2, 1) + b"".join(
        struct.pack(">i", len(e)) + e for e in elements
    )
    assert decoder.decode_value(INTERVAL.array_oid, ColumnKind.BINARY, binary) == text


def test_decode_tuple_maps_null_and_unchanged_toast_and_uses_column_types():
    rel = relation(1, "t", (("id", INT4_OID, True), ("note", TEXT_OID), ("big", TEXT_OID)))
    data = TupleData(
        (
            ColumnValue(ColumnKind.BINARY, struct.pack(">i", -5)),
            ColumnValue(ColumnKind.NULL),
            ColumnValue(ColumnKind.UNCHANGED_TOAST),
        )
    )
    assert decode_tuple(rel, data) == (-5, None, UNCHANGED_TOAST)
    assert repr(UNCHANGED_TOAST) == "UNCHANGED_TOAST"


def test_user_type_oids_are_text_in_text_mode_and_need_a_description_in_binary_mode():
    decoder = ValueDecoder()
    assert decoder.decode_value(16390, ColumnKind.TEXT, b"happy") == "happy"
    with pytest.raises(UnknownBinaryFormatError, match=r"type OID 16390.*no source catalog"):
        decoder.decode_value(16390, ColumnKind.BINARY, b"happy")


def test_described_user_types_load_as_their_text_form_in_binary_mode():
    described = {16390: EnumType(16390, "public", "mood")}
    decoder = ValueDecoder(described.get)
    assert decoder.decode_value(16390, ColumnKind.BINARY, b"happy") == "happy"
    assert decoder.binary_text_reader(16390) is not None
    # psycopg loads builtin types itself.
    assert decoder.binary_text_reader(INT4_OID) is None


def test_a_tuple_with_another_column_count_than_its_relation_is_malformed():
    rel = relation(1, "t", (("id", INT4_OID, True),))
    with pytest.raises(MalformedMessageError, match="tuple has 2 columns but relation"):
        decode_tuple(rel, TupleData((ColumnValue(ColumnKind.NULL),) * 2))
