"""What every sink accepts and promises: ``Batch``, ``BatchResult``, ``Sink`` and its errors,
and the capabilities a destination may declare besides (deferred upkeep, snapshot markers,
bulk appends of copied rows), each declared once, here.

The contract (after supabase/etl's ``destination/base.rs``):

* Input is at-least-once. After a crash the server re-sends every transaction after the
  slot's confirmed flush LSN, so a sink must tolerate the replay of any batch whose
  transactions are at or before the last durable one (docs/architecture.md, invariant 2).
* Changes arrive in commit order, and inside a transaction in ordinal order (invariant 3).
* ``apply`` returning means every change of the batch is durable; only then may capture
  acknowledge ``durable_lsn`` to the server (invariant 1).
* Errors are ``SinkError`` subclasses, classified once at the sink's boundary: a
  ``SinkRetryableError`` makes the service reconnect and replay from the last durable
  LSN, anything else stops it with a message that says what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, runtime_checkable

from decoder import Change, Lsn, PgTimestamp, Relation, Wal2DeltaError

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True, slots=True)
class Batch:
    """Changes of one or more transactions handed to a sink at once.

    Attributes:
        changes: in commit order, then ordinal order inside each transaction.
        durable_lsn: end LSN of the last transaction whose every change is in this or an
            earlier batch; None when the batch only holds part of a large transaction.
        transaction_count: transactions that end in this batch.
        last_commit_time: commit time of the newest transaction in the batch.
        release_held: apply, with this batch, every change a sink held back from earlier
            batches (``sink.table_min_rows``), and hold nothing back from this one: the
            sink worker sends such a batch, empty, when held changes reach their age
            limit while no batch comes, and the session before it ends.
        timeline: the server's timeline the changes were streamed on (``IDENTIFY_SYSTEM``),
            recorded with the batch so a later failover can tell whether the lake holds
            changes the promoted server never had; None when not known.
    """

    changes: tuple[Change, ...]
    durable_lsn: Lsn | None
    transaction_count: int
    last_commit_time: PgTimestamp | None
    release_held: bool = False
    timeline: int | None = None


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What applying a batch did.

    Attributes:
        rows_by_table: qualified table name -> {"insert": n, "update": n, "delete": n},
            counting the row changes of the batch (before folding per key).
        toast_anomalies: unchanged-TOAST updates whose row was missing in the target, so
            the row could not be written without inventing a value.
        duration_seconds: wall time of ``apply``.
        seconds_by_table: wall time of each table's MERGE (and TRUNCATE) steps.
        toast_anomalies_by_table: ``toast_anomalies`` per qualified table name.
        unrepresentable: (qualified table name, Delta column, reason) -> how many values
            of the batch were stored under their convention (``unrepresentable.py``).
        held_lsn: the commit LSN of the oldest change the sink holds back for a later
            batch (``sink.table_min_rows``), None when it holds none. That change and its
            transaction are not durable: the acknowledged position stays at or before it,
            whatever the batch's ``durable_lsn`` says (invariant 1).
        held_changes: how many changes the sink holds back after this batch.
        table_writes: the Delta writes the batch's steps made, by kind: ``merge``,
            ``append``, ``delete`` (a TRUNCATE), ``none`` (a step whose rows were all
            inserted and deleted within it); kinds with none left out.
    """

    rows_by_table: Mapping[str, Mapping[str, int]]
    toast_anomalies: int
    duration_seconds: float
    seconds_by_table: Mapping[str, float] = field(default_factory=dict)
    toast_anomalies_by_table: Mapping[str, int] = field(default_factory=dict)
    unrepresentable: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    held_lsn: Lsn | None = None
    held_changes: int = 0
    table_writes: Mapping[str, int] = field(default_factory=dict)


class Sink(Protocol):
    """A destination for committed changes; see the module docstring for the contract."""

    def apply(self, batch: Batch) -> BatchResult:
        """Make every change of ``batch`` durable, then return.

        Raises:
            SinkError: nothing of the batch may be assumed durable.
        """
        ...

    def close(self) -> None:
        """Release the sink's resources; the engine session is the caller's."""
        ...


@runtime_checkable
class DeferringSink(Protocol):
    """A sink that defers work no acknowledgement waits for.

    ``apply`` still makes every change durable before it returns; what waits is upkeep
    (``DeltaSink`` compacts tables after a batch, and writes its commit-log records with the
    next batch's intent). The sink worker calls ``after_apply`` once it has reported a
    batch durable, and ``settle`` once it has been idle for a moment (``DeltaSink.close``
    also writes its waiting commit-log records).
    """

    def after_apply(self) -> None:
        """Upkeep due after the batch just applied; failures are logged, never raised."""
        ...

    def settle(self) -> bool:
        """Upkeep deferred until the sink is idle, in a bounded piece; failures are logged,
        never raised. Returns whether some is still due: the worker calls again while it
        stays idle, so a batch that comes meanwhile waits for one piece at most."""
        ...


@runtime_checkable
class HoldingSink(Protocol):
    """A sink that may hold some changes of a batch back for a later batch.

    ``apply`` returns with every change of the batch durable except those it reports held
    (``BatchResult.held_lsn``), which nothing acknowledges until a later batch applies
    them. The sink worker applies an empty ``release_held`` batch when ``held_deadline``
    passes without a batch, and the session sends one before it ends.
    """

    def held_deadline(self) -> float | None:
        """When (``time.monotonic``) the changes held back for later batches must be
        applied - the sink worker then applies an empty ``release_held`` batch if no
        batch came - or None when the sink holds none."""
        ...

    def discard_held(self) -> None:
        """Forget the changes held back: they were never acknowledged, and the server sends
        them again to the next session (called when the worker is replaced after a
        failure, so they are not applied twice in one batch)."""
        ...


SnapshotStatus = Literal["in_progress", "complete"]


@dataclass(frozen=True, slots=True)
class SnapshotMarker:
    """What a sink records about the initial snapshot of one slot."""

    slot: str
    status: SnapshotStatus
    consistent_point: Lsn


@runtime_checkable
class SnapshotMarkerStore(Protocol):
    """A sink that records snapshot progress next to the data it writes."""

    def load_snapshot_marker(self, slot: str) -> SnapshotMarker | None:
        """The recorded state of ``slot``'s snapshot; None when nothing is recorded."""
        ...

    def save_snapshot_marker(self, marker: SnapshotMarker) -> None:
        """Record ``marker``, replacing any earlier record of its slot."""
        ...


@dataclass(frozen=True, slots=True)
class WrittenTimeline:
    """The newest server timeline the lake's batches were streamed on, and the newest commit
    LSN any batch streamed on it may have written (``CommitLog.written_timeline``).

    Attributes:
        timeline: None when no batch recorded one (a lake written before timelines were
            recorded); ``high_lsn`` is then the newest commit LSN of any batch.
        high_lsn: None when nothing was written on ``timeline`` since the lake accepted it
            (``TimelineStore.accept_timeline``).
    """

    timeline: int | None
    high_lsn: Lsn | None


@runtime_checkable
class TimelineStore(Protocol):
    """A sink that records the server timeline of every batch next to the data it writes."""

    def written_timeline(self) -> WrittenTimeline | None:
        """The newest timeline recorded, with its highest LSN; None for a lake that holds
        no batch."""
        ...

    def accept_timeline(self, timeline: int) -> None:
        """Record that the lake follows ``timeline`` from now on, without a batch."""
        ...


class CopyTarget(Protocol):
    """A table a ``BulkSnapshotSink`` prepared for appends; opaque but for its name."""

    @property
    def table(self) -> str:
        """``schema.table`` of the source."""
        ...


@runtime_checkable
class BulkSnapshotSink(Protocol):
    """A sink that takes copied rows as bulk appends of Arrow batches (``bulk.py``)."""

    def begin_bulk(
        self, relation: Relation, lsn: Lsn, commit_time: PgTimestamp
    ) -> CopyTarget | None:
        """Prepare ``relation``'s table for appends at ``lsn``; None: copy through ``apply``."""
        ...

    def append_bulk(
        self, target: CopyTarget, strings: pa.RecordBatch | pa.Table, first_ordinal: int
    ) -> int:
        """Append rows; called from several workers at once, also for one table."""
        ...

    def finish_bulk(self, targets: Sequence[CopyTarget]) -> None:
        """Record the appended tables as ``apply`` records a batch."""
        ...


@runtime_checkable
class OnlineCopySink(Protocol):
    """A sink that takes a table's copy while streaming (``copies.py``): the copy is
    appended to a staging table and replaces the table in one commit; the table's changes
    are dropped meanwhile (held in the acknowledgement) and, after the stream is rewound,
    skipped before the copy's consistent point."""

    def request_copies(self, tables: Sequence[str], reason: str) -> None:
        """Record that ``tables`` are to be copied (unless requested or copying already)."""
        ...

    def copy_requests(self) -> list[tuple[str, str]]:
        """``(table, reason)`` of every copy requested or interrupted, oldest first."""
        ...

    def start_copies(self, tables: Sequence[str], reason: str) -> None:
        """Drop the changes of ``tables`` from now on: their copies begin."""
        ...

    def begin_copy(self, relation: Relation, lsn: Lsn, commit_time: PgTimestamp) -> CopyTarget:
        """A fresh staging table for ``relation``'s copy at ``lsn`` (for ``append_bulk``)."""
        ...

    def append_bulk(
        self, target: CopyTarget, strings: pa.RecordBatch | pa.Table, first_ordinal: int
    ) -> int:
        """Append copied rows; called from several workers at once, also for one table."""
        ...

    def finish_copy(self, relation: Relation, target: CopyTarget, lsn: Lsn, reason: str) -> None:
        """Replace the table by its copy in one commit."""
        ...

    def finish_empty_copy(self, table: str, lsn: Lsn, reason: str) -> None:
        """A requested table is not published at ``lsn``: nothing to copy; done."""
        ...

    def copy_new_tables(self) -> None:
        """From now on, copy a table whose first change finds neither a Delta table nor a
        copy record (it joined the publications) before applying its changes."""
        ...

    def knows_table(self, schema: str, table: str) -> bool:
        """Whether the table has a Delta table or a copy record (new tables have neither)."""
        ...

    def abandon_copy(self, table: str, reason: str) -> None:
        """A copy failed: the table's changes are applied again; it stays requested."""
        ...

    def copy_rewind_due(self) -> bool:
        """A copy landed (or failed after dropping changes): the stream must restart from
        the acknowledged position so the dropped changes come again."""
        ...

    def tables_copying(self) -> list[str]:
        """Tables whose changes are dropped now."""
        ...


@dataclass(frozen=True, slots=True)
class SinkParts:
    """The objects a sink hands capture to hold beside it: each does one job the stream
    needs besides applying batches; None where the sink has no such part.

    Attributes:
        markers: records whether a slot's initial snapshot finished.
        bulk: takes the initial snapshot's rows as bulk appends.
        copies: copies tables while the stream runs.
        timeline: records the server timeline the lake follows.
    """

    markers: SnapshotMarkerStore | None = None
    bulk: BulkSnapshotSink | None = None
    copies: OnlineCopySink | None = None
    timeline: TimelineStore | None = None


def parts_of(sink: Sink) -> SinkParts:
    """The parts of ``sink``: its ``parts`` (``DeltaSink``), or the sink itself for each
    part's protocol it keeps (a sink with one job each, as the tests' model sinks are)."""
    parts = getattr(sink, "parts", None)
    if isinstance(parts, SinkParts):
        return parts
    return SinkParts(
        markers=sink if isinstance(sink, SnapshotMarkerStore) else None,
        bulk=sink if isinstance(sink, BulkSnapshotSink) else None,
        copies=sink if isinstance(sink, OnlineCopySink) else None,
        timeline=sink if isinstance(sink, TimelineStore) else None,
    )


class SinkError(Wal2DeltaError):
    """The sink could not apply a batch; terminal unless a subclass says otherwise."""


class SinkRetryableError(SinkError):
    """A transient engine failure (connectivity, concurrent commit): replay and retry."""

    retryable: ClassVar[bool] = True


class SinkStoreError(SinkRetryableError):
    """The object store failed transiently (throttling, a 5xx answer, a timeout or a reset
    connection) while the engine or delta-rs read or wrote the lake.

    Retried by the supervisor with its own bound (``sink.store_retries``), which counts
    store failures in a row; past it the error is terminal.

    Attributes:
        operation: what was being done, one of ``sink.spark.STORE_OPERATIONS``: the
            ``operation`` label of ``wal2delta_store_retries_total``.
        store_error: the store's own error in one line (status, S3 error code or transport
            failure, and the request), secrets masked.
    """

    def __init__(self, message: str, *, operation: str, store_error: str) -> None:
        super().__init__(message)
        self.operation = operation
        self.store_error = store_error

    def __reduce__(self) -> tuple[object, ...]:
        return (_store_error, (str(self), self.operation, self.store_error))


def _store_error(message: str, operation: str, store_error: str) -> SinkStoreError:
    return SinkStoreError(message, operation=operation, store_error=store_error)


class SinkDataError(SinkError):
    """The data cannot be written as it is (type, key or identity problem); terminal."""
