"""Spooled transactions and their replay: the "spool" and "replay" of read, spool, replay.

Theory of operation: the assembler appends the raw bytes of each data and schema message
to its transaction's ``ChangeBuffer`` (a ``SpooledTransaction``) and, once the
transaction commits, hands it to the ``ReplayQueue``. The queue keeps committed
transactions in commit order, interleaved with the schema steps of prepared transactions
(a PREPARE makes its RELATION/TYPE messages effective for what is replayed after it), and
owns the relation cache. ``ReplayQueue.replay`` reads one transaction back: RELATION and
TYPE records update the cache where they stand among the changes, so every change meets
the schema that was current when it was made, however late the caller replays.

Row records are nearly all of a stream, and they were validated when they arrived, so
replay reads only their header (relation id, tuple marker) and hands out
``TupleData.from_wire`` tuples whose columns are split when first read. After each row
change the kernel's ``replay_rows`` (``decoder.native``) replays the run of inserts,
updates without an old tuple and deletes of the same relation that follows, building the
same objects; the record that ends the run (an update with its old tuple, another
relation's row, any other message) comes back to the Python loop, which stays the
reference. Every other record goes through ``parse_message``; no row record does (the row
branch takes every INSERT, UPDATE and DELETE tag, and ``parse_message`` makes those
classes only from those tags).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

from decoder.changes import (
    Change,
    MessageChange,
    RowChange,
    RowOperation,
    TruncateChange,
    new_row_change,
)
from decoder.errors import DecodeError, ProtocolSequenceError
from decoder.lsn import Lsn, Xid, format_lsn
from decoder.messages import (
    Begin,
    BeginPrepare,
    LogicalMessage,
    Relation,
    Truncate,
    TupleData,
    Type,
)
from decoder.messages import new_wire_tuple as _new_wire_tuple
from decoder.native import COMPILED
from decoder.options import ProtocolOptions
from decoder.outputs import CommittedTransaction
from decoder.parser import ROW_MESSAGE_TYPES, parse_message, row_parts
from decoder.relations import RelationCache
from decoder.spill import ChangeBuffer
from decoder.wire import U32

_replay_rows = None if COMPILED is None else COMPILED.replay_rows
"""The kernel's loop over a run of plain row records (``ReplayQueue._chunks``); None
without the kernel, when every record takes the Python loop, the reference."""

_TALLIED_OPERATIONS: tuple[tuple[int, RowOperation], ...] = (
    (0x49, "insert"),
    (0x55, "update"),
    (0x44, "delete"),
)


@dataclass(slots=True)
class ChunkLimits:
    """How large the next chunk of a ``replay_chunks`` may grow; the caller may change the
    limits between two chunks (they are read when a chunk starts).

    A chunk ends with the change that makes it ``max_changes`` long or brings its weight to
    ``max_weight`` (negative: no limit); it has at least one change. A change weighs its
    message bytes (a logical message: its content) plus ``change_overhead``.
    """

    max_changes: int = 512
    max_weight: int = -1
    change_overhead: int = 0


@dataclass(frozen=True, slots=True)
class ReplayChunk:
    """Consecutive changes of a replayed transaction and their weight (``ChunkLimits``)."""

    changes: list[Change]
    weight: int


@dataclass(slots=True)
class Subxact:
    """Where a subtransaction's first record starts (worker.c ``SubXactInfo``)."""

    xid: int
    mark: int
    change_count: int
    schema_count: int


class SpooledTransaction:
    """An open, held or committed transaction: its buffer and what releasing it needs."""

    __slots__ = (
        "begin",
        "buffer",
        "change_count",
        "origin",
        "origin_lsn",
        "schema_records",
        "streamed",
        "subxact_xids",
        "subxacts",
        "xid",
    )

    def __init__(
        self,
        buffer: ChangeBuffer,
        *,
        xid: Xid,
        streamed: bool,
        begin: Begin | BeginPrepare | None = None,
    ) -> None:
        self.buffer = buffer
        self.xid = xid
        self.streamed = streamed
        self.begin = begin
        self.change_count = 0
        self.origin: str | None = None
        self.origin_lsn: Lsn | None = None
        # Raw RELATION/TYPE records, in order: applied at PREPARE time, by ``discard`` and
        # after a replay that was not read to its end.
        self.schema_records: list[bytes] = []
        self.subxacts: list[Subxact] = []
        self.subxact_xids: set[int] = set()


@dataclass(slots=True)
class _ReplaySlot:
    """A committed transaction waiting for its replay."""

    sequence: int
    txn: SpooledTransaction


@dataclass(slots=True)
class _SchemaStep:
    """Schema records of a prepared transaction, effective from its PREPARE on."""

    records: tuple[bytes, ...]
    streamed: bool


class ReplayQueue:
    """Committed transactions in commit order, the relation cache, and their replay.

    Args:
        options: the options the stream was started with (records are re-parsed).
        failed: tells whether the owning assembler is in ``ERROR``.
        fail: puts the owning assembler in ``ERROR`` (a replay found bad input).
    """

    def __init__(
        self, options: ProtocolOptions, *, failed: Callable[[], bool], fail: Callable[[], None]
    ) -> None:
        self._options = options
        self._failed = failed
        self._fail = fail
        self._queue: deque[_ReplaySlot | _SchemaStep] = deque()
        self._next_sequence = 0
        self._replaying = False
        self.relations = RelationCache()
        """The relation cache as of the last replayed transaction."""

    def commit(self, txn: SpooledTransaction) -> int:
        """Queue a committed transaction; return its sequence (the replay-order key)."""
        sequence = self._next_sequence
        self._next_sequence += 1
        self._queue.append(_ReplaySlot(sequence, txn))
        return sequence

    def prepare(self, txn: SpooledTransaction) -> None:
        """Make a prepared transaction's schema records effective from here on."""
        if txn.schema_records:
            self._queue.append(_SchemaStep(tuple(txn.schema_records), txn.streamed))

    @property
    def spilled_bytes(self) -> int:
        """Bytes on disk across the queued transactions."""
        return sum(
            item.txn.buffer.spilled_bytes for item in self._queue if isinstance(item, _ReplaySlot)
        )

    def replay(self, txn: CommittedTransaction) -> Iterator[Change]:
        """See ``Assembler.replay``."""
        return _one_by_one(self.replay_chunks(txn, ChunkLimits(), {}, {}))

    def replay_chunks(
        self,
        txn: CommittedTransaction,
        limits: ChunkLimits,
        counts: dict[tuple[int, str], int],
        relations: dict[tuple[int, str], Relation],
    ) -> Generator[ReplayChunk, None, None]:
        """See ``Assembler.replay_chunks``."""
        slot = self._take_replay_slot(txn)
        self._replaying = True
        return self._chunks(txn, slot.txn, limits, counts, relations)

    def discard(self, txn: CommittedTransaction) -> None:
        """See ``Assembler.discard``."""
        slot = self._take_replay_slot(txn)
        try:
            self._apply_schema(slot.txn.schema_records, slot.txn.streamed)
        finally:
            slot.txn.buffer.close()

    def _take_replay_slot(self, txn: CommittedTransaction) -> _ReplaySlot:
        if self._replaying:
            raise ProtocolSequenceError(
                "the previous transaction's replay is unfinished; read its iterator to the "
                "end or close it first",
                offset=0,
                message_type="COMMIT",
                xid=txn.xid,
            )
        queue = self._queue
        while queue and isinstance(queue[0], _SchemaStep):
            step = queue.popleft()
            assert isinstance(step, _SchemaStep)
            self._apply_schema(step.records, step.streamed)
        head = queue[0] if queue else None
        if not isinstance(head, _ReplaySlot) or head.sequence != txn.sequence:
            raise ProtocolSequenceError(
                f"transaction {txn.xid} committed at {format_lsn(txn.commit_lsn)} is not the "
                f"next one to replay; replay each committed transaction once, in commit order",
                offset=0,
                message_type="COMMIT",
                xid=txn.xid,
            )
        queue.popleft()
        return head

    def _apply_schema(self, records: tuple[bytes, ...] | list[bytes], streamed: bool) -> None:
        for record in records:
            message = parse_message(record, options=self._options, in_stream=streamed)
            assert isinstance(message, Relation | Type)
            self.relations.apply(message)

    def _relation(
        self, relation_id: int, event: str, txn: CommittedTransaction, streamed: bool
    ) -> Relation:
        relation = self.relations.relation(relation_id)
        if relation is None:
            self._fail()
            raise ProtocolSequenceError(
                f"relation {relation_id} is unknown: no RELATION message described it "
                f"before this change",
                offset=5 if streamed else 1,
                message_type=event,
                xid=txn.xid,
            )
        return relation

    def _chunks(
        self,
        committed: CommittedTransaction,
        txn: SpooledTransaction,
        limits: ChunkLimits,
        counts: dict[tuple[int, str], int],
        relations: dict[tuple[int, str], Relation],
    ) -> Generator[ReplayChunk, None, None]:
        options = self._options
        streamed = txn.streamed
        commit_lsn = committed.commit_lsn
        commit_time = committed.commit_time
        xid = txn.xid
        apply_schema = self.relations.apply
        schema_seen = 0
        ordinal = 0
        finished = False
        by_id = self.relations.by_id
        known_relation = by_id.get
        # Row records: relation id, marker, and the tuple left unsplit for whoever reads
        # it. This loop runs once per change of the stream, so it avoids calls it can.
        id_at = 5 if streamed else 1
        marker_at = id_at + 4
        tuple_at = marker_at + 1
        unpack_id = U32.unpack_from
        row_types = ROW_MESSAGE_TYPES
        overhead = limits.change_overhead
        counts_get = counts.get
        chunk: list[Change] = []
        append = chunk.append
        weight = 0
        max_changes = limits.max_changes
        max_weight = limits.max_weight
        change: Change
        key: tuple[int, str]
        # Row changes are tallied per relation object and tag byte (a list index is
        # cheaper than a dict update per change) and added to ``counts`` at the end.
        tallies: dict[int, tuple[Relation, list[int]]] = {}
        tallied: Relation | None = None
        tally: list[int] = []
        # After each row change, the kernel replays the plain rows (inserts, updates without
        # an old tuple, deletes) of its relation that follow (``replay_rows``), as this loop
        # would; the record that ends the run comes back here. Without the kernel every
        # record takes this loop.
        bulk = _replay_rows
        records = iter(txn.buffer)
        record: bytes | None = next(records, None)
        try:
            while record is not None:
                tag = record[0]
                if tag in row_types:
                    relation = known_relation(unpack_id(record, id_at)[0])
                    if relation is None:
                        relation = self._relation(
                            unpack_id(record, id_at)[0], row_types[tag], committed, streamed
                        )
                    if tag == 0x49 or (tag == 0x55 and record[marker_at] == 0x4E):
                        # INSERT, or UPDATE with only its new tuple ('U' ... 'N').
                        op: RowOperation = "insert" if tag == 0x49 else "update"
                        change = new_row_change(
                            op,
                            relation,
                            _new_wire_tuple(record, tuple_at),
                            None,
                            None,
                            commit_lsn,
                            commit_time,
                            ordinal,
                            xid,
                        )
                    else:
                        _, op, old_kind, old, new = row_parts(record, streamed)
                        change = new_row_change(
                            op, relation, new, old, old_kind, commit_lsn, commit_time, ordinal, xid
                        )
                    if relation is not tallied:
                        tallied = relation
                        tally = tallies.setdefault(id(relation), (relation, [0] * 256))[1]
                    tally[tag] += 1
                    weight += overhead + len(record)
                else:
                    message = parse_message(record, options=options, in_stream=streamed)
                    match message:
                        case Relation() | Type():
                            apply_schema(message)
                            schema_seen += 1
                            record = next(records, None)
                            continue
                        case Truncate():
                            change = TruncateChange(
                                relations=tuple(
                                    self._relation(relation_id, "TRUNCATE", committed, streamed)
                                    for relation_id in message.relation_ids
                                ),
                                cascade=message.cascade,
                                restart_identity=message.restart_identity,
                                commit_lsn=commit_lsn,
                                commit_time=commit_time,
                                ordinal=ordinal,
                                xid=xid,
                            )
                            for truncated in change.relations:
                                key = (id(truncated), "truncate")
                                relations[key] = truncated
                                counts[key] = counts_get(key, 0) + 1
                            weight += overhead
                        case LogicalMessage():
                            change = MessageChange(
                                prefix=message.prefix,
                                content=message.content,
                                lsn=message.lsn,
                                transactional=True,
                                commit_lsn=commit_lsn,
                                commit_time=commit_time,
                                ordinal=ordinal,
                            )
                            weight += overhead + len(message.content)
                        case _:
                            # Row messages never get here (module docstring); nothing else
                            # is spooled.
                            raise AssertionError(f"{type(message).__name__} is never spooled")
                ordinal += 1
                append(change)
                # A row change: the kernel goes on with the plain rows of its relation (it
                # stops at once when the chunk is full) and answers the record after them,
                # or None when it read none past them.
                if bulk is not None and tag in row_types:
                    ordinal, weight, inserts, updates, deletes, record = bulk(
                        records,
                        by_id,
                        relation,
                        RowChange,
                        TupleData,
                        id_at,
                        commit_lsn,
                        commit_time,
                        xid,
                        ordinal,
                        chunk,
                        weight,
                        max_changes,
                        max_weight,
                        overhead,
                    )
                    tally[0x49] += inserts
                    tally[0x55] += updates
                    tally[0x44] += deletes
                else:
                    record = None
                if len(chunk) >= max_changes or weight >= max_weight >= 0:
                    yield ReplayChunk(chunk, weight)
                    chunk = []
                    append = chunk.append
                    weight = 0
                    max_changes = limits.max_changes
                    max_weight = limits.max_weight
                if record is None:
                    record = next(records, None)
            if chunk:
                yield ReplayChunk(chunk, weight)
            finished = True
            for relation_id, (relation, tally) in tallies.items():
                for tag, op in _TALLIED_OPERATIONS:
                    if tally[tag]:
                        key = (relation_id, op)
                        relations[key] = relation
                        counts[key] = counts_get(key, 0) + tally[tag]
        except DecodeError:
            self._fail()
            raise
        finally:
            if not finished and not self._failed():
                # Closed early: later transactions may rely on the rest of the schema.
                self._apply_schema(txn.schema_records[schema_seen:], streamed)
            txn.buffer.close()
            self._replaying = False


def _one_by_one(chunks: Generator[ReplayChunk, None, None]) -> Iterator[Change]:
    """The changes of ``chunks``; closing this iterator closes ``chunks`` (its clean-up)."""
    try:
        for chunk in chunks:
            yield from chunk.changes
    finally:
        chunks.close()
