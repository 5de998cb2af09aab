"""Reassembles pgoutput messages into committed transactions: an explicit state machine.

Theory of operation
-------------------
``Assembler.feed`` takes one XLogData payload at a time. It parses the message (with the
xid prefix when inside a stream block), looks the pair (current state, message) up in
``TRANSITIONS`` (``transitions.py``) and, only if the pair is there, hands the message to
its handler. A pair that is not in the table, or a handler check that fails (an unknown
stream xid, a COMMIT whose LSN is not the BEGIN's ``final_lsn``...), raises
``ProtocolSequenceError`` *before* anything is changed; afterwards the assembler is in
``ERROR`` and refuses every further input, as h11's ``Connection`` does. The caller
reconnects from its last durable LSN with a new assembler: the server sends everything
after that position again.

States (``AssemblerState``) are where we are in the message flow; open transactions are
data, not states, because several streamed transactions can be open at once:

* ``IDLE``: between transactions and stream blocks.
* ``IN_TRANSACTION``: between BEGIN and COMMIT.
* ``IN_PREPARED_TRANSACTION``: between BEGIN PREPARE and PREPARE.
* ``IN_STREAM_BLOCK``: between STREAM START and STREAM STOP.
* ``ERROR``: after any error; terminal.

Read, spool, replay (worker.c's split). Data and schema messages are not interpreted when
they arrive: they are validated and their raw bytes are appended to the transaction's
``ChangeBuffer`` (a ``SpooledTransaction``). Only a *committed* transaction is read back
(``replay``, delegated to ``replay.ReplayQueue``), and only then are RELATION and TYPE
messages applied to the relation cache, in their place among the changes. The outputs of
``feed`` are in ``outputs.py``.

Row messages are nearly all of a stream, so they take a fast path at both ends (see
``docs/performance-log.md``). ``feed`` proves a row message valid with
``row_message_is_valid``, which builds nothing (``tupledata.walk_tuple`` without
output); only when it cannot (a damaged message, or
a state the fast path does not cover) does the general path parse it and raise the
precise error. ``feed_row_frames`` does what that fast path does for a whole run of
XLogData frames in one call (the kernel's ``absorb``), and stops, untouched, at the first
frame ``feed`` would treat otherwise. ``replay`` then reads just the row header and hands out
``TupleData.from_wire`` tuples, whose columns are split when first read, so the bytes of
a column are walked once at feed and once by whoever converts the values. Replays happen
once each, in the order the commits arrived, so the cache always holds the schema that
was current when a change was made, even when the caller replays long after feeding.

Streamed transactions (protocol 2+, worker.c ``apply_handle_stream_*``):

* STREAM START(xid) opens the buffer of the *top-level* xid (``first_segment``) or
  continues it. Inside the block, the xid prefix of each message is the
  *sub*transaction's; the buffer offset before the first record of each subxid is
  recorded, as ``subxact_info_add`` does.
* STREAM ABORT(xid, subxid) with ``subxid == xid`` drops the whole transaction; otherwise
  the buffer is truncated to the offset recorded for ``subxid`` and the subxids recorded
  after it are forgotten (``stream_abort_internal``). An abort of a subxid that has no
  record, or of an xid that was never streamed here, changes nothing.
* RELATION and TYPE messages in a block travel with the transaction, so the schema change
  of an aborted (sub)transaction never reaches the cache. pgoutput sends a relation's
  schema again in every streamed transaction and after every abort for this reason
  (``maybe_send_schema``, ``cleanup_rel_sync_cache``).
* STREAM COMMIT, STREAM ABORT and STREAM PREPARE are legal only outside a block
  (``pgoutput_stream_commit``/``_abort`` assert ``!in_streaming``).

Two-phase transactions (protocol 3+): BEGIN PREPARE ... PREPARE and STREAM PREPARE hold the
transaction by gid and report ``TransactionPrepared``. COMMIT PREPARED releases it as a
``CommittedTransaction(kind="commit_prepared")``; ROLLBACK PREPARED drops it and reports
``TransactionRolledBack``. A PREPARE also makes the transaction's RELATION/TYPE messages
take effect for the transactions replayed after it: pgoutput marks a schema as sent when
it sends it inside a prepared transaction, so a transaction that commits before the
COMMIT PREPARED may rely on it without carrying it.

Memory: records go through the injected buffer factory; ``spilling_buffers`` moves any
transaction past its limit to disk (``spill.py``), streamed or not. The assembler itself
keeps per transaction a few counters, the subtransaction offsets and the (small) schema
records.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, assert_never

from decoder.changes import Change
from decoder.errors import DecodeError, ProtocolSequenceError
from decoder.lsn import Xid, format_lsn
from decoder.messages import (
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
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
)
from decoder.options import ProtocolOptions
from decoder.outputs import (
    AssemblerOutput,
    CommittedTransaction,
    NonTransactionalMessage,
    StreamAborted,
    TransactionPrepared,
    TransactionRolledBack,
)
from decoder.parser import (
    ROW_MESSAGE_TYPES,
    parse_message,
    row_message_is_valid,
    scan_row_message,
)
from decoder.relations import RelationCache
from decoder.replay import ChunkLimits, ReplayChunk, ReplayQueue, SpooledTransaction, Subxact
from decoder.spill import AbsorbedFrames, ChangeBufferFactory, MemoryChangeBuffer
from decoder.transitions import (
    MESSAGE_EVENTS,
    STREAM_EVENTS,
    TRANSITIONS,
    AssemblerState,
    message_event,
)


def _row_xid(data: bytes, in_stream: bool) -> Xid | None:
    """The xid prefix of a valid row message inside a stream block."""
    return Xid(int.from_bytes(data[1:5], "big")) if in_stream else None


@dataclass(slots=True)
class _Held:
    """A prepared transaction waiting for COMMIT PREPARED or ROLLBACK PREPARED."""

    txn: SpooledTransaction
    prepared: TransactionPrepared


class Assembler:
    """Turns a stream of pgoutput messages into committed transactions.

    Args:
        options: the options the stream was started with.
        buffers: makes the buffer of each transaction; ``MemoryChangeBuffer`` by default,
            ``spilling_buffers(...)`` to bound memory.
    """

    def __init__(
        self, options: ProtocolOptions, *, buffers: ChangeBufferFactory | None = None
    ) -> None:
        self._options = options
        self._buffers: ChangeBufferFactory = buffers or MemoryChangeBuffer
        self._state = AssemblerState.IDLE
        self._current: SpooledTransaction | None = None
        self._streams: dict[int, SpooledTransaction] = {}
        self._stream_xid: Xid | None = None
        self._prepared: dict[str, _Held] = {}
        self._replays = ReplayQueue(options, failed=self._failed, fail=self._fail)

    # ------------------------------------------------------------------ observation

    @property
    def options(self) -> ProtocolOptions:
        """The protocol options this assembler parses with."""
        return self._options

    @property
    def state(self) -> AssemblerState:
        """The current state."""
        return self._state

    @property
    def idle(self) -> bool:
        """True between transactions: no transaction, stream block or streamed xid open.

        Prepared transactions do not count: they are reported by ``TransactionPrepared``.
        """
        return self._state is AssemblerState.IDLE and not self._streams

    @property
    def open_streamed_transactions(self) -> int:
        """Streamed transactions started and not yet committed, aborted or prepared."""
        return len(self._streams)

    @property
    def prepared_transactions(self) -> int:
        """Prepared transactions waiting for COMMIT PREPARED or ROLLBACK PREPARED."""
        return len(self._prepared)

    @property
    def spilled_bytes(self) -> int:
        """Bytes on disk across every open, held and not yet replayed transaction."""
        total = 0
        if self._current is not None:
            total += self._current.buffer.spilled_bytes
        total += sum(txn.buffer.spilled_bytes for txn in self._streams.values())
        total += sum(held.txn.buffer.spilled_bytes for held in self._prepared.values())
        total += self._replays.spilled_bytes
        return total

    @property
    def relations(self) -> RelationCache:
        """The relation cache as of the last replayed transaction. Read it, do not change it."""
        return self._replays.relations

    # ------------------------------------------------------------------------- input

    def feed_row_frames(self, frames: list[bytes], start: int) -> AbsorbedFrames | None:
        """Take the run of row messages at ``frames[start:]`` as ``feed`` would, in bulk.

        ``frames`` are XLogData frames as received. Inside BEGIN ... COMMIT ``feed`` only
        checks a row message and appends it to the transaction's buffer; this does the
        same for a whole run of them in one call (``ChangeBuffer.absorb_frames``), and
        ``feed`` stays the reference: the run ends, untouched, at the first frame it
        would treat otherwise (another message, a keepalive, a damaged message, a record
        that would spill). None when no run can be taken here (another state, or a buffer
        that takes none): feed every frame.
        """
        if self._state is not AssemblerState.IN_TRANSACTION:
            return None
        txn = self._current
        assert txn is not None
        absorbed = txn.buffer.absorb_frames(frames, start)
        if absorbed is not None:
            txn.change_count += absorbed.records
        return absorbed

    def feed(self, wal_start: int, payload: bytes | memoryview) -> list[AssemblerOutput]:
        """Process one pgoutput message.

        Args:
            wal_start: the XLogData frame's start LSN; attached to errors.
            payload: the XLogData payload.

        Returns:
            What the message completed, usually nothing or one output.

        Raises:
            MalformedMessageError: the bytes are not a valid message.
            ProtocolSequenceError: the message is not legal here; nothing was changed.
                After either error the assembler is in ``ERROR`` and refuses all input.
        """
        state = self._state
        if state is AssemblerState.ERROR:
            raise ProtocolSequenceError(
                "the assembler stopped at an earlier error; reconnect from the last "
                "durable LSN with a new Assembler",
                offset=0,
                message_type="UNKNOWN",
                wal_start=wal_start,
            )
        data = payload if isinstance(payload, bytes) else bytes(payload)
        in_stream = state is AssemblerState.IN_STREAM_BLOCK
        try:
            if state is AssemblerState.IN_TRANSACTION and row_message_is_valid(data, False):
                # The bulk of any stream: a valid row message inside BEGIN ... COMMIT.
                # Every row event is legal in this state and the message is proven valid,
                # so it goes straight to the buffer (the general path does the same).
                txn = self._current
                assert txn is not None
                txn.buffer.append(data)
                txn.change_count += 1
                return []
            if state is AssemblerState.IN_STREAM_BLOCK and row_message_is_valid(data, True):
                # The same inside a stream block (large transactions): the xid prefix
                # says which subtransaction the record belongs to.
                assert self._stream_xid is not None
                txn = self._streams[self._stream_xid]
                subxid = int.from_bytes(data[1:5], "big")
                if subxid != txn.xid and subxid not in txn.subxact_xids:
                    self._subxact_info_add(txn, subxid)
                txn.buffer.append(data)
                txn.change_count += 1
                return []
            # Row messages, the bulk of any stream, are validated without being built: the
            # full message is built once, at replay (see scan_row_message).
            row = (
                (ROW_MESSAGE_TYPES[data[0]], _row_xid(data, in_stream))
                if row_message_is_valid(data, in_stream)
                else scan_row_message(data, in_stream=in_stream)
            )
            if row is not None:
                event, xid = row
                next_state = TRANSITIONS.get((state, event))
                if next_state is None:
                    raise self._sequence_error(
                        event, f"{event} is not allowed in state {state.value}"
                    )
                self._spool(xid, data, schema=False)
                return []
            message = parse_message(data, options=self._options, in_stream=in_stream)
            event = message_event(message)
            next_state = TRANSITIONS.get((state, event))
            if next_state is None:
                raise self._sequence_error(event, f"{event} is not allowed in state {state.value}")
            self._check_negotiated(event)
            outputs = self._handle(message, data, event)
        except DecodeError as exc:
            self._state = AssemblerState.ERROR
            raise exc.with_wal_start(wal_start).with_traceback(exc.__traceback__) from None
        except BaseException:
            self._state = AssemblerState.ERROR
            raise
        self._state = next_state
        return outputs

    def _sequence_error(self, event: str, reason: str, xid: int | None = None) -> DecodeError:
        return ProtocolSequenceError(reason, offset=0, message_type=event, xid=xid)

    def _check_negotiated(self, event: str) -> None:
        """Refuse messages the negotiated options rule out (pgoutput never sends them).

        Two-phase messages are not checked against ``options.two_phase``: once a slot has
        two-phase decoding enabled the server keeps it on even when a later
        START_REPLICATION omits the option ("It remains enabled if the previous start-up
        has done so", ``pgoutput_startup``).
        """
        if event in STREAM_EVENTS and self._options.streaming == "off":
            raise self._sequence_error(event, f"{event} received but streaming is off")
        if event in MESSAGE_EVENTS and not self._options.messages:
            raise self._sequence_error(event, "MESSAGE received but messages were not requested")

    def _handle(self, message: Message, data: bytes, event: str) -> list[AssemblerOutput]:
        """Validate, then apply, one message that the transition table allows here."""
        match message:
            case Begin():
                self._current = SpooledTransaction(
                    self._buffers(), xid=message.xid, streamed=False, begin=message
                )
                return []
            case BeginPrepare():
                self._check_gid_free(event, message.gid, message.xid)
                self._current = SpooledTransaction(
                    self._buffers(), xid=message.xid, streamed=False, begin=message
                )
                return []
            case Commit():
                return [self._on_commit(message, event)]
            case Prepare():
                return [self._on_prepare(message, event)]
            case Origin():
                txn = self._open_txn()
                txn.origin = message.name
                txn.origin_lsn = message.origin_lsn
                return []
            case Relation() | Type():
                self._spool(message.xid, data, schema=True)
                return []
            case Insert() | Update() | Delete() | Truncate():
                self._spool(message.xid, data, schema=False)
                return []
            case LogicalMessage():
                if not message.transactional:
                    return [
                        NonTransactionalMessage(
                            lsn=message.lsn, prefix=message.prefix, content=message.content
                        )
                    ]
                self._spool(message.xid, data, schema=False)
                return []
            case StreamStart():
                self._on_stream_start(message, event)
                return []
            case StreamStop():
                self._stream_xid = None
                return []
            case StreamCommit():
                return [self._on_stream_commit(message, event)]
            case StreamAbort():
                return [self._on_stream_abort(message, event)]
            case StreamPrepare():
                return [self._on_stream_prepare(message, event)]
            case CommitPrepared():
                return [self._on_commit_prepared(message, event)]
            case RollbackPrepared():
                return [self._on_rollback_prepared(message, event)]
            case _:
                assert_never(message)

    # --------------------------------------------------------------- plain transactions

    def _open_txn(self) -> SpooledTransaction:
        """The transaction that content messages belong to in the current state."""
        if self._state is AssemblerState.IN_STREAM_BLOCK:
            assert self._stream_xid is not None
            return self._streams[self._stream_xid]
        assert self._current is not None
        return self._current

    def _spool(self, xid: Xid | None, data: bytes, *, schema: bool) -> None:
        txn = self._open_txn()
        if txn.streamed:
            assert xid is not None  # the parser reads the prefix inside a block
            self._subxact_info_add(txn, xid)
        txn.buffer.append(data)
        if schema:
            txn.schema_records.append(data)
        else:
            txn.change_count += 1

    def _on_commit(self, message: Commit, event: str) -> CommittedTransaction:
        txn = self._current
        assert txn is not None
        assert isinstance(txn.begin, Begin)
        if message.commit_lsn != txn.begin.final_lsn:
            # worker.c apply_handle_commit: "incorrect commit LSN ... in commit message".
            raise self._sequence_error(
                event,
                f"commit LSN {format_lsn(message.commit_lsn)} differs from the BEGIN's "
                f"final LSN {format_lsn(txn.begin.final_lsn)}",
                txn.xid,
            )
        self._current = None
        return self._release(txn, message)

    def _release(
        self, txn: SpooledTransaction, message: Commit | StreamCommit | CommitPrepared
    ) -> CommittedTransaction:
        """Queue a committed transaction for replay and describe it from its commit message."""
        sequence = self._replays.commit(txn)
        kind: Literal["commit", "stream_commit", "commit_prepared"]
        match message:
            case Commit():
                kind = "commit"
            case StreamCommit():
                kind = "stream_commit"
            case CommitPrepared():
                kind = "commit_prepared"
        return CommittedTransaction(
            kind=kind,
            xid=txn.xid,
            gid=message.gid if isinstance(message, CommitPrepared) else None,
            commit_lsn=message.commit_lsn,
            end_lsn=message.end_lsn,
            commit_time=message.commit_time,
            origin=txn.origin,
            origin_lsn=txn.origin_lsn,
            change_count=txn.change_count,
            sequence=sequence,
        )

    # ------------------------------------------------------------------------ two-phase

    def _check_gid_free(self, event: str, gid: str, xid: int) -> None:
        if gid in self._prepared:
            raise self._sequence_error(
                event, f"gid {gid!r} is already held by a prepared transaction", xid
            )

    def _hold(
        self, txn: SpooledTransaction, message: Prepare | StreamPrepare
    ) -> TransactionPrepared:
        """Hold a prepared transaction; its schema takes effect from here on (see above)."""
        prepared = TransactionPrepared(
            xid=message.xid,
            gid=message.gid,
            prepare_lsn=message.prepare_lsn,
            end_lsn=message.end_lsn,
            prepare_time=message.prepare_time,
        )
        self._prepared[prepared.gid] = _Held(txn, prepared)
        self._replays.prepare(txn)
        return prepared

    def _on_prepare(self, message: Prepare, event: str) -> TransactionPrepared:
        txn = self._current
        assert txn is not None
        assert isinstance(txn.begin, BeginPrepare)
        begin = txn.begin
        if (message.prepare_lsn, message.xid, message.gid) != (
            begin.prepare_lsn,
            begin.xid,
            begin.gid,
        ):
            # worker.c apply_handle_prepare checks the LSN; xid and gid must match too.
            raise self._sequence_error(
                event,
                f"PREPARE of transaction {message.xid} gid {message.gid!r} at "
                f"{format_lsn(message.prepare_lsn)} does not match its BEGIN PREPARE of "
                f"transaction {begin.xid} gid {begin.gid!r} at {format_lsn(begin.prepare_lsn)}",
                message.xid,
            )
        self._current = None
        return self._hold(txn, message)

    def _on_commit_prepared(self, message: CommitPrepared, event: str) -> CommittedTransaction:
        held = self._prepared.get(message.gid)
        if held is None:
            # We never acknowledge past an unresolved PREPARE (docs/architecture.md,
            # invariant 1), so the server sends the PREPARE again after a restart; a COMMIT
            # PREPARED without one means changes we never saw would be committed.
            raise self._sequence_error(
                event,
                f"COMMIT PREPARED for gid {message.gid!r}, whose PREPARE this stream did not "
                f"send; restart from a position before that PREPARE",
                message.xid,
            )
        self._take_prepared(message.gid, message.xid, event)
        return self._release(held.txn, message)

    def _take_prepared(self, gid: str, xid: int, event: str) -> _Held:
        """Remove and return the held transaction of ``gid``, which ``xid`` must own."""
        held = self._prepared[gid]
        if held.txn.xid != xid:
            raise self._sequence_error(
                event, f"gid {gid!r} was prepared by transaction {held.txn.xid}, not {xid}", xid
            )
        del self._prepared[gid]
        return held

    def _on_rollback_prepared(self, message: RollbackPrepared, event: str) -> TransactionRolledBack:
        if message.gid in self._prepared:
            self._take_prepared(message.gid, message.xid, event).txn.buffer.close()
        # An unknown gid is harmless: the server also sends ROLLBACK PREPARED for a
        # transaction it prepared before two-phase decoding was enabled, or before the
        # slot became consistent, without ever sending its PREPARE (worker.c skips it).
        return TransactionRolledBack(
            gid=message.gid,
            prepare_end_lsn=message.prepare_end_lsn,
            rollback_end_lsn=message.rollback_end_lsn,
            rollback_time=message.rollback_time,
        )

    # ------------------------------------------------------------------------ streaming

    def _on_stream_start(self, message: StreamStart, event: str) -> None:
        xid = message.xid
        if any(held.txn.xid == xid for held in self._prepared.values()):
            raise self._sequence_error(event, f"transaction {xid} is already prepared", xid)
        existing = self._streams.get(xid)
        if message.first_segment and existing is not None:
            raise self._sequence_error(
                event, f"first segment of transaction {xid}, which is already streaming", xid
            )
        if not message.first_segment and existing is None:
            raise self._sequence_error(
                event,
                f"a later segment of transaction {xid}, whose first segment this stream "
                f"did not send",
                xid,
            )
        if existing is None:
            self._streams[xid] = SpooledTransaction(self._buffers(), xid=xid, streamed=True)
        self._stream_xid = xid

    def _subxact_info_add(self, txn: SpooledTransaction, xid: int) -> None:
        """Record where a subtransaction's first record starts (worker.c, same name)."""
        if xid == txn.xid or xid in txn.subxact_xids:
            return
        txn.subxact_xids.add(xid)
        txn.subxacts.append(
            Subxact(xid, txn.buffer.mark(), txn.change_count, len(txn.schema_records))
        )

    def _streamed(self, xid: int, event: str) -> SpooledTransaction:
        txn = self._streams.get(xid)
        if txn is None:
            raise self._sequence_error(
                event, f"{event} for transaction {xid}, which this stream did not start", xid
            )
        return txn

    def _on_stream_commit(self, message: StreamCommit, event: str) -> CommittedTransaction:
        txn = self._streamed(message.xid, event)
        del self._streams[message.xid]
        return self._release(txn, message)

    def _on_stream_abort(self, message: StreamAbort, event: str) -> StreamAborted:
        xid, subxid = message.xid, message.subxid
        aborted = StreamAborted(
            xid=xid, subxid=subxid, abort_lsn=message.abort_lsn, abort_time=message.abort_time
        )
        txn = self._streams.get(xid)
        if txn is None:
            if any(held.txn.xid == xid for held in self._prepared.values()):
                raise self._sequence_error(
                    event, f"transaction {xid} is prepared; only ROLLBACK PREPARED ends it", xid
                )
            # Nothing of this transaction is here, so there is nothing to drop (worker.c
            # deletes the spool files with missing_ok).
            return aborted
        if subxid == xid:
            del self._streams[xid]
            txn.buffer.close()
            return aborted
        self._stream_abort_subxact(txn, subxid)
        return aborted

    def _stream_abort_subxact(self, txn: SpooledTransaction, subxid: int) -> None:
        """Truncate to the subtransaction's first record (worker.c stream_abort_internal).

        The subtransactions recorded after it go too: their records come after its first
        one, and either belong to it (nested) or were aborted with it.
        """
        if subxid not in txn.subxact_xids:
            return  # an empty subtransaction: none of its records are here
        index = next(i for i, sub in enumerate(txn.subxacts) if sub.xid == subxid)
        first = txn.subxacts[index]
        txn.buffer.truncate(first.mark)
        txn.change_count = first.change_count
        del txn.schema_records[first.schema_count :]
        for sub in txn.subxacts[index:]:
            txn.subxact_xids.discard(sub.xid)
        del txn.subxacts[index:]

    def _on_stream_prepare(self, message: StreamPrepare, event: str) -> TransactionPrepared:
        txn = self._streamed(message.xid, event)
        self._check_gid_free(event, message.gid, message.xid)
        del self._streams[message.xid]
        return self._hold(txn, message)

    # --------------------------------------------------------------------------- replay

    def replay(self, txn: CommittedTransaction) -> Iterator[Change]:
        """Read a committed transaction back as changes.

        Call it once per ``CommittedTransaction``, in the order ``feed`` returned them,
        and read each iterator to its end (or close it) before the next replay. RELATION
        and TYPE records update the relation cache as they are reached. The transaction's
        buffer is released when the iterator ends or is closed.

        Args:
            txn: the next committed transaction.

        Returns:
            An iterator of ``RowChange``, ``TruncateChange`` and ``MessageChange`` with
            ordinals 0, 1, ...

        Raises:
            ProtocolSequenceError: ``txn`` is not the next transaction to replay, or a
                previous replay is unfinished (raised at once); or, while iterating, a
                change refers to a relation no RELATION message described.
        """
        return self._replays.replay(txn)

    def replay_chunks(
        self,
        txn: CommittedTransaction,
        limits: ChunkLimits,
        counts: dict[tuple[int, str], int],
        relations: dict[tuple[int, str], Relation],
    ) -> Iterator[ReplayChunk]:
        """``replay`` in chunks, for a caller that hands changes on in slices.

        The same changes, rules and errors as ``replay``; one pass does what the caller
        would otherwise do per change: cutting slices at ``limits`` and weighing them, and
        counting the changes per relation and operation.

        Args:
            txn: the next committed transaction.
            limits: the size of the next chunk, read when a chunk starts.
            counts: incremented per ``(id(relation), operation)`` for every change, with
                ``"truncate"`` once per truncated relation.
            relations: each counted relation object under its key, so that the ids stay
                valid while the counts live.
        """
        return self._replays.replay_chunks(txn, limits, counts, relations)

    def discard(self, txn: CommittedTransaction) -> None:
        """Skip a committed transaction's changes, keeping its schema messages.

        Takes the place of ``replay`` for a transaction the caller will not apply (for
        example one past a stop position); the same ordering rules hold.
        """
        self._replays.discard(txn)

    def _fail(self) -> None:
        self._state = AssemblerState.ERROR

    def _failed(self) -> bool:
        return self._state is AssemblerState.ERROR
