"""One frozen dataclass per pgoutput message, named and shaped as ``logicalproto.h`` does.

See the "Logical Replication Message Formats" section of the PostgreSQL manual. Values stay
raw bytes here (``ColumnValue``); conversion to Python values happens in ``values.py`` once
the relation is known, as PostgreSQL's apply worker does.

Fields that carry an xid only inside a stream block (Relation, Type, Insert, Update, Delete,
Truncate, transactional Message) are ``None`` outside one.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Final, Literal

from decoder.errors import MalformedMessageError
from decoder.fastbuild import fast_constructor
from decoder.lsn import Lsn, Oid, PgTimestamp, Xid
from decoder.tupledata import Load, TupleDataError, walk_tuple


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


class TupleData:
    """The columns of one tuple, in relation column order; immutable.

    ``TupleData(values)`` holds the given columns. The decoder also makes instances that
    only point into the raw message (``TupleData.from_wire``): a replayed change then
    costs no per-column objects until something reads ``values``, and ``values.py``
    converts such a tuple straight from the wire bytes without ever building them. Both
    kinds compare, hash, print and pickle by their columns, so no caller can tell them
    apart. (A hand-written class rather than a frozen dataclass for that reason; it keeps
    the dataclass's surface: ``values``, ``__match_args__``, equality, ``repr``.)
    """

    __slots__ = ("_buf", "_start", "_values")
    __match_args__ = ("values",)

    _buf: bytes | None
    _start: int
    _values: tuple[ColumnValue, ...] | None

    def __init__(self, values: tuple[ColumnValue, ...]) -> None:
        _set_values(self, tuple(values))
        _set_buf(self, None)
        _set_start(self, 0)

    @classmethod
    def from_wire(cls, buf: bytes, start: int) -> TupleData:
        """A tuple whose columns are read from ``buf`` at ``start`` when first needed.

        ``buf[start:]`` must begin with a TupleData part that was validated already
        (the assembler validates every row message when it arrives).
        """
        return new_wire_tuple(buf, start)

    @property
    def values(self) -> tuple[ColumnValue, ...]:
        """The columns, in relation column order."""
        values = self._values
        if values is None:
            # Two threads may both split the same tuple; they compute equal values, so
            # the race is harmless.
            assert self._buf is not None
            values = _split_tuple(self._buf, self._start)
            _set_values(self, values)
        return values

    @property
    def wire(self) -> tuple[bytes, int] | None:
        """``(message bytes, offset of the TupleData part)`` for a tuple not yet split."""
        if self._values is not None or self._buf is None:
            return None
        return self._buf, self._start

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TupleData):
            return NotImplemented
        return self.values == other.values

    def __hash__(self) -> int:
        return hash((self.values,))

    def __repr__(self) -> str:
        return f"TupleData(values={self.values!r})"

    def __reduce__(self) -> tuple[type[TupleData], tuple[tuple[ColumnValue, ...]]]:
        return (TupleData, (self.values,))

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


_set_values = TupleData.__dict__["_values"].__set__
_set_buf = TupleData.__dict__["_buf"].__set__
_set_start = TupleData.__dict__["_start"].__set__

# Replay makes a wire tuple per row and a split makes a ColumnValue per column: both skip
# the constructor (decoder.fastbuild). A wire tuple is built in a state ``__init__`` cannot
# make (columns not split yet), which is TupleData's own design: every method reads the
# columns through ``values``, which splits them on first access.
new_wire_tuple: Final = fast_constructor(
    TupleData, ("_buf", "_start"), fixed={"_values": None}, name="new_wire_tuple"
)
_text_value: Final = fast_constructor(ColumnValue, fixed={"kind": ColumnKind.TEXT})
_binary_value: Final = fast_constructor(ColumnValue, fixed={"kind": ColumnKind.BINARY})
# ``walk_tuple`` wants one maker per column; these grow to the widest tuple seen.
_TEXT_MAKERS: Final[list[Load]] = []
_BINARY_MAKERS: Final[list[Load]] = []
# Shared instances: NULL and unchanged-TOAST columns carry no data, and the dataclass is
# frozen, so one object each serves every tuple.
NULL_VALUE: Final = ColumnValue(ColumnKind.NULL, None)
UNCHANGED_VALUE: Final = ColumnValue(ColumnKind.UNCHANGED_TOAST, None)


def split_columns(buf: bytes, start: int) -> tuple[tuple[ColumnValue, ...], int]:
    """The columns of the TupleData part at ``buf[start:]`` and the offset after it.

    Raises:
        TupleDataError: the part does not fit ``buf`` (see ``decoder.tupledata``).
    """
    count = int.from_bytes(buf[start : start + 2], "big")  # a short part: walk_tuple says so
    if count > len(_TEXT_MAKERS):
        _TEXT_MAKERS.extend([_text_value] * (count - len(_TEXT_MAKERS)))
        _BINARY_MAKERS.extend([_binary_value] * (count - len(_BINARY_MAKERS)))
    values: list[ColumnValue] = []
    end = walk_tuple(
        buf,
        start,
        values,  # type: ignore[arg-type]  # the makers only make ColumnValue
        _TEXT_MAKERS,
        _BINARY_MAKERS,
        NULL_VALUE,
        UNCHANGED_VALUE,
    )
    return tuple(values), end


def _split_tuple(buf: bytes, start: int) -> tuple[ColumnValue, ...]:
    """The columns of a validated TupleData part at ``buf[start:]``.

    The part was validated when its message arrived, so this only splits; a buffer that
    does not hold a valid part after all (a damaged spill file) still fails cleanly.
    """
    try:
        return split_columns(buf, start)[0]
    except TupleDataError:
        raise MalformedMessageError(
            "a spooled TupleData part is damaged", offset=start, message_type="TUPLE DATA"
        ) from None


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
    """BEGIN: a transaction starts; ``final_lsn`` is the LSN of its commit record."""

    final_lsn: Lsn
    commit_time: PgTimestamp
    xid: Xid


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """COMMIT: the transaction opened by the last BEGIN is complete."""

    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_time: PgTimestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """ORIGIN: the transaction was replicated from another node (replication origin)."""

    origin_lsn: Lsn
    name: str


ReplicaIdentity = Literal["d", "n", "f", "i"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Relation:
    """RELATION: the schema of a published table as of this point in the stream."""

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
        """``schema.relation``, with the empty namespace shown as ``pg_catalog``."""
        return f"{self.schema_name}.{self.relation_name}"

    @property
    def key_columns(self) -> tuple[RelationColumn, ...]:
        """The replica identity key columns, in column order."""
        return tuple(column for column in self.columns if column.is_key)


@dataclass(frozen=True, slots=True, kw_only=True)
class Type:
    """TYPE: the name of a user-defined column type (built-in types are never sent)."""

    xid: Xid | None
    type_oid: Oid
    namespace: str
    type_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Insert:
    """INSERT of one row."""

    xid: Xid | None
    relation_id: Oid
    new_tuple: TupleData


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    """UPDATE of one row; ``old_kind`` says whether ``old_tuple`` is a key (K) or a row (O)."""

    xid: Xid | None
    relation_id: Oid
    old_kind: Literal["K", "O"] | None
    old_tuple: TupleData | None
    new_tuple: TupleData


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete:
    """DELETE of one row, identified by its key (K) or its whole old row (O)."""

    xid: Xid | None
    relation_id: Oid
    old_kind: Literal["K", "O"]
    old_tuple: TupleData


TRUNCATE_CASCADE = 1
TRUNCATE_RESTART_IDENTITY = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Truncate:
    """TRUNCATE of one or more relations."""

    xid: Xid | None
    options: int
    relation_ids: tuple[Oid, ...]

    @property
    def cascade(self) -> bool:
        """TRUNCATE ... CASCADE."""
        return bool(self.options & TRUNCATE_CASCADE)

    @property
    def restart_identity(self) -> bool:
        """TRUNCATE ... RESTART IDENTITY."""
        return bool(self.options & TRUNCATE_RESTART_IDENTITY)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogicalMessage:
    """MESSAGE: a ``pg_logical_emit_message`` payload."""

    xid: Xid | None
    flags: int
    lsn: Lsn
    prefix: str
    content: bytes

    @property
    def transactional(self) -> bool:
        """True when the message belongs to its transaction."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginPrepare:
    """BEGIN PREPARE: a transaction that ends with PREPARE TRANSACTION starts."""

    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_time: PgTimestamp
    xid: Xid
    gid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepare:
    """PREPARE: the transaction opened by BEGIN PREPARE is prepared under ``gid``."""

    flags: int
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_time: PgTimestamp
    xid: Xid
    gid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitPrepared:
    """COMMIT PREPARED of the transaction prepared under ``gid``."""

    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_time: PgTimestamp
    xid: Xid
    gid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RollbackPrepared:
    """ROLLBACK PREPARED of the transaction prepared under ``gid``."""

    flags: int
    prepare_end_lsn: Lsn
    rollback_end_lsn: Lsn
    prepare_time: PgTimestamp
    rollback_time: PgTimestamp
    xid: Xid
    gid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamStart:
    """STREAM START: the following messages belong to streamed transaction ``xid``."""

    xid: Xid
    first_segment: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamStop:
    """STREAM STOP: the current stream block ends."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamCommit:
    """STREAM COMMIT: the streamed transaction ``xid`` committed."""

    xid: Xid
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_time: PgTimestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamAbort:
    """STREAM ABORT of a streamed transaction or of one of its subtransactions."""

    xid: Xid
    subxid: Xid
    abort_lsn: Lsn | None = None
    abort_time: PgTimestamp | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamPrepare:
    """STREAM PREPARE: the streamed transaction ``xid`` is prepared under ``gid``."""

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
