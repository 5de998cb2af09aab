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


class RowChangeBuilder:
    """``RowChange``'s slot layout with plain, writable slots: replay's fast constructor.

    Internal to the decoder (not exported).

    A frozen dataclass's ``__init__`` assigns every field through ``object.__setattr__``,
    which costs about as much as the rest of replaying a row. ``new_row_change`` fills an
    instance of this class with ordinary slot stores and then turns it into a
    ``RowChange`` by assigning ``__class__``, which CPython allows between classes with
    identical slots. The result is a genuine ``RowChange`` (type, equality, hash, repr,
    pickling, immutability); replay makes one per row change.
    """

    __slots__ = RowChange.__slots__

    def __init__(  # noqa: PLR0917 - positional on purpose: one call per replayed row
        self,
        op: RowOperation,
        relation: Relation,
        new: TupleData | None,
        old: TupleData | None,
        old_kind: Literal["K", "O"] | None,
        commit_lsn: Lsn,
        commit_time: PgTimestamp,
        ordinal: int,
    ) -> None:
        self.op = op
        self.relation = relation
        self.new = new
        self.old = old
        self.old_kind = old_kind
        self.commit_lsn = commit_lsn
        self.commit_time = commit_time
        self.ordinal = ordinal


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
    """Build a ``RowChange`` equal to the constructor's, about twice as fast (see above)."""
    change = RowChangeBuilder(op, relation, new, old, old_kind, commit_lsn, commit_time, ordinal)
    change.__class__ = RowChange  # type: ignore[assignment]
    return change  # type: ignore[return-value]
