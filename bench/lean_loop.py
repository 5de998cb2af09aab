"""Experiments: the capture loop without per-message bookkeeping, a tuned collector.

This is *not* how the daemon runs. It measures what ``capture/service.py`` would gain
from the changes proposed in ``docs/performance.md`` ("Work left in capture/"), by
running the real ``CaptureService`` with its private ``_Session`` class swapped for
``LeanSession``, a subclass that overrides three methods:

* ``_on_frame``: no ``XLogData`` object per message (``decoder.read_xlog_data`` splits
  the frame), no Prometheus counter call per message (bytes and message types are
  counted in plain integers and added to the counters once per read burst, in
  ``_update_gauges``), and the received position is recorded once per burst;
* ``_on_committed``: replayed changes go to the batcher a slice at a time (one clock
  reading and one sink-busy check per slice instead of per change), and the per-table
  change counters are incremented once per transaction and table instead of once per
  change;
* ``_update_gauges``: also flushes the counts above.

Everything else (feedback, endpos, hand-off, sink worker) is the daemon's own code, and
the output must be identical: the benchmark checks the row count. Because it reaches
into a private class, this module follows ``capture/service.py`` and will need an update
(or can be deleted) when that file changes.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator

import structlog

import capture.service
from decoder import (
    Change,
    CommittedTransaction,
    NonTransactionalMessage,
    RowChange,
    StreamAborted,
    TransactionPrepared,
    TransactionRolledBack,
    TruncateChange,
    format_lsn,
    message_type_name,
    read_xlog_data,
)


class LeanSession(capture.service._Session):
    """``_Session`` with per-burst instead of per-message bookkeeping (module docstring)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._burst_bytes = 0
        self._burst_tags = [0] * 256
        self._burst_wal_start = 0

    def _on_frame(self, frame: bytes) -> None:
        xlog = read_xlog_data(frame)
        if xlog is None:
            super()._on_frame(frame)  # keepalives and malformed frames: unchanged
            return
        wal_start, payload = xlog
        if self.service.frame_tap is not None:
            self.service.frame_tap(wal_start, payload)
        self._burst_bytes += len(payload)
        if payload:
            self._burst_tags[payload[0]] += 1
        self._burst_wal_start = wal_start
        outputs = self.assembler.feed(wal_start, payload)
        if not outputs:
            return
        self.tracker.on_data(wal_start)
        for output in outputs:
            if isinstance(output, CommittedTransaction):
                self._on_committed(output)
                if self.endpos_reached:
                    return
            elif isinstance(output, TransactionPrepared):
                self.tracker.on_prepared(output.gid, output.prepare_lsn)
                self.metrics.transactions.labels(outcome="prepared").inc()
            elif isinstance(output, TransactionRolledBack):
                self.tracker.on_prepare_resolved(output.gid)
                self.metrics.transactions.labels(outcome="rolled_back").inc()
            elif isinstance(output, StreamAborted):
                if output.subxid == output.xid:
                    self.metrics.transactions.labels(outcome="aborted").inc()
            elif isinstance(output, NonTransactionalMessage):
                pass

    def _update_gauges(self) -> None:
        self.tracker.on_data(self._burst_wal_start)
        if self._burst_bytes:
            self.metrics.bytes_received.inc(self._burst_bytes)
            self._burst_bytes = 0
        tags = self._burst_tags
        for tag, count in enumerate(tags):
            if count:
                self.metrics.messages_received.labels(message_type=message_type_name(tag)).inc(
                    count
                )
                tags[tag] = 0
        super()._update_gauges()

    def _on_committed(self, txn: CommittedTransaction) -> None:
        if self.endpos is not None and txn.commit_lsn > self.endpos:
            self.endpos_reached = True
            self.assembler.discard(txn)
            return
        if txn.gid is not None:
            self.tracker.on_prepare_resolved(txn.gid)
        self.tracker.on_commit(txn.end_lsn)
        self.metrics.transactions.labels(outcome="committed").inc()
        counts: dict[tuple[int, str], int] = {}
        names: dict[tuple[int, str], str] = {}
        batcher = self.batcher
        clock = self.service.clock
        with structlog.contextvars.bound_contextvars(
            xid=txn.xid, commit_lsn=format_lsn(txn.commit_lsn)
        ):
            changes = self.assembler.replay(txn)
            while True:
                # A slice never larger than the room left in the open batch (adaptive
                # batching included), so batches close where the per-change path closes
                # them, and memory stays bounded.
                busy = self._sink_busy()
                limit = batcher.max_rows_ceiling if busy else batcher.max_rows
                chunk = list(itertools.islice(changes, max(1, limit - batcher.row_count)))
                if not chunk:
                    break
                _count_chunk(chunk, counts, names)
                now = clock()
                batcher._touch(now)
                batcher._changes.extend(chunk[:-1])
                self._hand_off(batcher.add(chunk[-1], now, backlog=busy))
        for key, count in counts.items():
            self._change_counter(names[key], key[1]).inc(count)
        batcher.end_transaction(txn.end_lsn, txn.commit_time, clock())
        if batcher.row_count == 0 and batcher.due(clock(), backlog=self._sink_busy()):
            self._hand_off(batcher.take())


def _count_chunk(
    chunk: list[Change], counts: dict[tuple[int, str], int], names: dict[tuple[int, str], str]
) -> None:
    """Add the chunk's changes per (relation object, operation) into ``counts``."""
    key: tuple[int, str]
    for change in chunk:
        if type(change) is RowChange:
            key = (id(change.relation), change.op)
            count = counts.get(key)
            if count is None:
                names[key] = change.relation.qualified_name
                count = 0
            counts[key] = count + 1
        elif isinstance(change, TruncateChange):
            for relation in change.relations:
                key = (id(relation), "truncate")
                names[key] = relation.qualified_name
                counts[key] = counts.get(key, 0) + 1


GC_THRESHOLDS = (100_000, 20, 100)
"""The collector thresholds of the ``tune_gc`` experiment (CPython's default: 700, 10, 10)."""


@contextlib.contextmanager
def experiment(*, lean: bool, tune_gc: bool) -> Iterator[None]:
    """Run ``CaptureService`` with ``LeanSession`` (``lean``) and/or a tuned collector.

    Every replayed change leaves two container objects (``RowChange``, ``TupleData``)
    alive until its batch is applied, so with CPython's default thresholds the cyclic
    collector runs a young collection every 350 changes and a full one each time the
    batches in flight have grown the heap by a quarter, walking every change of every
    batch in flight. None of these objects is part of a reference cycle. ``tune_gc``
    calls ``gc.freeze()`` (start-up objects leave the collector's reach) and raises the
    thresholds to ``GC_THRESHOLDS``, so collections run a hundred times less often.
    """
    original = capture.service._Session
    thresholds = gc.get_threshold()
    if lean:
        capture.service._Session = LeanSession  # type: ignore[misc]
    if tune_gc:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        capture.service._Session = original  # type: ignore[misc]
        if tune_gc:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
