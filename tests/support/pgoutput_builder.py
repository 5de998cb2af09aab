"""A test-only pgoutput encoder: the ``logicalrep_write_*`` half of PostgreSQL's proto.c.

``encode_message`` turns any ``decoder`` message back into the bytes the walsender would
send, so tests can build streams "from parts" (supabase/etl's habit) and check the parser
with round trips. The xid prefix is written when the message's ``xid`` is set, which is
exactly when the parser reads it (inside a stream block); STREAM ABORT carries its abort
LSN and time when the options say so, as ``pgoutput_stream_abort`` decides.

Small constructors (``begin``, ``insert``, ``relation``...) fill in the fields tests do not
care about.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from decoder import (
    Assembler,
    AssemblerOutput,
    Begin,
    BeginPrepare,
    Change,
    ColumnKind,
    ColumnValue,
    Commit,
    CommitPrepared,
    CommittedTransaction,
    Delete,
    Insert,
    LogicalMessage,
    Lsn,
    Message,
    Oid,
    Origin,
    PgTimestamp,
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
    Xid,
)

TEXT_OID = Oid(25)
INT4_OID = Oid(23)


def _cstring(text: str) -> bytes:
    return text.encode("utf-8") + b"\0"


def _xid_prefix(xid: int | None) -> bytes:
    return b"" if xid is None else struct.pack(">I", xid)


def encode_tuple(data: TupleData) -> bytes:
    """Encode a TupleData part (``logicalrep_write_tuple``)."""
    out = [struct.pack(">H", len(data.values))]
    for value in data.values:
        out.append(value.kind.value.encode("ascii"))
        if value.kind in (ColumnKind.TEXT, ColumnKind.BINARY):
            assert value.data is not None
            out.append(struct.pack(">i", len(value.data)))
            out.append(value.data)
    return b"".join(out)


def encode_message(message: Message, options: ProtocolOptions | None = None) -> bytes:
    """Encode one message as pgoutput does.

    Args:
        message: any message; its ``xid`` (for data and schema messages) decides whether
            the stream-block xid prefix is written.
        options: decides whether STREAM ABORT carries ``abort_lsn``/``abort_time``.
    """
    options = options or ProtocolOptions(proto_version=4, streaming="parallel", two_phase=True)
    match message:
        case Begin():
            return b"B" + struct.pack(">QqI", message.final_lsn, message.commit_time, message.xid)
        case Commit():
            return b"C" + struct.pack(
                ">BQQq", message.flags, message.commit_lsn, message.end_lsn, message.commit_time
            )
        case Origin():
            return b"O" + struct.pack(">Q", message.origin_lsn) + _cstring(message.name)
        case Relation():
            out = [
                b"R",
                _xid_prefix(message.xid),
                struct.pack(">I", message.relation_id),
                _cstring(message.namespace),
                _cstring(message.relation_name),
                message.replica_identity.encode("ascii"),
                struct.pack(">H", len(message.columns)),
            ]
            for column in message.columns:
                out.append(struct.pack(">B", column.flags))
                out.append(_cstring(column.name))
                out.append(struct.pack(">Ii", column.type_oid, column.type_modifier))
            return b"".join(out)
        case Type():
            return (
                b"Y"
                + _xid_prefix(message.xid)
                + struct.pack(">I", message.type_oid)
                + _cstring(message.namespace)
                + _cstring(message.type_name)
            )
        case Insert():
            return (
                b"I"
                + _xid_prefix(message.xid)
                + struct.pack(">I", message.relation_id)
                + b"N"
                + encode_tuple(message.new_tuple)
            )
        case Update():
            old = b""
            if message.old_kind is not None:
                assert message.old_tuple is not None
                old = message.old_kind.encode("ascii") + encode_tuple(message.old_tuple)
            return (
                b"U"
                + _xid_prefix(message.xid)
                + struct.pack(">I", message.relation_id)
                + old
                + b"N"
                + encode_tuple(message.new_tuple)
            )
        case Delete():
            return (
                b"D"
                + _xid_prefix(message.xid)
                + struct.pack(">I", message.relation_id)
                + message.old_kind.encode("ascii")
                + encode_tuple(message.old_tuple)
            )
        case Truncate():
            count = len(message.relation_ids)
            return (
                b"T"
                + _xid_prefix(message.xid)
                + struct.pack(">iB", count, message.options)
                + struct.pack(f">{count}I", *message.relation_ids)
            )
        case LogicalMessage():
            return (
                b"M"
                + _xid_prefix(message.xid)
                + struct.pack(">BQ", message.flags, message.lsn)
                + _cstring(message.prefix)
                + struct.pack(">i", len(message.content))
                + message.content
            )
        case BeginPrepare():
            return (
                b"b"
                + struct.pack(
                    ">QQqI",
                    message.prepare_lsn,
                    message.end_lsn,
                    message.prepare_time,
                    message.xid,
                )
                + _cstring(message.gid)
            )
        case Prepare() | StreamPrepare():
            tag = b"P" if isinstance(message, Prepare) else b"p"
            return (
                tag
                + struct.pack(
                    ">BQQqI",
                    message.flags,
                    message.prepare_lsn,
                    message.end_lsn,
                    message.prepare_time,
                    message.xid,
                )
                + _cstring(message.gid)
            )
        case CommitPrepared():
            return (
                b"K"
                + struct.pack(
                    ">BQQqI",
                    message.flags,
                    message.commit_lsn,
                    message.end_lsn,
                    message.commit_time,
                    message.xid,
                )
                + _cstring(message.gid)
            )
        case RollbackPrepared():
            return (
                b"r"
                + struct.pack(
                    ">BQQqqI",
                    message.flags,
                    message.prepare_end_lsn,
                    message.rollback_end_lsn,
                    message.prepare_time,
                    message.rollback_time,
                    message.xid,
                )
                + _cstring(message.gid)
            )
        case StreamStart():
            return b"S" + struct.pack(">IB", message.xid, 1 if message.first_segment else 0)
        case StreamStop():
            return b"E"
        case StreamCommit():
            return b"c" + struct.pack(
                ">IBQQq",
                message.xid,
                message.flags,
                message.commit_lsn,
                message.end_lsn,
                message.commit_time,
            )
        case StreamAbort():
            out_abort = b"A" + struct.pack(">II", message.xid, message.subxid)
            if options.stream_abort_has_abort_info:
                out_abort += struct.pack(">Qq", message.abort_lsn or 0, message.abort_time or 0)
            return out_abort
    raise TypeError(f"not a pgoutput message: {message!r}")


# --------------------------------------------------------------------------- constructors


def text_tuple(*values: str | bytes | None) -> TupleData:
    """A TupleData of text values; None is NULL."""
    out = []
    for value in values:
        if value is None:
            out.append(ColumnValue(ColumnKind.NULL, None))
        else:
            raw = value.encode("utf-8") if isinstance(value, str) else value
            out.append(ColumnValue(ColumnKind.TEXT, raw))
    return TupleData(tuple(out))


def relation(
    relation_id: int,
    name: str = "t",
    columns: Sequence[tuple[str, int] | tuple[str, int, bool]] = (("id", INT4_OID, True),),
    *,
    namespace: str = "public",
    xid: int | None = None,
    replica_identity: str = "d",
) -> Relation:
    """A RELATION message; columns are (name, type OID[, is key])."""
    return Relation(
        xid=None if xid is None else Xid(xid),
        relation_id=Oid(relation_id),
        namespace=namespace,
        relation_name=name,
        replica_identity=replica_identity,
        columns=tuple(
            RelationColumn(
                1 if (len(column) > 2 and column[2]) else 0,
                column[0],
                Oid(column[1]),
                -1,
            )
            for column in columns
        ),
    )


def begin(xid: int, final_lsn: int, commit_time: int = 0) -> Begin:
    """A BEGIN message."""
    return Begin(final_lsn=Lsn(final_lsn), commit_time=PgTimestamp(commit_time), xid=Xid(xid))


def commit(commit_lsn: int, end_lsn: int | None = None, commit_time: int = 0) -> Commit:
    """A COMMIT message; ``end_lsn`` defaults to ``commit_lsn + 8``."""
    return Commit(
        flags=0,
        commit_lsn=Lsn(commit_lsn),
        end_lsn=Lsn(commit_lsn + 8 if end_lsn is None else end_lsn),
        commit_time=PgTimestamp(commit_time),
    )


def insert(relation_id: int, *values: str | None, xid: int | None = None) -> Insert:
    """An INSERT of a text tuple."""
    return Insert(
        xid=None if xid is None else Xid(xid),
        relation_id=Oid(relation_id),
        new_tuple=text_tuple(*values),
    )


def stream_start(xid: int, first_segment: bool) -> StreamStart:
    """A STREAM START message."""
    return StreamStart(xid=Xid(xid), first_segment=first_segment)


def stream_commit(xid: int, commit_lsn: int, commit_time: int = 0) -> StreamCommit:
    """A STREAM COMMIT message; ``end_lsn`` is ``commit_lsn + 8``."""
    return StreamCommit(
        xid=Xid(xid),
        flags=0,
        commit_lsn=Lsn(commit_lsn),
        end_lsn=Lsn(commit_lsn + 8),
        commit_time=PgTimestamp(commit_time),
    )


def stream_abort(xid: int, subxid: int, abort_lsn: int | None = None) -> StreamAbort:
    """A STREAM ABORT message."""
    return StreamAbort(
        xid=Xid(xid),
        subxid=Xid(subxid),
        abort_lsn=None if abort_lsn is None else Lsn(abort_lsn),
        abort_time=None if abort_lsn is None else PgTimestamp(0),
    )


def begin_prepare(xid: int, gid: str, prepare_lsn: int) -> BeginPrepare:
    """A BEGIN PREPARE message; ``end_lsn`` is ``prepare_lsn + 8``."""
    return BeginPrepare(
        prepare_lsn=Lsn(prepare_lsn),
        end_lsn=Lsn(prepare_lsn + 8),
        prepare_time=PgTimestamp(0),
        xid=Xid(xid),
        gid=gid,
    )


def prepare(xid: int, gid: str, prepare_lsn: int) -> Prepare:
    """A PREPARE message matching ``begin_prepare(xid, gid, prepare_lsn)``."""
    return Prepare(
        flags=0,
        prepare_lsn=Lsn(prepare_lsn),
        end_lsn=Lsn(prepare_lsn + 8),
        prepare_time=PgTimestamp(0),
        xid=Xid(xid),
        gid=gid,
    )


def stream_prepare(xid: int, gid: str, prepare_lsn: int) -> StreamPrepare:
    """A STREAM PREPARE message; ``end_lsn`` is ``prepare_lsn + 8``."""
    return StreamPrepare(
        flags=0,
        prepare_lsn=Lsn(prepare_lsn),
        end_lsn=Lsn(prepare_lsn + 8),
        prepare_time=PgTimestamp(0),
        xid=Xid(xid),
        gid=gid,
    )


def commit_prepared(xid: int, gid: str, commit_lsn: int) -> CommitPrepared:
    """A COMMIT PREPARED message; ``end_lsn`` is ``commit_lsn + 8``."""
    return CommitPrepared(
        flags=0,
        commit_lsn=Lsn(commit_lsn),
        end_lsn=Lsn(commit_lsn + 8),
        commit_time=PgTimestamp(0),
        xid=Xid(xid),
        gid=gid,
    )


def rollback_prepared(
    xid: int, gid: str, prepare_end_lsn: int, rollback_end_lsn: int
) -> RollbackPrepared:
    """A ROLLBACK PREPARED message."""
    return RollbackPrepared(
        flags=0,
        prepare_end_lsn=Lsn(prepare_end_lsn),
        rollback_end_lsn=Lsn(rollback_end_lsn),
        prepare_time=PgTimestamp(0),
        rollback_time=PgTimestamp(0),
        xid=Xid(xid),
        gid=gid,
    )


def logical_message(
    prefix: str, content: bytes, *, transactional: bool, lsn: int = 1, xid: int | None = None
) -> LogicalMessage:
    """A MESSAGE message."""
    return LogicalMessage(
        xid=None if xid is None else Xid(xid),
        flags=1 if transactional else 0,
        lsn=Lsn(lsn),
        prefix=prefix,
        content=content,
    )


def encode_all(messages: Iterable[Message], options: ProtocolOptions | None = None) -> list[bytes]:
    """Encode several messages."""
    return [encode_message(message, options) for message in messages]


def feed_messages(
    assembler: Assembler, messages: Iterable[Message], *, start_lsn: int = 0x1000
) -> list[AssemblerOutput]:
    """Encode messages with the assembler's options and feed them; return all outputs.

    Each message gets its own ``wal_start``, 16 bytes after the previous one.
    """
    outputs: list[AssemblerOutput] = []
    for index, message in enumerate(messages):
        payload = encode_message(message, assembler.options)
        outputs.extend(assembler.feed(start_lsn + 16 * index, payload))
    return outputs


def replay_committed(assembler: Assembler, outputs: Iterable[AssemblerOutput]) -> list[Change]:
    """Replay every committed transaction among ``outputs``, in order; return the changes."""
    changes: list[Change] = []
    for output in outputs:
        if isinstance(output, CommittedTransaction):
            changes.extend(assembler.replay(output))
    return changes
