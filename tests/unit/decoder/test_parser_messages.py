"""parse_message on hand-built bytes: every message, every layout switch, every rejection.

Deliberate twins that ``duplicates`` reports as pairs, each as ``proto.c`` and
``logicalproto.h`` have it: every pgoutput message is its own frozen dataclass in
``decoder/messages.py`` (``Prepare`` and ``StreamPrepare`` have the same fields; a message
type is a type, not a flag), with its own reader in ``decoder/parser.py`` ending in that
class's constructor (``_read_prepare_common``, ``_parse_commit_prepared``,
``_parse_rollback_prepared``, ``_parse_begin_prepare`` ...). The message classes are listed
again, in parallel, by the imports of ``decoder/parser.py``, ``decoder/transitions.py``
(``EVENTS``) and ``decoder/assembler.py`` (its ``match``, one case a message ending in
``assert_never``) and by ``decoder/__init__.py``'s re-exports: each of them handles every
message, and the tests here and in ``test_assembler_table.py`` go through every one.
"""

from __future__ import annotations

import struct

import pytest

from decoder import (
    Begin,
    BeginPrepare,
    ColumnKind,
    ColumnValue,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    MalformedMessageError,
    Origin,
    Prepare,
    ProtocolOptions,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
    parse_message,
)
from tests.support.pgoutput_builder import encode_message, text_tuple

V1 = ProtocolOptions(1)
V2 = ProtocolOptions(2, "on")
V3 = ProtocolOptions(3, "on", two_phase=True)
V4_PARALLEL = ProtocolOptions(4, "parallel", two_phase=True)
V4_ON = ProtocolOptions(4, "on", two_phase=True)

ROW = TupleData(
    (
        ColumnValue(ColumnKind.TEXT, b"42"),
        ColumnValue(ColumnKind.NULL),
        ColumnValue(ColumnKind.UNCHANGED_TOAST),
        ColumnValue(ColumnKind.BINARY, b"\x00\x01"),
        ColumnValue(ColumnKind.TEXT, b""),
    )
)

# One example of every message outside a stream block (no xid prefix).
PLAIN_MESSAGES = [
    Begin(final_lsn=0x16B374D848, commit_time=-7, xid=725),
    Commit(flags=0, commit_lsn=0x16B374D848, end_lsn=0x16B374D880, commit_time=5),
    Origin(origin_lsn=0xABCDEF, name="elsewhere"),
    Origin(origin_lsn=0, name=""),
    Relation(
        xid=None,
        relation_id=16384,
        namespace="",
        relation_name="pg_stats_ish",
        replica_identity="f",
        columns=(
            RelationColumn(1, "id", 23, -1),
            RelationColumn(0, "naïve", 1043, 36),
        ),
    ),
    Relation(
        xid=None,
        relation_id=1,
        namespace="s",
        relation_name="empty",
        replica_identity="n",
        columns=(),
    ),
    Type(xid=None, type_oid=16390, namespace="public", type_name="mood"),
    Insert(xid=None, relation_id=16384, new_tuple=ROW),
    Insert(xid=None, relation_id=16384, new_tuple=TupleData(())),
    Update(xid=None, relation_id=16384, old_kind=None, old_tuple=None, new_tuple=ROW),
    Update(xid=None, relation_id=16384, old_kind="K", old_tuple=text_tuple("1"), new_tuple=ROW),
    Update(xid=None, relation_id=16384, old_kind="O", old_tuple=ROW, new_tuple=ROW),
    Delete(xid=None, relation_id=16384, old_kind="K", old_tuple=text_tuple("1", None)),
    Delete(xid=None, relation_id=16384, old_kind="O", old_tuple=ROW),
    Truncate(xid=None, options=3, relation_ids=(16384, 16390)),
    Truncate(xid=None, options=0, relation_ids=()),
    LogicalMessage(xid=None, flags=0, lsn=0x99, prefix="p", content=b"\x00bytes"),
    LogicalMessage(xid=None, flags=1, lsn=0x99, prefix="", content=b""),
    BeginPrepare(prepare_lsn=0x10, end_lsn=0x18, prepare_time=1, xid=9, gid="g1"),
    Prepare(flags=0, prepare_lsn=0x10, end_lsn=0x18, prepare_time=1, xid=9, gid="g1"),
    CommitPrepared(flags=0, commit_lsn=0x20, end_lsn=0x28, commit_time=2, xid=9, gid="g1"),
    RollbackPrepared(
        flags=0,
        prepare_end_lsn=0x18,
        rollback_end_lsn=0x30,
        prepare_time=1,
        rollback_time=3,
        xid=9,
        gid="g1",
    ),
    StreamStart(xid=800, first_segment=True),
    StreamStart(xid=800, first_segment=False),
    StreamStop(),
    StreamCommit(xid=800, flags=0, commit_lsn=0x40, end_lsn=0x48, commit_time=4),
    StreamPrepare(flags=0, prepare_lsn=0x10, end_lsn=0x18, prepare_time=1, xid=800, gid="g"),
]

STREAMED_MESSAGES = [
    Relation(
        xid=801,
        relation_id=7,
        namespace="public",
        relation_name="t",
        replica_identity="d",
        columns=(RelationColumn(1, "id", 23, -1),),
    ),
    Type(xid=801, type_oid=16390, namespace="public", type_name="mood"),
    Insert(xid=801, relation_id=7, new_tuple=ROW),
    Update(xid=800, relation_id=7, old_kind="K", old_tuple=text_tuple("1"), new_tuple=ROW),
    Delete(xid=800, relation_id=7, old_kind="O", old_tuple=ROW),
    Truncate(xid=802, options=1, relation_ids=(7,)),
    LogicalMessage(xid=800, flags=1, lsn=0x99, prefix="p", content=b"c"),
]


@pytest.mark.parametrize("message", PLAIN_MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_outside_a_stream_block_round_trips(message):
    options = V4_ON
    assert parse_message(encode_message(message, options), options=options, in_stream=False) == (
        message
    )


@pytest.mark.parametrize("message", STREAMED_MESSAGES, ids=lambda m: type(m).__name__)
def test_data_and_schema_messages_inside_a_stream_block_start_with_the_subxid(message):
    encoded = encode_message(message, V2)
    assert struct.unpack_from(">I", encoded, 1)[0] == message.xid
    assert parse_message(encoded, options=V2, in_stream=True) == message


def test_the_same_insert_bytes_read_as_a_different_message_depending_on_in_stream():
    encoded = encode_message(Insert(xid=None, relation_id=7, new_tuple=ROW), V2)
    with pytest.raises(MalformedMessageError):
        parse_message(encoded, options=V2, in_stream=True)


def test_stream_abort_has_abort_lsn_and_time_only_with_parallel_streaming_on_v4():
    with_info = StreamAbort(xid=5, subxid=6, abort_lsn=0x77, abort_time=8)
    encoded = encode_message(with_info, V4_PARALLEL)
    assert len(encoded) == 1 + 4 + 4 + 8 + 8
    assert parse_message(encoded, options=V4_PARALLEL, in_stream=False) == with_info

    without = StreamAbort(xid=5, subxid=6)
    for options in (V2, V3, V4_ON):
        encoded = encode_message(without, options)
        assert len(encoded) == 9
        assert parse_message(encoded, options=options, in_stream=False) == without
    with pytest.raises(MalformedMessageError, match="abort_lsn and abort_time"):
        parse_message(encode_message(without, V2), options=V4_PARALLEL, in_stream=False)


def test_stream_messages_are_unknown_in_protocol_1():
    for message in (StreamStart(xid=1, first_segment=True), StreamStop()):
        with pytest.raises(MalformedMessageError, match="from protocol version 2") as info:
            parse_message(encode_message(message, V2), options=V1, in_stream=False)
        assert info.value.offset == 0


def test_two_phase_messages_are_accepted_in_protocol_1_because_two_phase_slots_send_them():
    message = BeginPrepare(prepare_lsn=0x10, end_lsn=0x18, prepare_time=1, xid=9, gid="g")
    assert parse_message(encode_message(message), options=V1, in_stream=False) == message


def test_unknown_column_status_byte_names_message_offset_and_byte():
    encoded = bytearray(encode_message(Insert(xid=None, relation_id=1, new_tuple=ROW), V1))
    # tag(1) relation_id(4) 'N'(1) column count(2) -> the first status byte is at offset 8,
    # and the second column (a NULL, one status byte) follows the 2-byte text "42".
    assert encoded[8:9] == b"t"
    encoded[8 + 1 + 4 + 2] = ord("x")
    with pytest.raises(MalformedMessageError) as info:
        parse_message(bytes(encoded), options=V1, in_stream=False)
    assert str(info.value) == (
        "cannot decode INSERT message at offset 15: unknown column status byte 0x78"
    )


def _with_byte(message, offset, value, options=V4_PARALLEL):
    encoded = bytearray(encode_message(message, options))
    encoded[offset] = value
    return bytes(encoded)


@pytest.mark.parametrize(
    ("payload", "message_type", "offset", "reason"),
    [
        (b"", "UNKNOWN", 0, "empty message"),
        (b"Z", "UNKNOWN", 0, "unknown message tag 0x5a"),
        (_with_byte(PLAIN_MESSAGES[1], 1, 1), "COMMIT", 1, "unrecognized flags 1"),
        (_with_byte(PLAIN_MESSAGES[19], 1, 2), "PREPARE", 1, "unrecognized flags 2"),
        (_with_byte(PLAIN_MESSAGES[20], 1, 1), "COMMIT PREPARED", 1, "unrecognized flags"),
        (_with_byte(PLAIN_MESSAGES[21], 1, 1), "ROLLBACK PREPARED", 1, "unrecognized flags"),
        (_with_byte(PLAIN_MESSAGES[25], 5, 1), "STREAM COMMIT", 5, "unrecognized flags"),
        (_with_byte(PLAIN_MESSAGES[26], 1, 1), "STREAM PREPARE", 1, "unrecognized flags"),
        (_with_byte(PLAIN_MESSAGES[16], 1, 2), "MESSAGE", 1, "expected 0 or 1"),
        (_with_byte(PLAIN_MESSAGES[22], 5, 2), "STREAM START", 5, "first_segment"),
        (_with_byte(PLAIN_MESSAGES[7], 5, ord("X")), "INSERT", 5, "expected new tuple"),
        (_with_byte(PLAIN_MESSAGES[9], 5, ord("X")), "UPDATE", 5, "'K', 'O' or 'N'"),
        (_with_byte(PLAIN_MESSAGES[12], 5, ord("N")), "DELETE", 5, "'K' or 'O'"),
        (_with_byte(PLAIN_MESSAGES[14], 5, 4), "TRUNCATE", 5, "unknown TRUNCATE option"),
        (_with_byte(PLAIN_MESSAGES[15], 1, 0xFF), "TRUNCATE", 1, "negative relation count"),
        (encode_message(PLAIN_MESSAGES[0]) + b"\0", "BEGIN", 21, "1 unexpected bytes"),
        (encode_message(StreamStop()) + b"x", "STREAM STOP", 1, "unexpected bytes"),
    ],
)
def test_bytes_proto_c_would_reject_raise_malformed_message(payload, message_type, offset, reason):
    with pytest.raises(MalformedMessageError, match=reason) as info:
        parse_message(payload, options=V4_PARALLEL, in_stream=False)
    assert info.value.message_type == message_type
    assert info.value.offset == offset


def test_update_with_old_tuple_must_continue_with_a_new_tuple():
    message = PLAIN_MESSAGES[10]  # UPDATE with a 'K' old tuple
    encoded = bytearray(encode_message(message, V1))
    new_marker = 1 + 4 + 1 + 2 + 1 + 4 + 1  # tag, relid, 'K', count, 't', len, "1"
    assert encoded[new_marker] == ord("N")
    encoded[new_marker] = ord("O")
    with pytest.raises(MalformedMessageError, match="expected new tuple marker 'N'") as info:
        parse_message(bytes(encoded), options=V1, in_stream=False)
    assert info.value.offset == new_marker


def test_unset_lsns_and_transaction_ids_are_rejected_like_proto_c():
    cases = [
        (Begin(final_lsn=0, commit_time=0, xid=1), "final_lsn is not set"),
        (
            BeginPrepare(prepare_lsn=0, end_lsn=8, prepare_time=0, xid=1, gid="g"),
            "prepare_lsn is not set",
        ),
        (
            Prepare(flags=0, prepare_lsn=8, end_lsn=0, prepare_time=0, xid=1, gid="g"),
            "end_lsn is not set",
        ),
        (
            StreamPrepare(flags=0, prepare_lsn=8, end_lsn=9, prepare_time=0, xid=0, gid="g"),
            "transaction id is not set",
        ),
        (
            CommitPrepared(flags=0, commit_lsn=0, end_lsn=9, commit_time=0, xid=1, gid="g"),
            "commit_lsn is not set",
        ),
        (
            RollbackPrepared(
                flags=0,
                prepare_end_lsn=0,
                rollback_end_lsn=9,
                prepare_time=0,
                rollback_time=0,
                xid=1,
                gid="g",
            ),
            "prepare_end_lsn is not set",
        ),
        (StreamStart(xid=0, first_segment=True), "transaction id is not set"),
        (StreamAbort(xid=1, subxid=0), "subtransaction id is not set"),
    ]
    for message, reason in cases:
        with pytest.raises(MalformedMessageError, match=reason):
            parse_message(encode_message(message, V3), options=V3, in_stream=False)


def test_a_zero_xid_prefix_inside_a_stream_block_is_rejected():
    encoded = encode_message(Insert(xid=0, relation_id=7, new_tuple=ROW), V2)
    with pytest.raises(MalformedMessageError, match="invalid transaction ID 0") as info:
        parse_message(encoded, options=V2, in_stream=True)
    assert info.value.offset == 1


def test_negative_column_length_is_rejected():
    encoded = b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">H", 1) + b"t" + b"\xff" * 4
    with pytest.raises(MalformedMessageError, match="negative length -1") as info:
        parse_message(encoded, options=V1, in_stream=False)
    assert info.value.offset == 9


def test_unknown_replica_identity_is_rejected():
    message = PLAIN_MESSAGES[5]  # RELATION s.empty
    encoded = bytearray(encode_message(message, V1))
    identity_offset = 1 + 4 + len(b"s\0") + len(b"empty\0")
    encoded[identity_offset] = ord("x")
    with pytest.raises(MalformedMessageError, match="unknown replica identity 'x'") as info:
        parse_message(bytes(encoded), options=V1, in_stream=False)
    assert info.value.offset == identity_offset


def test_relation_reports_schema_key_columns_and_pg_catalog_for_an_empty_namespace():
    relation = PLAIN_MESSAGES[4]
    assert isinstance(relation, Relation)
    assert relation.schema_name == "pg_catalog"
    assert relation.qualified_name == "pg_catalog.pg_stats_ish"
    assert [column.name for column in relation.key_columns] == ["id"]


def test_a_memoryview_payload_parses_like_bytes():
    encoded = encode_message(PLAIN_MESSAGES[7], V1)
    assert parse_message(memoryview(encoded), options=V1, in_stream=False) == PLAIN_MESSAGES[7]
