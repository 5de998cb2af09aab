"""One frozen dataclass per pgoutput message, named and shaped as ``logicalproto.h`` does.

See the "Logical Replication Message Formats" section of the PostgreSQL manual. Values stay
raw bytes here (``ColumnValue``); conversion to Python values happens in ``values.py`` once
the relation is known, as PostgreSQL's apply worker does.

Fields that carry an xid only inside a stream block (Relation, Type, Insert, Update, Delete,
Truncate, transactional Message) are ``None`` outside one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from decoder.lsn import Lsn, Oid, PgTimestamp, Xid


class ColumnKind(enum.Enum):
    """How one column of a TupleData is sent (PostgreSQL's ``colstatus``)."""

    NULL = "n"
    UNCHANGED_TOAST = "u"
    TEXT = "t"
    BINARY = "b"


@dataclass(frozen=True, slots=True)
class ColumnValue:
    """One column of a TupleData: its kind and, for TEXT/BINARY, its raw bytes."""

    kind: ColumnKind
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class TupleData:
    """The columns of one tuple, in relation column order."""

    values: tuple[ColumnValue, ...]


@dataclass(frozen=True, slots=True)
class RelationColumn:
    """One published column of a Relation message."""

    flags: int
    name: str
    type_oid: Oid
    type_modifier: int

    @property
    def is_key(self) -> bool:
        """True when the column is part of the replica identity key."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Begin:
    final_lsn: Lsn
    commit_time: PgTimestamp
    xid: Xid


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_time: PgTimestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    origin_lsn: Lsn
    name: str


ReplicaIdentity = Literal["d", "n", "f", "i"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Relation:
    xid: Xid | None
    relation_id: Oid
    namespace: str
    relation_name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]

    @property
    def schema_name(self) -> str:
        """The schema; the wire sends an empty namespace for ``pg_catalog``."""
        return self.namespace or "pg_catalog"

    @property
    def qualified_name(self) -> str:
        return f"{self.schema_name}.{self.relation_name}"

    @property
    def key_columns(self) -> tuple[RelationColumn, ...]:
        return tuple(column for column in self.columns if column.is_key)


@dataclass(frozen=True, slots=True, kw_only=True)
class Type:
    xid: Xid | None
    type_oid: Oid
    namespace: str
    type_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Insert:
    xid: Xid | None
    relation_id: Oid
    new_tuple: TupleData


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    xid: Xid | None
    relation_id: Oid
    old_kind: Literal["K", "O"] | None
    old_tuple: TupleData | None
    new_tuple: TupleData


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete:
    xid: Xid | None
    relation_id: Oid
    old_kind: Literal["K", "O"]
    old_tuple: TupleData


TRUNCATE_CASCADE = 1
TRUNCATE_RESTART_IDENTITY = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Truncate:
    xid: Xid | None
    options: int
    relation_ids: tuple[Oid, ...]

    @property
    def cascade(self) -> bool:
        return bool(self.options & TRUNCATE_CASCADE)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & TRUNCATE_RESTART_IDENTITY)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogicalMessage:
    xid: Xid | None
    flags: int
    lsn: Lsn
    prefix: str
    content: bytes

    @property
    def transactional(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginPrepare:
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_time: PgTimestamp
    xid: Xid
    gid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepare:
    flags: int
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_time: PgTimestamp
    xid: Xid
    gid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitPrepared:
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_time: PgTimestamp
    xid: Xid
    gid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RollbackPrepared:
    flags: int
    prepare_end_lsn: Lsn
    rollback_end_lsn: Lsn
    prepare_time: PgTimestamp
    rollback_time: PgTimestamp
    xid: Xid
    gid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamStart:
    xid: Xid
    first_segment: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamStop:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamCommit:
    xid: Xid
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_time: PgTimestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamAbort:
    xid: Xid
    subxid: Xid
    abort_lsn: Lsn | None = None
    abort_time: PgTimestamp | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamPrepare:
    flags: int
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_time: PgTimestamp
    xid: Xid
    gid: str


Message = (
    Begin
    | Commit
    | Origin
    | Relation
    | Type
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
    | BeginPrepare
    | Prepare
    | CommitPrepared
    | RollbackPrepared
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
    | StreamPrepare
)

MESSAGE_TYPE_NAMES: dict[int, str] = {
    ord("B"): "BEGIN",
    ord("C"): "COMMIT",
    ord("O"): "ORIGIN",
    ord("R"): "RELATION",
    ord("Y"): "TYPE",
    ord("I"): "INSERT",
    ord("U"): "UPDATE",
    ord("D"): "DELETE",
    ord("T"): "TRUNCATE",
    ord("M"): "MESSAGE",
    ord("b"): "BEGIN PREPARE",
    ord("P"): "PREPARE",
    ord("K"): "COMMIT PREPARED",
    ord("r"): "ROLLBACK PREPARED",
    ord("S"): "STREAM START",
    ord("E"): "STREAM STOP",
    ord("c"): "STREAM COMMIT",
    ord("A"): "STREAM ABORT",
    ord("p"): "STREAM PREPARE",
}


def message_type_name(tag: int) -> str:
    """Name a message tag as PostgreSQL's ``logicalrep_message_type`` does; never raises."""
    return MESSAGE_TYPE_NAMES.get(tag, f"??? ({tag})")
