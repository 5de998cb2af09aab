"""The decoder's fast paths give exactly what the general paths give.

The hot path skips work the general path does (see
``docs/decisions/0035-decoder-fast-paths.md``): row messages are validated optimistically,
replayed without splitting their columns, and several frozen dataclasses are built without
their ``__init__``. Each shortcut is pinned here to its general counterpart, on real
payloads, damaged payloads and generated messages.
"""

from __future__ import annotations

import dataclasses
import pickle
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decoder import (
    UNCHANGED_TOAST,
    ColumnKind,
    ColumnValue,
    DecodeError,
    Delete,
    FileChangeBuffer,
    Insert,
    MalformedMessageError,
    Oid,
    ProtocolOptions,
    SpoolError,
    TupleData,
    Update,
    ValueDecoder,
    XLogData,
    decode_tuple,
    parse_copy_data,
    parse_message,
    read_xlog_data,
)
from decoder.parser import row_message_is_valid, row_parts, scan_row_message
from tests.support.decoder_data import ROW_PAYLOADS, damaged, tuples
from tests.support.pgoutput_builder import INT4_OID, TEXT_OID, encode_message, relation

STREAM_OPTIONS = ProtocolOptions(2, "on")


def _scan_accepts(data: bytes, in_stream: bool) -> bool:
    try:
        return scan_row_message(data, in_stream=in_stream) is not None
    except DecodeError:
        return False


def test_every_real_row_payload_takes_the_fast_path():
    assert ROW_PAYLOADS
    for payload, _, in_stream in ROW_PAYLOADS:
        assert row_message_is_valid(payload, in_stream), payload


@given(
    st.sampled_from(ROW_PAYLOADS),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.sampled_from(["replace", "insert", "delete"]),
    st.booleans(),
)
def test_fast_row_validation_never_accepts_what_the_full_scan_rejects(golden, damage, how, flip):
    payload, _, in_stream = golden
    data = damaged(payload, damage, how)
    stream = in_stream != flip
    if row_message_is_valid(data, stream):
        assert _scan_accepts(data, stream)


@given(st.sampled_from("IUDBCR"), st.binary(max_size=60), st.booleans())
def test_fast_row_validation_never_accepts_random_bodies_the_full_scan_rejects(
    tag, body, in_stream
):
    data = tag.encode() + body
    if row_message_is_valid(data, in_stream):
        assert _scan_accepts(data, in_stream)


row_messages = st.one_of(
    st.builds(Insert, xid=st.none(), relation_id=st.integers(0, 2**32 - 1), new_tuple=tuples),
    st.builds(
        Update,
        xid=st.none(),
        relation_id=st.integers(0, 2**32 - 1),
        old_kind=st.none(),
        old_tuple=st.none(),
        new_tuple=tuples,
    ),
    st.builds(
        Update,
        xid=st.none(),
        relation_id=st.integers(0, 2**32 - 1),
        old_kind=st.sampled_from(["K", "O"]),
        old_tuple=tuples,
        new_tuple=tuples,
    ),
    st.builds(
        Delete,
        xid=st.none(),
        relation_id=st.integers(0, 2**32 - 1),
        old_kind=st.sampled_from(["K", "O"]),
        old_tuple=tuples,
    ),
)


@given(row_messages, st.one_of(st.none(), st.integers(1, 2**32 - 1)))
def test_row_parts_read_back_what_parse_message_reads(message, xid):
    message = dataclasses.replace(message, xid=xid)
    in_stream = xid is not None
    data = encode_message(message, STREAM_OPTIONS)
    assert row_message_is_valid(data, in_stream)
    relation_id, op, old_kind, old, new = row_parts(data, in_stream)
    parsed = parse_message(data, options=STREAM_OPTIONS, in_stream=in_stream)
    assert relation_id == message.relation_id
    assert op == type(message).__name__.lower()
    assert old_kind == getattr(parsed, "old_kind", None)
    assert old == getattr(parsed, "old_tuple", None)
    assert new == getattr(parsed, "new_tuple", None)


def test_a_wire_tuple_is_indistinguishable_from_a_built_one():
    built = TupleData(
        (
            ColumnValue(ColumnKind.TEXT, b"42"),
            ColumnValue(ColumnKind.NULL),
            ColumnValue(ColumnKind.UNCHANGED_TOAST),
            ColumnValue(ColumnKind.BINARY, b"\x00\x01"),
        )
    )
    message = encode_message(Insert(xid=None, relation_id=Oid(7), new_tuple=built), STREAM_OPTIONS)
    wire = TupleData.from_wire(message, 6)
    assert wire.wire == (message, 6)
    assert wire == built
    assert built == wire
    assert hash(wire) == hash(built)
    assert repr(wire) == repr(built)
    assert wire.wire is None  # split once, then kept
    copy = pickle.loads(pickle.dumps(TupleData.from_wire(message, 6)))
    assert type(copy) is TupleData
    assert copy == built
    match TupleData.from_wire(message, 6):
        case TupleData(values=values):
            assert values == built.values


def test_tuple_data_is_immutable():
    data = TupleData((ColumnValue(ColumnKind.NULL),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.values = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del data.values


def test_a_damaged_wire_tuple_raises_malformed_message_when_split():
    damaged = TupleData.from_wire(b"I\x00\x00\x00\x07N\x00\x02t\x00\x00\x00\x09ab", 6)
    with pytest.raises(MalformedMessageError, match="damaged"):
        _ = damaged.values


def _wire(data: TupleData) -> TupleData:
    message = encode_message(Insert(xid=None, relation_id=Oid(1), new_tuple=data), STREAM_OPTIONS)
    return TupleData.from_wire(message, 6)


def test_values_decode_from_the_wire_exactly_as_from_built_columns():
    rel = relation(
        1, "t", (("id", INT4_OID, True), ("note", TEXT_OID), ("big", TEXT_OID), ("n", INT4_OID))
    )
    other = relation(2, "u", (("id", INT4_OID, True),))
    built = TupleData(
        (
            ColumnValue(ColumnKind.BINARY, struct.pack(">i", -5)),
            ColumnValue(ColumnKind.NULL),
            ColumnValue(ColumnKind.UNCHANGED_TOAST),
            ColumnValue(ColumnKind.TEXT, b"17"),
        )
    )
    decoder = ValueDecoder()
    expected = decoder.decode_tuple(rel, built)
    assert expected == (-5, None, UNCHANGED_TOAST, 17)
    assert decoder.decode_tuple(rel, _wire(built)) == expected
    # Alternating relations must not reuse each other's loaders.
    key = TupleData((ColumnValue(ColumnKind.TEXT, b"9"),))
    assert decoder.decode_tuple(other, _wire(key)) == (9,)
    assert decoder.decode_tuple(rel, _wire(built)) == expected


def test_a_wire_tuple_with_another_column_count_than_its_relation_is_malformed():
    rel = relation(1, "t", (("id", INT4_OID, True),))
    with pytest.raises(MalformedMessageError, match="tuple has 2 columns but relation"):
        decode_tuple(rel, _wire(TupleData((ColumnValue(ColumnKind.NULL),) * 2)))


def test_read_xlog_data_splits_what_parse_copy_data_parses():
    frame = b"w" + (7).to_bytes(8, "big") + (8).to_bytes(8, "big") + (9).to_bytes(8, "big") + b"IX"
    parsed = parse_copy_data(frame)
    assert isinstance(parsed, XLogData)
    assert read_xlog_data(frame) == (parsed.wal_start, parsed.payload)


def test_read_xlog_data_leaves_keepalives_and_damaged_frames_to_parse_copy_data():
    keepalive = b"k" + bytes(17)
    assert read_xlog_data(keepalive) is None
    assert read_xlog_data(b"w" + bytes(10)) is None
    assert read_xlog_data(b"") is None
    with pytest.raises(MalformedMessageError):
        parse_copy_data(b"w" + bytes(10))


# Record sizes around the spill file's 64 KiB write and read blocks, including records
# larger than a block and records whose length prefix straddles a block boundary.
BLOCK_RECORDS = [
    bytes([i % 251]) * size
    for i, size in enumerate([0, 1, 65_531, 65_532, 65_536, 3, 200_000, 7, 65_535, 1, 131_072, 12])
]


def test_a_spilled_buffer_reads_back_records_of_any_size_across_its_blocks(tmp_path):
    buffer = FileChangeBuffer(tmp_path, 0)
    for record in BLOCK_RECORDS:
        buffer.append(record)
    assert list(buffer) == BLOCK_RECORDS
    mark = buffer.mark()
    buffer.append(b"dropped")
    buffer.truncate(mark)
    buffer.append(b"kept")
    assert list(buffer) == [*BLOCK_RECORDS, b"kept"]
    assert buffer.size_bytes == sum(4 + len(r) for r in BLOCK_RECORDS) + 8
    buffer.close()


def test_a_spool_file_shorter_than_its_records_is_a_spool_error(tmp_path):
    buffer = FileChangeBuffer(tmp_path, 0)
    for record in BLOCK_RECORDS:
        buffer.append(record)
    list(buffer)  # writes the staged block
    assert buffer.path is not None
    with buffer.path.open("r+b") as file:
        file.truncate(buffer.size_bytes - 5)
    with pytest.raises(SpoolError, match="shorter than expected") as failed:
        list(buffer)
    assert failed.value.reason == "io_error"
    buffer.close()
