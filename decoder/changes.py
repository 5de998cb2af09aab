"""What a committed transaction contains once replayed: row changes, truncates, messages.

Every change carries its transaction's commit LSN and commit time plus its ordinal inside
the transaction, so (commit_lsn, ordinal) orders all changes of a stream totally; the sink
uses it for last-change-per-key and for replay guards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from decoder.fastbuild import fast_constructor
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
    xid: int | None = None
    """The (top-level) transaction id, when the stream said it (replayed changes do)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TruncateChange:
    """TRUNCATE of one or more relations."""

    relations: tuple[Relation, ...]
    cascade: bool
    restart_identity: bool
    commit_lsn: Lsn
    commit_time: PgTimestamp
    ordinal: int
    xid: int | None = None


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


new_row_change: Final[
    Callable[
        [
            RowOperation,
            Relation,
            TupleData | None,
            TupleData | None,
            Literal["K", "O"] | None,
            Lsn,
            PgTimestamp,
            int,
            int | None,
        ],
        RowChange,
    ]
] = fast_constructor(RowChange)
"""``RowChange(...)`` with positional fields, without its constructor: replay makes one
per row change (``decoder.fastbuild``)."""
