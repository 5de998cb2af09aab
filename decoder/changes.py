"""What a committed transaction contains once replayed: row changes, truncates, messages.

Every change carries its transaction's commit LSN and commit time plus its ordinal inside
the transaction, so (commit_lsn, ordinal) orders all changes of a stream totally; the sink
uses it for last-change-per-key and for replay guards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from decoder.lsn import Lsn, PgTimestamp
from decoder.messages import Relation, TupleData

RowOperation = Literal["insert", "update", "delete"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RowChange:
    """An INSERT, UPDATE or DELETE of one row, with the relation as it was at that point."""

    op: RowOperation
    relation: Relation
    new: TupleData | None
    old: TupleData | None
    old_kind: Literal["K", "O"] | None
    commit_lsn: Lsn
    commit_time: PgTimestamp
    ordinal: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TruncateChange:
    """TRUNCATE of one or more relations."""

    relations: tuple[Relation, ...]
    cascade: bool
    restart_identity: bool
    commit_lsn: Lsn
    commit_time: PgTimestamp
    ordinal: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageChange:
    """A logical decoding message (``pg_logical_emit_message``)."""

    prefix: str
    content: bytes
    lsn: Lsn
    transactional: bool
    commit_lsn: Lsn | None
    commit_time: PgTimestamp | None
    ordinal: int


Change = RowChange | TruncateChange | MessageChange


_new_object = object.__new__
_ROW_CHANGE_SETTERS = tuple(
    RowChange.__dict__[name].__set__
    for name in ("op", "relation", "new", "old", "old_kind", "commit_lsn", "commit_time", "ordinal")
)


def new_row_change(  # noqa: PLR0917 - positional on purpose: one call per replayed row
    op: RowOperation,
    relation: Relation,
    new: TupleData | None,
    old: TupleData | None,
    old_kind: Literal["K", "O"] | None,
    commit_lsn: Lsn,
    commit_time: PgTimestamp,
    ordinal: int,
) -> RowChange:
    """Build a ``RowChange`` as its constructor does, several times faster (replay's path).

    A frozen dataclass's ``__init__`` assigns every field through ``object.__setattr__``;
    setting the slots through their descriptors skips that and builds an identical object
    (same type, equality, hash, repr, pickling). Replay makes one per row change.
    """
    change = _new_object(RowChange)
    s_op, s_relation, s_new, s_old, s_old_kind, s_lsn, s_time, s_ordinal = _ROW_CHANGE_SETTERS
    s_op(change, op)
    s_relation(change, relation)
    s_new(change, new)
    s_old(change, old)
    s_old_kind(change, old_kind)
    s_lsn(change, commit_lsn)
    s_time(change, commit_time)
    s_ordinal(change, ordinal)
    return change
