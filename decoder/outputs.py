"""What ``Assembler.feed`` reports: committed, prepared, rolled back and aborted
transactions, and messages outside any transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from decoder.lsn import Lsn, PgTimestamp, Xid


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedTransaction:
    """A transaction whose changes are final; ``Assembler.replay`` yields them.

    Attributes:
        kind: ``commit`` (BEGIN ... COMMIT), ``stream_commit`` or ``commit_prepared``.
        xid: the top-level transaction id.
        gid: the prepared transaction's gid, for ``commit_prepared``.
        commit_lsn: LSN of the commit record.
        end_lsn: end of the commit record: what the flush position may reach once the
            transaction is durable.
        commit_time: commit timestamp, microseconds since 2000-01-01 UTC.
        origin: replication origin name when the transaction came from another node.
        origin_lsn: the commit LSN on the origin node (0 for streamed transactions).
        change_count: DML, TRUNCATE and MESSAGE records that ``replay`` yields.
        sequence: position among the outputs of one assembler; replay order key.
    """

    kind: Literal["commit", "stream_commit", "commit_prepared"]
    xid: Xid | None
    gid: str | None
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_time: PgTimestamp
    origin: str | None
    origin_lsn: Lsn | None
    change_count: int
    sequence: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionPrepared:
    """A prepared transaction, held until COMMIT PREPARED or ROLLBACK PREPARED."""

    xid: Xid
    gid: str
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_time: PgTimestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionRolledBack:
    """ROLLBACK PREPARED: the held transaction (if we had it) is gone for good."""

    gid: str
    prepare_end_lsn: Lsn
    rollback_end_lsn: Lsn
    rollback_time: PgTimestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamAborted:
    """STREAM ABORT of a streamed transaction (``subxid == xid``) or of a subtransaction."""

    xid: Xid
    subxid: Xid
    abort_lsn: Lsn | None
    abort_time: PgTimestamp | None


@dataclass(frozen=True, slots=True, kw_only=True)
class NonTransactionalMessage:
    """A ``pg_logical_emit_message(false, ...)`` message; it belongs to no transaction."""

    lsn: Lsn
    prefix: str
    content: bytes


AssemblerOutput = (
    CommittedTransaction
    | TransactionPrepared
    | TransactionRolledBack
    | StreamAborted
    | NonTransactionalMessage
)
