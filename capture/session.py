"""The replication session: read the stream, hand batches to the sink, acknowledge.

Theory of operation
-------------------
One loop owns the replication connection. Each turn it

1. reads every CopyData frame available without blocking and feeds XLogData payloads to
   the decoder's ``Assembler``; a committed transaction is replayed at once, its changes
   go into the ``Batcher``, and its end LSN becomes *pending* in the ``FlushTracker``;
2. hands due batches to the ``SinkWorker`` (a bounded queue; while it is full the loop
   keeps answering the server instead of reading);
3. collects "batch durable up to end LSN X" reports and moves the flush position;
4. sends a standby status update when ``FeedbackPolicy`` says one is due;
5. checks that the server is still there (below);
6. sleeps on the socket until the next deadline.

Liveness, as PostgreSQL's apply worker keeps it (worker.c ``LogicalRepApplyLoop``): a
network that goes silent - a dropped NAT or firewall entry, a hung peer - leaves the
connection open and carrying nothing, with no FIN or RST to end it, and without a deadline
of its own the loop would wait for ever. Every frame from the server (a keepalive too)
restarts the clock. After half of ``receive_timeout`` without one the session sends a
status update with a reply requested (a "ping", which a live walsender answers with a
keepalive at once); after the whole of it the session abandons the connection and raises
``ReceiveTimeoutError``, which the supervisor retries like any lost connection. Data the
loop has not read yet because it was busy (waiting on the sink) counts as heard: only a
socket with nothing in it is silence. The loop's waits are at most a second, so the check
runs on time.

The session is the one owner of the acknowledgement state. The flush position sent to the
server never passes a change that is not durable in Delta (docs/architecture.md,
invariant 1): only the sink worker's reports move it, plus keepalive ``walEnd`` while
nothing is pending (invariant 5). A crash at any point therefore makes the server send
again everything after the last acknowledged position, and the sink's replay guard makes
that harmless (invariant 2). The supervisor (``daemon.supervisor``) starts a new session
after a retryable error, from the durable position the last one reached.

``--endpos`` (like ``pg_recvlogical --endpos``) stops once every transaction committed at
or before that LSN is durable and acknowledged; a transaction committed after it is not
applied. A stop request (SIGTERM/SIGINT) stops reading, applies what is committed within
the grace period, sends a final status update and returns.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

import structlog
from prometheus_client import Counter

from capture.batcher import Batcher
from capture.errors import ReceiveTimeoutError, ReplicationConnectionLostError
from capture.feedback import FeedbackPolicy, FlushTracker
from capture.metrics import Metrics
from capture.sink_worker import AppliedBatch, FailedBatch, SinkWorker
from capture.stream import ReplicationStream
from decoder import (
    Assembler,
    AssemblerState,
    ChunkLimits,
    CommittedTransaction,
    Lsn,
    NonTransactionalMessage,
    Relation,
    StreamAborted,
    TransactionPrepared,
    TransactionRolledBack,
    Wal2DeltaError,
    XLogData,
    datetime_to_pg_timestamp,
    encode_standby_status_update,
    format_lsn,
    message_type_name,
    parse_copy_data,
    pg_timestamp_to_datetime,
    read_xlog_data,
)
from sink import REJECTS_TABLE, Batch

log = structlog.get_logger("wal2delta.session")


@dataclass
class ServiceState:
    """What health checks and tests can observe of a running service; outlives sessions.

    ``pending_commits`` holds (end LSN, commit time as Unix seconds) of every transaction
    received and handed to the sink but not yet durable, oldest first. It survives a
    reconnect: those transactions are sent again and stay late until they are durable.
    """

    connected: bool = False
    last_loop_at: float = field(default_factory=time.monotonic)
    last_applied_commit_time: float | None = None
    pending_commits: deque[tuple[int, float]] = field(default_factory=deque)
    not_streaming: str | None = None
    """Why the daemon is not streaming right now (the last retryable error), for /readyz."""

    def apply_lag_seconds(self, now: float) -> float:
        """Now minus the commit time of the oldest transaction not yet durable; 0 if none.

        Read by the metrics scrape (another thread): it grows while a MERGE hangs or the
        lake is unreachable, instead of freezing at the last applied batch's lag.
        """
        try:
            oldest = self.pending_commits[0][1]
        except IndexError:
            return 0.0
        return max(0.0, now - oldest)

    def on_received(self, end_lsn: int, commit_time: float) -> None:
        """A transaction was handed to the sink (once: a re-sent one is recognised)."""
        commits = self.pending_commits
        if not commits or end_lsn > commits[-1][0]:
            commits.append((end_lsn, commit_time))

    def on_durable(self, durable_lsn: int) -> None:
        """Every transaction ending at or before ``durable_lsn`` is in Delta."""
        commits = self.pending_commits
        while commits and commits[0][0] <= durable_lsn:
            commits.popleft()


class Session:
    """One replication connection's loop; recreated on every reconnect.

    The session is the one owner of the acknowledgement state: its ``FlushTracker`` (which
    starts from the durable position the previous session reached), the accounting of the
    sink worker's reports and the status updates sent to the server.
    """

    def __init__(
        self,
        *,
        stream: ReplicationStream,
        assembler: Assembler,
        tracker: FlushTracker,
        policy: FeedbackPolicy,
        batcher: Batcher,
        worker: SinkWorker,
        metrics: Metrics,
        state: ServiceState,
        stop_event: threading.Event,
        fatal: Callable[[], Wal2DeltaError | None],
        shutdown_grace: float,
        receive_timeout: float,
        endpos: Lsn | None = None,
        clock: Callable[[], float] = time.monotonic,
        frame_tap: Callable[[int, bytes], None] | None = None,
        replay_changes: bool = True,
        frames_tap: Callable[[list[bytes], int, int], None] | None = None,
    ) -> None:
        self.stream = stream
        self.assembler = assembler
        self.tracker = tracker
        self.policy = policy
        self.batcher = batcher
        self.worker = worker
        self.metrics = metrics
        self.state = state
        self.stop_event = stop_event
        self._fatal = fatal
        self.shutdown_grace = shutdown_grace
        self.shutdown_deadline: float | None = None
        self.receive_timeout = receive_timeout
        """Seconds without a frame from the server before the connection is given up (a
        ping at half of it); 0: never (``source.receive_timeout``)."""
        self._last_received = clock()
        self._ping_sent = False
        self.endpos = endpos
        self.clock = clock
        self.frame_tap = frame_tap
        self.frames_tap = frames_tap
        """With ``frame_tap``: sees the runs of frames taken in bulk, ``frames[start:stop]``
        (``frame_tap`` sees every other frame); without it no run is taken in bulk."""
        self.replay_changes = replay_changes
        self.endpos_reached = False
        self._message_counters: dict[str, Counter] = {}
        self._change_counters: dict[tuple[str, str], Counter] = {}
        self._burst_bytes = 0
        self._burst_tags = [0] * 256
        self._burst_wal_start = 0
        self._metrics_due = 0.0
        self._flowing = False
        """The last read brought frames: the next wait reads in bulk (``_wait``)."""
        self._unrepresentable_seen: set[tuple[str, str, str]] = set()
        """(table, column, reason) of the values under a convention logged so far."""

    def loop(self) -> None:
        clock = self.clock
        stop = self.stop_event
        while not stop.is_set() and not self.endpos_reached:
            fatal = self._fatal()
            if fatal is not None:
                raise fatal
            self.state.last_loop_at = clock()
            frames = self.stream.read_frames()
            self._on_frames(frames)
            if frames:
                self.tracker.on_data(self._burst_wal_start)
            self._collect_reports()
            now = clock()
            if frames and now >= self._metrics_due:
                self._publish_metrics(now)
            if self._batch_due(now):
                self._hand_off(self.batcher.take())
            self._send_feedback_if_due(now)
            if frames:
                self._last_received = now
                self._ping_sent = False
            else:
                self._check_liveness(now)
                self._publish_metrics(now)  # never idle with counts unpublished
                self._wait(self._sleep_time(clock()), bulk=self._flowing)
            self._flowing = bool(frames)
        self._publish_metrics(clock())
        self._finish()

    def _wait(self, timeout: float, *, bulk: bool = False) -> None:
        """Sleep until the server sends, the sink worker reports or goes idle, or timeout.

        ``bulk`` (the stream flowed until the read before): wait for
        ``capture.stream.BULK_LOW_WATER`` bytes, at most ``BULK_WAIT`` seconds, rather
        than for the next message. Read as soon as anything arrives, the loop kept pace
        with the walsender at a few dozen messages per wake-up and spent more on waking
        both than on the changes (4.5 µs of CPU per change against 1.2 µs in bulk,
        docs/performance-log.md).

        The worker's wake-ups are consumed after the wait and before the next look at its
        state, so none is lost: one written after that look makes the next wait return.
        """
        if bulk:
            timeout = min(timeout, BULK_WAIT)
        self.stream.wait_readable(timeout, also=(self.worker.wakeup_fd,), bulk=bulk)
        self.worker.clear_wakeup()

    def _sleep_time(self, now: float) -> float:
        """How long the loop may wait for the server when nothing arrived.

        The open batch's deadline counts only while the sink worker could take the batch:
        a busy worker lets the batch grow (``Batcher.due``), and its wake-up ends the wait
        once it is free. Counted while it is busy, an overdue batch made every wait zero,
        and the loop spun for as long as the worker applied - holding the interpreter
        lock the worker's own threads need (a first batch over 141 new tables took 220 s
        instead of a few).
        """
        deadlines = [self.policy.next_deadline(), now + 1.0]
        if self.receive_timeout > 0:
            deadlines.append(self._liveness_deadline())
        batch_deadline = self.batcher.next_deadline(
            catching_up=self.batcher.catching_up(self.tracker.received)
        )
        if batch_deadline is not None and not self._sink_busy():
            deadlines.append(batch_deadline)
        return max(0.0, min(deadlines) - now)

    def _finish(self) -> None:
        """Apply everything committed, wait until durable, send the final status update.

        A stop request (SIGTERM) gets ``shutdown.grace_period`` for this; what is not
        durable by then is simply not acknowledged, so the server sends it again.
        """
        if not self.endpos_reached:
            self.shutdown_deadline = time.monotonic() + self.shutdown_grace
        self._hand_off(self.batcher.take())
        self.drain()
        if self.tracker.sink_hold is not None:
            # Changes the sink holds back are applied before the run ends.
            self._hand_off(
                Batch(
                    (),
                    durable_lsn=None,
                    transaction_count=0,
                    last_commit_time=None,
                    release_held=True,
                )
            )
            self.drain()
        self._send_status(reason="final", reply_requested=False)
        positions = self.tracker.positions(decoder_idle=self.assembler.idle)
        if self.endpos_reached and self.endpos is not None and not self.assembler.idle:
            log.info(
                "endpos reached with a transaction open",
                endpos=format_lsn(self.endpos),
                flushed_lsn=format_lsn(positions.flush),
                received_lsn=format_lsn(self.tracker.received),
                open_streamed_transactions=self.assembler.open_streamed_transactions,
                consequence=(
                    "the acknowledged position stays before the open transaction's commit, "
                    "which is after endpos; the next run receives it in full"
                ),
            )
        log.info(
            "replication stopped",
            flushed_lsn=format_lsn(positions.flush),
            endpos_reached=self.endpos_reached,
        )

    def drain(self, *, raise_failures: bool = True) -> None:
        """Wait for every handed-over batch and account for it (used at stop and reconnect).

        With ``raise_failures`` false (clean-up after an error) failed batches are only
        recorded: the first error is already on its way up.
        """
        worker = self.worker
        while worker.in_flight:
            if self.shutdown_deadline is not None and time.monotonic() > self.shutdown_deadline:
                log.warning(
                    "shutdown grace period over; unconfirmed batches will be sent again",
                    batches=worker.in_flight,
                )
                return
            report = worker.wait_report(1.0)
            if report is None:
                continue
            if isinstance(report, FailedBatch) and not raise_failures:
                continue
            self.account(report)

    def account(self, report: AppliedBatch | FailedBatch) -> None:
        """Record an applied batch and move the flush position; re-raise a failure."""
        if isinstance(report, FailedBatch):
            self.metrics.record_error("sink", report.error, time.time())
            raise report.error
        self.metrics.batches.inc()
        self.metrics.batch_apply_duration_seconds.observe(report.duration_seconds)
        result = report.result
        for table, ops in result.rows_by_table.items():
            self.metrics.rows_merged.labels(table=table).inc(sum(ops.values()))
        for table, seconds in result.seconds_by_table.items():
            self.metrics.merge_duration_seconds.labels(table=table).observe(seconds)
        for kind, count in result.table_writes.items():
            self.metrics.table_writes.labels(kind=kind).inc(count)
        for table, count in result.toast_anomalies_by_table.items():
            self.metrics.toast_anomalies.labels(table=table).inc(count)
        if report.result.toast_anomalies:
            log.warning("toast anomalies in batch", count=report.result.toast_anomalies)
        for (table, column, reason), count in result.unrepresentable.items():
            self.metrics.unrepresentable_values.labels(
                table=table, column=column, reason=reason
            ).inc(count)
            if (table, column, reason) not in self._unrepresentable_seen:
                # Once per class and connection; the metric counts every value.
                self._unrepresentable_seen.add((table, column, reason))
                log.warning(
                    "values stored under their documented convention",
                    table=table,
                    column=column,
                    reason=reason,
                    value_count=count,
                    rejects_table=REJECTS_TABLE,
                )
        # Changes the sink held back hold the acknowledgement (and the lag) before them.
        self.tracker.hold_for_sink(result.held_lsn)
        self.metrics.held_changes.set(result.held_changes)
        if report.durable_lsn is not None:
            self.tracker.on_durable(report.durable_lsn)
        durable = self.tracker.durable
        self.state.on_durable(durable if result.held_lsn is None else min(durable, result.held_lsn))
        if report.last_commit_time is not None:
            commit_seconds = pg_timestamp_to_datetime(report.last_commit_time).timestamp()
            self.state.last_applied_commit_time = commit_seconds
            self.metrics.last_commit_timestamp_seconds.set(commit_seconds)
            lag = max(0.0, time.time() - commit_seconds)
            self.metrics.batch_apply_lag_seconds.observe(lag)
        log.info(
            "batch applied",
            rows=report.row_count,
            transactions=report.transaction_count,
            durable_lsn=format_lsn(report.durable_lsn) if report.durable_lsn is not None else None,
            duration_seconds=round(report.duration_seconds, 3),
        )

    # ------------------------------------------------------------------ frames

    def _on_frames(self, frames: list[bytes]) -> None:
        """Every frame of a read, in order; runs of row messages in bulk.

        Inside a transaction the assembler takes a run of row messages in one call
        (``Assembler.feed_row_frames``), exactly as ``_on_frame`` would take them one by
        one; the frame that ends the run goes to ``_on_frame``. A frame tap sees every
        frame: the runs through ``frames_tap``, or, without one, no run is taken.
        """
        frames_tap = self.frames_tap
        bulk = self.frame_tap is None or frames_tap is not None
        position, end = 0, len(frames)
        while position < end and not self.endpos_reached:
            if bulk:
                run = self.assembler.feed_row_frames(frames, position)
                if run is not None and run.stop > position:
                    if frames_tap is not None:
                        frames_tap(frames, position, run.stop)
                    self._burst_bytes += run.payload_bytes
                    tags = self._burst_tags
                    tags[0x49] += run.inserts
                    tags[0x55] += run.updates
                    tags[0x44] += run.deletes
                    self._burst_wal_start = run.wal_start
                    position = run.stop
                    continue
            self._on_frame(frames[position])
            position += 1

    def _on_frame(self, frame: bytes) -> None:
        xlog = read_xlog_data(frame)
        if xlog is None:
            self._on_other_frame(frame)
            return
        wal_start, payload = xlog
        if self.frame_tap is not None:
            self.frame_tap(wal_start, payload)
        # Counted in plain integers; ``_publish_metrics`` adds them to the Prometheus
        # counters at most every METRICS_INTERVAL seconds (an increment takes a lock).
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

    def _on_other_frame(self, frame: bytes) -> None:
        """A keepalive (or a frame ``parse_copy_data`` rejects with the precise error)."""
        message = parse_copy_data(frame)
        if isinstance(message, XLogData):  # pragma: no cover - read_xlog_data took those
            raise AssertionError("XLogData frame not split by read_xlog_data")
        self._count_message_type("keepalive", 1)
        self.tracker.on_keepalive(message.wal_end)
        if message.reply_requested:
            self.policy.request_reply()
        if self.endpos is not None and message.wal_end >= self.endpos and self._between_blocks():
            # Every commit before walEnd was sent; a transaction still open (streamed in
            # part, or not sent yet) commits after endpos and does not hold the run.
            self.endpos_reached = True

    def _between_blocks(self) -> bool:
        """No transaction, prepare or stream block is being received right now."""
        return self.assembler.state is AssemblerState.IDLE

    def _batch_due(self, now: float) -> bool:
        """Whether the open batch is handed over now (``Batcher.due``), given the sink's
        state and how far the session has read (``Batcher.catching_up``)."""
        return self.batcher.due(
            now,
            backlog=self._sink_busy(),
            catching_up=self.batcher.catching_up(self.tracker.received),
        )

    def _batch_grows(self, txn: CommittedTransaction) -> bool:
        """Whether the open batch may grow past ``max_rows`` while ``txn`` is replayed:
        the sink is busy, or ``txn`` is part of the backlog the server held when the
        session started (its commit record starts before that position; ``received`` is
        past it already, at the transaction's end)."""
        return self._sink_busy() or self.batcher.catching_up(txn.commit_lsn)

    def _sink_busy(self) -> bool:
        """The sink still works on an earlier batch: let the open batch grow instead.

        Asked of the worker itself, not of the reports collected so far: during the
        replay of a large transaction reports are collected only at hand-offs, and a
        finished sink must not look busy (the batch would grow to the ceiling).
        """
        assert self.worker is not None
        return self.worker.busy

    def _publish_metrics(self, now: float) -> None:
        """Add the counts gathered since the last call to the Prometheus metrics and set
        the gauges: at most every ``METRICS_INTERVAL`` seconds while frames keep coming
        (a read returns a few dozen frames; publishing after each one cost the loop about
        0.3 µs per change, a quarter of its time), and whenever the loop goes idle."""
        self._metrics_due = now + METRICS_INTERVAL
        if self._burst_bytes:
            self.metrics.bytes_received.inc(self._burst_bytes)
            self._burst_bytes = 0
        tags = self._burst_tags
        for tag, count in enumerate(tags):
            if count:
                self._count_message_type(message_type_name(tag), count)
                tags[tag] = 0
        self.metrics.open_streamed_transactions.set(self.assembler.open_streamed_transactions)
        self.metrics.prepared_transactions.set(self.assembler.prepared_transactions)
        self.metrics.spilled_bytes.set(self.assembler.spilled_bytes)
        self.metrics.received_lsn.set(self.tracker.received)

    def _count_message_type(self, message_type: str, count: int) -> None:
        counter = self._message_counters.get(message_type)
        if counter is None:
            counter = self.metrics.messages_received.labels(message_type=message_type)
            self._message_counters[message_type] = counter
        counter.inc(count)

    def _on_committed(self, txn: CommittedTransaction) -> None:
        if self.endpos is not None and txn.commit_lsn > self.endpos:
            # Not applied and not acknowledged: a later run gets it again.
            self.endpos_reached = True
            self.assembler.discard(txn)
            return
        if txn.gid is not None:
            self.tracker.on_prepare_resolved(txn.gid, txn.end_lsn)
        self.tracker.on_commit(txn.end_lsn)
        self.state.on_received(txn.end_lsn, pg_timestamp_to_datetime(txn.commit_time).timestamp())
        self.metrics.transactions.labels(outcome="committed").inc()
        batcher = self.batcher
        clock = self.clock
        if not self.replay_changes:
            # Recording: the frames are on file already (``frame_tap``); the batch only
            # carries the transaction's end, durable once the recording is synced.
            self.assembler.discard(txn)
            batcher.end_transaction(txn.end_lsn, txn.commit_time, clock())
            if self._batch_due(clock()):
                self._hand_off(batcher.take())
            return
        counts: dict[tuple[int, str], int] = {}
        relations: dict[tuple[int, str], Relation] = {}
        with structlog.contextvars.bound_contextvars(
            xid=txn.xid, commit_lsn=format_lsn(txn.commit_lsn)
        ):
            # Slices never larger than the room left in the open batch, so batches close
            # where adding one change at a time would close them, and small enough that
            # the sink-busy answer (adaptive batching) stays fresh: one clock reading and
            # busy check per slice instead of per change.
            limits = ChunkLimits(change_overhead=CHANGE_OVERHEAD_BYTES)
            busy = self._batch_grows(txn)
            self._set_limits(limits, busy)
            for chunk in self.assembler.replay_chunks(txn, limits, counts, relations):
                self._hand_off(
                    batcher.add_many(chunk.changes, clock(), backlog=busy, size=chunk.weight)
                )
                busy = self._batch_grows(txn)
                self._set_limits(limits, busy)
        for key, count in counts.items():
            self._change_counter(relations[key].qualified_name, key[1]).inc(count)
        batcher.end_transaction(txn.end_lsn, txn.commit_time, clock())
        if batcher.row_count == 0 and self._batch_due(clock()):
            self._hand_off(batcher.take())

    def _set_limits(self, limits: ChunkLimits, busy: bool) -> None:
        """The next slice fits the open batch: its room in changes and in bytes."""
        batcher = self.batcher
        limits.max_changes = min(batcher.room(backlog=busy), _HAND_OFF_SLICE)
        byte_room = batcher.byte_room()
        limits.max_weight = byte_room if byte_room is not None else -1

    def _change_counter(self, table: str, operation: str) -> Counter:
        key = (table, operation)
        counter = self._change_counters.get(key)
        if counter is None:
            counter = self.metrics.changes.labels(table=table, operation=operation)
            self._change_counters[key] = counter
        return counter

    # ------------------------------------------------------------------ sink hand-off

    def _hand_off(self, batch: Batch | None) -> None:
        """Give a batch to the sink worker; keep the server answered while it is busy."""
        if batch is None:
            return
        assert self.worker is not None
        deadline = self.shutdown_deadline
        while not self.worker.offer(batch, timeout=0.2):
            self._collect_reports()
            now = self.clock()
            self._send_feedback_if_due(now)
            self._check_liveness(now)
            if deadline is not None and time.monotonic() > deadline:
                return
        self._collect_reports()

    def _collect_reports(self) -> None:
        assert self.worker is not None
        for report in self.worker.reports():
            self.account(report)

    # ------------------------------------------------------------------ liveness

    def _liveness_deadline(self) -> float:
        """When ``_check_liveness`` next has something to do: ping, or give up."""
        timeout = self.receive_timeout
        return self._last_received + (timeout if self._ping_sent else timeout / 2)

    def _check_liveness(self, now: float) -> None:
        """Ping the server after half of ``receive_timeout`` without a frame; give the
        connection up after the whole of it (module docstring, "Liveness").

        Raises:
            ReceiveTimeoutError: nothing came from the server for ``receive_timeout``.
        """
        timeout = self.receive_timeout
        if timeout <= 0:
            return
        silent = now - self._last_received
        if silent < timeout / 2:
            return
        if self.stream.pending_input():
            # Sent while the loop was busy and did not read: the server is there.
            self._last_received = now
            self._ping_sent = False
            return
        if silent >= timeout:
            self.stream.abandon()
            pid = self.stream.backend_pid
            log.warning(
                "terminating the replication connection due to timeout",
                receive_timeout_seconds=timeout,
                silent_seconds=round(silent, 1),
                walsender_pid=pid,
                consequence="reconnecting; the server sends again what was not acknowledged",
            )
            raise ReceiveTimeoutError(
                f"no message from the server for {silent:.1f} s "
                f"(source.receive_timeout {timeout:g} s): the network or the server went "
                "silent; terminating the replication connection",
                walsender_pid=pid,
            )
        if not self._ping_sent:
            self._ping_sent = True
            self._send_status(reason="ping", reply_requested=True)

    # ------------------------------------------------------------------ feedback

    def _send_feedback_if_due(self, now: float) -> None:
        positions = self.tracker.positions(decoder_idle=self.assembler.idle)
        if self.policy.due(now, positions.flush):
            self._send_status(reason="periodic", reply_requested=self._want_reply())

    def _want_reply(self) -> bool:
        # While waiting for --endpos between blocks (a streamed transaction may be open),
        # ask the server for a keepalive: its walEnd tells when everything up to endpos
        # was sent.
        return self.endpos is not None and self._between_blocks()

    def _send_status(self, *, reason: str, reply_requested: bool) -> None:
        now = self.clock()
        positions = self.tracker.positions(decoder_idle=self.assembler.idle)
        payload = encode_standby_status_update(
            write=positions.write,
            flush=positions.flush,
            apply=positions.apply,
            send_time=datetime_to_pg_timestamp(datetime.now(UTC)),
            reply_requested=reply_requested,
        )
        with contextlib.suppress(ReplicationConnectionLostError):
            # Bounded, so a peer that stopped reading cannot hold the loop (liveness).
            self.stream.send(payload, timeout=self.receive_timeout or None)
        self.policy.sent(now, positions.flush)
        self.metrics.status_updates.labels(reason=reason).inc()
        self.metrics.written_lsn.set(positions.write)
        self.metrics.flushed_lsn.set(positions.flush)


_HAND_OFF_SLICE = 512
"""Most changes handed to the batcher between two sink-busy checks."""

BULK_WAIT: Final = 0.005
"""Longest wait for ``capture.stream.BULK_LOW_WATER`` bytes while the stream flows
(``Session._wait``): what a change may wait on top of its transaction's arrival when the
stream slows down."""

METRICS_INTERVAL: Final = 0.1
"""Seconds between two publications of the loop's counts while frames keep coming
(``Session._publish_metrics``): far below any scrape interval."""


CHANGE_OVERHEAD_BYTES = 256
"""Memory of a replayed change besides its message bytes (``RowChange``, ``TupleData``)."""
