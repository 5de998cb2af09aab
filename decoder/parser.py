"""pgoutput message bytes to typed messages: a pure function, one message per call.

Theory of operation: ``parse_message`` reads the tag byte, picks the reader for that tag
and reads the fields in the order ``proto.c`` (``logicalrep_write_*``) writes them. Two
things besides the tag decide the layout, and both come from the caller:

* ``in_stream``: inside a STREAM START ... STREAM STOP block, RELATION, TYPE, INSERT,
  UPDATE, DELETE, TRUNCATE and MESSAGE start with the (sub)transaction id; outside a block
  they do not (``pgoutput.c`` passes ``InvalidTransactionId`` and the writer skips it).
* ``options``: stream tags are unknown below protocol 2 (the server cannot stream to such a
  client), and STREAM ABORT carries ``abort_lsn``/``abort_time`` only with ``streaming
  'parallel'`` on protocol 4 (``write_abort_info`` in ``pgoutput_stream_abort``).

Validation follows ``proto.c`` and the apply worker: unknown tags, non-zero flags where
the manual says ``Int8(0)``, unset LSNs and transaction ids that ``logicalrep_read_*``
rejects, unknown column status bytes and unknown UPDATE/DELETE sub-tags are errors, and
so are bytes left over after a complete message. Every failure is a
``MalformedMessageError`` naming the message type and the offset; no other exception
escapes for any input (property-tested in ``tests/unit/decoder``).

Column values stay raw bytes (``ColumnValue``); they are converted only once the relation
is known, at replay (``values.py``), as worker.c does.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, Literal, TypeVar

from decoder.changes import RowOperation
from decoder.errors import MalformedMessageError
from decoder.lsn import Lsn, Oid, PgTimestamp, Xid
from decoder.messages import (
    MESSAGE_TYPE_NAMES,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Prepare,
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
    split_columns,
)
from decoder.native import COMPILED
from decoder.options import (
    STREAM_PROTOCOL_VERSION,
    ProtocolOptions,
)
from decoder.tupledata import TupleDataError, skip_tuple, walk_tuple_reference
from decoder.wire import U32, Reader

_BEGIN: Final = struct.Struct(">QqI")
_COMMIT: Final = struct.Struct(">BQQq")
_PREPARE_COMMON: Final = struct.Struct(">BQQqI")
_BEGIN_PREPARE: Final = struct.Struct(">QQqI")
_ROLLBACK_PREPARED: Final = struct.Struct(">BQQqqI")
_STREAM_START: Final = struct.Struct(">IB")
_STREAM_COMMIT: Final = struct.Struct(">IBQQq")
_STREAM_ABORT: Final = struct.Struct(">II")
_STREAM_ABORT_INFO: Final = struct.Struct(">Qq")
_MESSAGE_HEADER: Final = struct.Struct(">BQ")
_TRUNCATE_HEADER: Final = struct.Struct(">iB")
_RELATION_COLUMN_TYPE: Final = struct.Struct(">Ii")

_TRUNCATE_KNOWN_OPTIONS: Final = 0b11  # TRUNCATE_CASCADE | TRUNCATE_RESTART_SEQS
_REPLICA_IDENTITIES: Final = frozenset("dnfi")  # pg_class.relreplident values

_TAG_N: Final = 0x4E  # 'N' new tuple
_TAG_K: Final = 0x4B  # 'K' key tuple
_TAG_O: Final = 0x4F  # 'O' old tuple


def _read_tuple(reader: Reader) -> TupleData:
    """Read a TupleData part (``logicalrep_read_tuple``)."""
    try:
        values, reader.pos = split_columns(reader.buf, reader.pos)
    except TupleDataError as exc:
        raise reader.error(exc.reason, exc.offset) from None
    return TupleData(values)


def _skip_tuple(reader: Reader) -> None:
    """Validate and skip a TupleData part (``scan_row_message``)."""
    try:
        reader.pos = skip_tuple(reader.buf, reader.pos)
    except TupleDataError as exc:
        raise reader.error(exc.reason, exc.offset) from None


def _stream_xid(reader: Reader, in_stream: bool) -> Xid | None:
    """Read the (sub)transaction id that prefixes a message inside a stream block."""
    if not in_stream:
        return None
    offset = reader.pos
    xid = reader.u32("the transaction id")
    if xid == 0:
        raise reader.error("invalid transaction ID 0 inside a streamed transaction", offset)
    return Xid(xid)


def _require_flags_zero(reader: Reader, flags: int, offset: int) -> None:
    if flags != 0:
        raise reader.error(f"unrecognized flags {flags}; this field is always 0", offset)


def _require_set(reader: Reader, value: int, field: str, offset: int) -> None:
    if value == 0:
        raise reader.error(f"{field} is not set", offset)


def _parse_begin(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Begin:
    final_lsn, commit_time, xid = reader.unpack(_BEGIN, "the BEGIN fields")
    _require_set(reader, final_lsn, "final_lsn", 1)
    return Begin(final_lsn=Lsn(final_lsn), commit_time=PgTimestamp(commit_time), xid=Xid(xid))


def _parse_commit(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Commit:
    flags, commit_lsn, end_lsn, commit_time = reader.unpack(_COMMIT, "the COMMIT fields")
    _require_flags_zero(reader, flags, 1)
    return Commit(
        flags=flags,
        commit_lsn=Lsn(commit_lsn),
        end_lsn=Lsn(end_lsn),
        commit_time=PgTimestamp(commit_time),
    )


def _parse_origin(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Origin:
    origin_lsn = reader.u64("origin_lsn")
    return Origin(origin_lsn=Lsn(origin_lsn), name=reader.cstring("the origin name"))


def _parse_relation(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Relation:
    xid = _stream_xid(reader, in_stream)
    relation_id = reader.u32("relation_id")
    namespace = reader.cstring("the namespace")
    relation_name = reader.cstring("the relation name")
    offset = reader.pos
    identity = chr(reader.u8("the replica identity"))
    if identity not in _REPLICA_IDENTITIES:
        raise reader.error(f"unknown replica identity {identity!r}", offset)
    count = reader.u16("the column count")
    columns = []
    for index in range(count):
        flags = reader.u8(f"the flags of column {index}")
        name = reader.cstring(f"the name of column {index}")
        type_oid, type_modifier = reader.unpack(
            _RELATION_COLUMN_TYPE, f"the type of column {index}"
        )
        columns.append(RelationColumn(flags, name, Oid(type_oid), type_modifier))
    return Relation(
        xid=xid,
        relation_id=Oid(relation_id),
        namespace=namespace,
        relation_name=relation_name,
        replica_identity=identity,
        columns=tuple(columns),
    )


def _parse_type(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Type:
    xid = _stream_xid(reader, in_stream)
    type_oid = reader.u32("the type OID")
    namespace = reader.cstring("the namespace")
    return Type(
        xid=xid,
        type_oid=Oid(type_oid),
        namespace=namespace,
        type_name=reader.cstring("the type name"),
    )


def _read_row_start(reader: Reader, in_stream: bool) -> tuple[Xid | None, int, int, int]:
    """What INSERT, UPDATE and DELETE start with: the stream's xid, the relation id, and the
    first tuple marker with its offset."""
    xid = _stream_xid(reader, in_stream)
    relation_id = reader.u32("relation_id")
    offset = reader.pos
    return xid, relation_id, offset, reader.u8("the tuple marker")


def _parse_insert(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Insert:
    xid, relation_id, offset, marker = _read_row_start(reader, in_stream)
    if marker != _TAG_N:
        raise reader.error(f"expected new tuple marker 'N', got 0x{marker:02x}", offset)
    return Insert(xid=xid, relation_id=Oid(relation_id), new_tuple=_read_tuple(reader))


def _parse_update(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Update:
    xid, relation_id, offset, marker = _read_row_start(reader, in_stream)
    old_kind: Literal["K", "O"] | None = None
    old_tuple = None
    if marker in (_TAG_K, _TAG_O):
        old_kind = "K" if marker == _TAG_K else "O"
        old_tuple = _read_tuple(reader)
        offset = reader.pos
        marker = reader.u8("the new tuple marker")
        if marker != _TAG_N:
            raise reader.error(f"expected new tuple marker 'N', got 0x{marker:02x}", offset)
    elif marker != _TAG_N:
        raise reader.error(f"expected tuple marker 'K', 'O' or 'N', got 0x{marker:02x}", offset)
    return Update(
        xid=xid,
        relation_id=Oid(relation_id),
        old_kind=old_kind,
        old_tuple=old_tuple,
        new_tuple=_read_tuple(reader),
    )


def _parse_delete(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Delete:
    xid, relation_id, offset, marker = _read_row_start(reader, in_stream)
    if marker not in (_TAG_K, _TAG_O):
        raise reader.error(f"expected tuple marker 'K' or 'O', got 0x{marker:02x}", offset)
    return Delete(
        xid=xid,
        relation_id=Oid(relation_id),
        old_kind="K" if marker == _TAG_K else "O",
        old_tuple=_read_tuple(reader),
    )


def _parse_truncate(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Truncate:
    xid = _stream_xid(reader, in_stream)
    offset = reader.pos
    count, truncate_options = reader.unpack(_TRUNCATE_HEADER, "the TRUNCATE header")
    if count < 0:
        raise reader.error(f"negative relation count {count}", offset)
    if truncate_options & ~_TRUNCATE_KNOWN_OPTIONS:
        raise reader.error(f"unknown TRUNCATE option bits {truncate_options:#04x}", offset + 4)
    if reader.remaining < 4 * count:
        raise reader.short(4 * count, f"{count} relation ids")
    relation_ids = struct.unpack_from(f">{count}I", reader.buf, reader.pos)
    reader.pos += 4 * count
    return Truncate(
        xid=xid,
        options=truncate_options,
        relation_ids=tuple(Oid(relation_id) for relation_id in relation_ids),
    )


def _parse_message(reader: Reader, options: ProtocolOptions, in_stream: bool) -> LogicalMessage:
    xid = _stream_xid(reader, in_stream)
    offset = reader.pos
    flags, lsn = reader.unpack(_MESSAGE_HEADER, "the MESSAGE header")
    if flags > 1:
        raise reader.error(f"unrecognized flags {flags}; expected 0 or 1", offset)
    prefix = reader.cstring("the prefix")
    length = reader.i32("the content length")
    return LogicalMessage(
        xid=xid,
        flags=flags,
        lsn=Lsn(lsn),
        prefix=prefix,
        content=reader.read_bytes(length, "the content"),
    )


def _parse_begin_prepare(reader: Reader, options: ProtocolOptions, in_stream: bool) -> BeginPrepare:
    prepare_lsn, end_lsn, prepare_time, xid = reader.unpack(_BEGIN_PREPARE, "the fields")
    _require_set(reader, prepare_lsn, "prepare_lsn", 1)
    _require_set(reader, end_lsn, "end_lsn", 9)
    _require_set(reader, xid, "the transaction id", 25)
    return BeginPrepare(
        prepare_lsn=Lsn(prepare_lsn),
        end_lsn=Lsn(end_lsn),
        prepare_time=PgTimestamp(prepare_time),
        xid=Xid(xid),
        gid=reader.cstring("the gid"),
    )


def _read_prepare_fields(reader: Reader, lsn_field: str) -> tuple[int, int, int, int, int, str]:
    """Flags, an LSN named ``lsn_field``, end_lsn, a time, xid and gid: the layout PREPARE,
    STREAM PREPARE and COMMIT PREPARED share (``logicalrep_read_prepare_common``,
    ``logicalrep_read_commit_prepared``)."""
    flags, lsn, end_lsn, time, xid = reader.unpack(_PREPARE_COMMON, "the fields")
    _require_flags_zero(reader, flags, 1)
    _require_set(reader, lsn, lsn_field, 2)
    _require_set(reader, end_lsn, "end_lsn", 10)
    _require_set(reader, xid, "the transaction id", 26)
    return flags, lsn, end_lsn, time, xid, reader.cstring("the gid")


_Prepared = TypeVar("_Prepared", Prepare, StreamPrepare)


def _read_prepare_common(reader: Reader, kind: type[_Prepared]) -> _Prepared:
    """PREPARE or STREAM PREPARE (``logicalrep_read_prepare_common``)."""
    flags, prepare_lsn, end_lsn, prepare_time, xid, gid = _read_prepare_fields(
        reader, "prepare_lsn"
    )
    return kind(
        flags=flags,
        prepare_lsn=Lsn(prepare_lsn),
        end_lsn=Lsn(end_lsn),
        prepare_time=PgTimestamp(prepare_time),
        xid=Xid(xid),
        gid=gid,
    )


def _parse_prepare(reader: Reader, options: ProtocolOptions, in_stream: bool) -> Prepare:
    return _read_prepare_common(reader, Prepare)


def _parse_stream_prepare(
    reader: Reader, options: ProtocolOptions, in_stream: bool
) -> StreamPrepare:
    return _read_prepare_common(reader, StreamPrepare)


def _parse_commit_prepared(
    reader: Reader, options: ProtocolOptions, in_stream: bool
) -> CommitPrepared:
    flags, commit_lsn, end_lsn, commit_time, xid, gid = _read_prepare_fields(reader, "commit_lsn")
    return CommitPrepared(
        flags=flags,
        commit_lsn=Lsn(commit_lsn),
        end_lsn=Lsn(end_lsn),
        commit_time=PgTimestamp(commit_time),
        xid=Xid(xid),
        gid=gid,
    )


def _parse_rollback_prepared(
    reader: Reader, options: ProtocolOptions, in_stream: bool
) -> RollbackPrepared:
    flags, prepare_end_lsn, rollback_end_lsn, prepare_time, rollback_time, xid = reader.unpack(
        _ROLLBACK_PREPARED, "the fields"
    )
    _require_flags_zero(reader, flags, 1)
    _require_set(reader, prepare_end_lsn, "prepare_end_lsn", 2)
    _require_set(reader, rollback_end_lsn, "rollback_end_lsn", 10)
    _require_set(reader, xid, "the transaction id", 34)
    return RollbackPrepared(
        flags=flags,
        prepare_end_lsn=Lsn(prepare_end_lsn),
        rollback_end_lsn=Lsn(rollback_end_lsn),
        prepare_time=PgTimestamp(prepare_time),
        rollback_time=PgTimestamp(rollback_time),
        xid=Xid(xid),
        gid=reader.cstring("the gid"),
    )


def _parse_stream_start(reader: Reader, options: ProtocolOptions, in_stream: bool) -> StreamStart:
    xid, first_segment = reader.unpack(_STREAM_START, "the fields")
    _require_set(reader, xid, "the transaction id", 1)
    if first_segment > 1:
        raise reader.error(f"first_segment must be 0 or 1, not {first_segment}", 5)
    return StreamStart(xid=Xid(xid), first_segment=bool(first_segment))


def _parse_stream_stop(reader: Reader, options: ProtocolOptions, in_stream: bool) -> StreamStop:
    return StreamStop()


def _parse_stream_commit(reader: Reader, options: ProtocolOptions, in_stream: bool) -> StreamCommit:
    xid, flags, commit_lsn, end_lsn, commit_time = reader.unpack(_STREAM_COMMIT, "the fields")
    _require_set(reader, xid, "the transaction id", 1)
    _require_flags_zero(reader, flags, 5)
    return StreamCommit(
        xid=Xid(xid),
        flags=flags,
        commit_lsn=Lsn(commit_lsn),
        end_lsn=Lsn(end_lsn),
        commit_time=PgTimestamp(commit_time),
    )


def _parse_stream_abort(reader: Reader, options: ProtocolOptions, in_stream: bool) -> StreamAbort:
    xid, subxid = reader.unpack(_STREAM_ABORT, "the transaction ids")
    _require_set(reader, xid, "the transaction id", 1)
    _require_set(reader, subxid, "the subtransaction id", 5)
    if not options.stream_abort_has_abort_info:
        return StreamAbort(xid=Xid(xid), subxid=Xid(subxid))
    abort_lsn, abort_time = reader.unpack(_STREAM_ABORT_INFO, "abort_lsn and abort_time")
    return StreamAbort(
        xid=Xid(xid),
        subxid=Xid(subxid),
        abort_lsn=Lsn(abort_lsn),
        abort_time=PgTimestamp(abort_time),
    )


_Parser = Callable[[Reader, ProtocolOptions, bool], Message]

# tag -> (reader, lowest protocol version in which the server sends the tag). The two-phase
# tags are accepted in every version: a slot created with two_phase keeps decoding prepared
# transactions even for a client that asked for protocol 1 ("It remains enabled if the
# previous start-up has done so", pgoutput_startup), and PostgreSQL 15 and 18 then send
# BEGIN PREPARE, PREPARE and COMMIT PREPARED with their protocol-3 layout.
_PARSERS: Final[dict[int, tuple[_Parser, int]]] = {
    ord("B"): (_parse_begin, 1),
    ord("C"): (_parse_commit, 1),
    ord("O"): (_parse_origin, 1),
    ord("R"): (_parse_relation, 1),
    ord("Y"): (_parse_type, 1),
    ord("I"): (_parse_insert, 1),
    ord("U"): (_parse_update, 1),
    ord("D"): (_parse_delete, 1),
    ord("T"): (_parse_truncate, 1),
    ord("M"): (_parse_message, 1),
    ord("S"): (_parse_stream_start, STREAM_PROTOCOL_VERSION),
    ord("E"): (_parse_stream_stop, STREAM_PROTOCOL_VERSION),
    ord("c"): (_parse_stream_commit, STREAM_PROTOCOL_VERSION),
    ord("A"): (_parse_stream_abort, STREAM_PROTOCOL_VERSION),
    ord("b"): (_parse_begin_prepare, 1),
    ord("P"): (_parse_prepare, 1),
    ord("K"): (_parse_commit_prepared, 1),
    ord("r"): (_parse_rollback_prepared, 1),
    ord("p"): (_parse_stream_prepare, 1),
}


def parse_message(buf: bytes | memoryview, *, options: ProtocolOptions, in_stream: bool) -> Message:
    """Parse one pgoutput message.

    Args:
        buf: the message, starting with its tag byte (an XLogData payload).
        options: the options the stream was started with; they decide which tags exist
            and whether STREAM ABORT carries its abort LSN and time.
        in_stream: whether the message arrived between STREAM START and STREAM STOP, where
            data and schema messages start with a transaction id.

    Returns:
        The message as its frozen dataclass.

    Raises:
        MalformedMessageError: the bytes are not a valid message of this protocol version;
            the error names the message type and the offset.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    if not data:
        raise MalformedMessageError("empty message", offset=0, message_type="UNKNOWN")
    tag = data[0]
    entry = _PARSERS.get(tag)
    if entry is None:
        raise MalformedMessageError(
            f"unknown message tag 0x{tag:02x}", offset=0, message_type="UNKNOWN"
        )
    parse, since = entry
    name = MESSAGE_TYPE_NAMES[tag]
    if options.proto_version < since:
        raise MalformedMessageError(
            f"{name} messages exist from protocol version {since}; this stream uses "
            f"version {options.proto_version}",
            offset=0,
            message_type=name,
        )
    reader = Reader(data, 1, name)
    message = parse(reader, options, in_stream)
    if reader.pos != reader.end:
        raise reader.error(f"{reader.remaining} unexpected bytes after the end of the message")
    return message


ROW_MESSAGE_TYPES: Final = {ord("I"): "INSERT", ord("U"): "UPDATE", ord("D"): "DELETE"}
"""Tag byte -> message type name of the row messages (the assembler's fast paths)."""


def scan_row_message(buf: bytes, *, in_stream: bool) -> tuple[str, Xid | None] | None:
    """Validate an INSERT, UPDATE or DELETE exactly as ``parse_message`` would, cheaply.

    The assembler only needs to know that a row message is valid and which
    (sub)transaction it belongs to when it spools it; the full message is built at replay.
    Skipping the column objects here halves the cost of decoding a row.

    Args:
        buf: the message.
        in_stream: whether it arrived inside a stream block.

    Returns:
        ``(message type name, xid prefix)``, or None when the message is not a row message.

    Raises:
        MalformedMessageError: the same error ``parse_message`` raises for these bytes.
    """
    if not buf:
        return None
    name = ROW_MESSAGE_TYPES.get(buf[0])
    if name is None:
        return None
    reader = Reader(buf, 1, name)
    xid = _stream_xid(reader, in_stream)
    reader.u32("relation_id")
    offset = reader.pos
    marker = reader.u8("the tuple marker")
    if name == "INSERT":
        if marker != _TAG_N:
            raise reader.error(f"expected new tuple marker 'N', got 0x{marker:02x}", offset)
        _skip_tuple(reader)
    elif name == "UPDATE":
        if marker in {_TAG_K, _TAG_O}:
            _skip_tuple(reader)
            offset = reader.pos
            marker = reader.u8("the new tuple marker")
            if marker != _TAG_N:
                raise reader.error(f"expected new tuple marker 'N', got 0x{marker:02x}", offset)
        elif marker != _TAG_N:
            raise reader.error(f"expected tuple marker 'K', 'O' or 'N', got 0x{marker:02x}", offset)
        _skip_tuple(reader)
    else:
        if marker not in {_TAG_K, _TAG_O}:
            raise reader.error(f"expected tuple marker 'K' or 'O', got 0x{marker:02x}", offset)
        _skip_tuple(reader)
    if reader.pos != reader.end:
        raise reader.error(f"{reader.remaining} unexpected bytes after the end of the message")
    return name, xid


# ------------------------------------------------------------------ row-message fast path
#
# Row messages are nearly every message of a stream, and the assembler touches each twice:
# it validates it when it arrives and turns it into a change when its transaction is
# replayed. The functions below do both with as little Python per column as possible.
# ``row_message_is_valid`` is optimistic: it reads the header without a ``Reader``, walks
# the tuples with ``tupledata.skip_tuple`` (no objects), and answers True only for a
# message ``scan_row_message`` accepts. Anything unusual makes it answer False, and the
# caller then runs ``scan_row_message``, which finds the same verdict and the precise
# error. ``row_parts`` reads a validated message back without splitting its columns
# (``TupleData.from_wire``). Both walks have a compiled form (``decoder.native``); the
# Python functions here are the reference, and the names the rest of the decoder uses are
# bound to the compiled form when it was built.

_OLD_KIND: Final[dict[int, Literal["K", "O"]]] = {_TAG_K: "K", _TAG_O: "O"}


def row_message_is_valid_reference(buf: bytes, in_stream: bool) -> bool:
    """True when ``buf`` is an INSERT, UPDATE or DELETE that ``scan_row_message`` accepts.

    False means "not proven here": the message may still be valid (or not a row message
    at all); ask ``scan_row_message``.
    """
    try:
        tag = buf[0]
        pos = 5
        if in_stream:
            if not (buf[1] or buf[2] or buf[3] or buf[4]):
                return False  # xid 0: scan_row_message reports it
            pos = 9
        marker = buf[pos]
        if tag == 0x49:  # 'I'
            if marker != _TAG_N:
                return False
        elif tag == 0x55:  # 'U'
            if marker in {_TAG_K, _TAG_O}:
                pos = walk_tuple_reference(buf, pos + 1, None, (), (), None, None)
                if buf[pos] != _TAG_N:
                    return False
            elif marker != _TAG_N:
                return False
        elif tag == 0x44:  # 'D'
            if marker not in {_TAG_K, _TAG_O}:
                return False
        else:
            return False
        # walk_tuple_reference rather than skip_tuple: this runs once per row message of the stream.
        return walk_tuple_reference(buf, pos + 1, None, (), (), None, None) == len(buf)
    except (IndexError, TupleDataError):
        return False


row_message_is_valid: Callable[[bytes, bool], bool] = (
    row_message_is_valid_reference if COMPILED is None else COMPILED.row_message_is_valid
)
"""``row_message_is_valid_reference``, compiled when the kernel was built."""


RowParts = tuple[int, RowOperation, Literal["K", "O"] | None, TupleData | None, TupleData | None]
"""``(relation_id, op, old_kind, old tuple, new tuple)`` of a row message."""


def row_parts(buf: bytes, in_stream: bool) -> RowParts:
    """Read a *validated* row message back, its tuples left unsplit (``from_wire``).

    Args:
        buf: an INSERT, UPDATE or DELETE that ``row_message_is_valid`` or
            ``scan_row_message`` accepted.
        in_stream: whether it was spooled from a stream block (it has an xid prefix).

    Returns:
        ``(relation_id, op, old_kind, old, new)``; op is ``insert``, ``update`` or
        ``delete``.
    """
    pos = 5 if in_stream else 1
    relation_id: int = U32.unpack_from(buf, pos)[0]
    pos += 4
    tag = buf[0]
    marker = buf[pos]
    from_wire = TupleData.from_wire
    if tag == 0x49:  # 'I'
        return relation_id, "insert", None, None, from_wire(buf, pos + 1)
    if tag == 0x44:  # 'D'
        return relation_id, "delete", _OLD_KIND[marker], from_wire(buf, pos + 1), None
    if marker == _TAG_N:
        return relation_id, "update", None, None, from_wire(buf, pos + 1)
    old = from_wire(buf, pos + 1)
    end = skip_tuple(buf, pos + 1)
    return relation_id, "update", _OLD_KIND[marker], old, from_wire(buf, end + 1)
