"""The capture service: replication loop, hand-off to the sink worker, LSN feedback.

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
5. sleeps on the socket until the next deadline.

The flush position sent to the server never passes a change that is not durable in Delta
(ARCHITECTURE invariant 1): only the sink worker's reports move it, plus keepalive
``walEnd`` while nothing is pending (invariant 5). A crash at any point therefore makes
the server send again everything after the last acknowledged position, and the sink's
replay guard makes that harmless (invariant 2).

``--endpos`` (like ``pg_recvlogical --endpos``) stops once every transaction committed at
or before that LSN is durable and acknowledged; a transaction committed after it is not
applied. The server has sent every such transaction once it sends a keepalive whose
``walEnd`` is at or past endpos while no transaction (or stream block) is being received,
or a commit past endpos. A transaction still open at that point - streamed to us in part
or not sent at all yet - does not hold the run: it commits after endpos. The final status
update acknowledges what the ``FlushTracker`` allows: while a streamed transaction is open,
the durable frontier and never the keepalive's ``walEnd``; a transaction the server has not
sent at all is invisible here and may be passed by ``walEnd``. Either way the position stays
before the open transaction's commit, and the server, which decides by commit LSN what to
send again, sends that transaction in full to the next run.

SIGTERM/SIGINT stop reading, apply what is committed, send a final status update and
return 0.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import structlog
from prometheus_client import Counter

from capture.batcher import Batcher
from capture.errors import (
    CaptureError,
    ReplicationConnectionLostError,
    SlotInvalidatedError,
    SlotNotFoundError,
    map_psycopg_errors,
)
from capture.feedback import FeedbackPolicy, FlushTracker
from capture.metrics import Metrics
from capture.monitor import SourceMonitor
from capture.negotiation import ReplicationRequest, negotiate, start_replication_options
from capture.sink_worker import AppliedBatch, FailedBatch, SinkWorker
from capture.slots import (
    PublishedTable,
    check_server,
    drop_slot,
    ensure_publication,
    ensure_slot,
    server_version,
    slot_state,
    wal_sender_timeout_seconds,
)
from capture.snapshot import SnapshotCopier, SnapshotMarker, SnapshotMarkerStore
from capture.stream import ReplicationStream
from config import AppConfig
from decoder import (
    Assembler,
    AssemblerState,
    Change,
    CommittedTransaction,
    Lsn,
    MessageChange,
    NonTransactionalMessage,
    ProtocolOptions,
    Relation,
    RowChange,
    StreamAborted,
    TransactionPrepared,
    TransactionRolledBack,
    TruncateChange,
    TupleData,
    Wal2DeltaError,
    XLogData,
    datetime_to_pg_timestamp,
    encode_standby_status_update,
    format_lsn,
    message_type_name,
    parse_copy_data,
    pg_timestamp_to_datetime,
    read_xlog_data,
    spilling_buffers,
)
from sink import Batch, Sink

log = structlog.get_logger("wal2delta.service")


@dataclass
class ServiceState:
    """What health checks and tests can observe of a running service."""

    connected: bool = False
    last_loop_at: float = field(default_factory=time.monotonic)
    last_applied_commit_time: float | None = None
    flushed_lsn: int = 0
    pending: int = 0
    options: ProtocolOptions | None = None


def published_tables(config: AppConfig) -> list[PublishedTable]:
    """The configured tables as ``PublishedTable`` values."""
    tables = []
    for table in config.source.tables:
        columns = tuple(table.columns) if table.columns else None
        tables.append(PublishedTable(table.schema_name, table.table_name, table.where, columns))
    return tables


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What start-up learned about the source."""

    options: ProtocolOptions
    wal_sender_timeout: float
    server_version: int
    slot_exists: bool


def prepare_source(config: AppConfig, markers: SnapshotMarkerStore | None = None) -> SourceInfo:
    """Check the server, create or update publication and slot, negotiate the protocol.

    With ``snapshot.mode: initial`` a missing slot is left for the snapshot to create (it
    needs the replication connection to export its snapshot). A slot that the sink's
    markers say existed before but is gone now is an error: recreating it silently would
    skip every change made in between.
    """
    source = config.source
    with (
        map_psycopg_errors("connecting to the source"),
        psycopg.connect(
            source.conninfo(),
            autocommit=True,
            connect_timeout=max(1, round(source.connect_timeout.total_seconds())),
            application_name="wal2delta-admin",
        ) as conn,
    ):
        check_server(conn)
        version = server_version(conn)
        request = ReplicationRequest(
            protocol_version=source.protocol_version,
            streaming=source.streaming,
            two_phase=source.two_phase,
            binary=source.binary,
            messages=source.messages,
            origin=source.origin,
        )
        options = negotiate(request, version)
        ensure_publication(
            conn,
            source.publication,
            published_tables(config),
            create=source.create_publication,
            via_partition_root=source.publish_via_partition_root,
        )
        existing = slot_state(conn, source.slot)
        marker = markers.load_snapshot_marker(source.slot) if markers is not None else None
        slot_was_dropped = existing is None and marker is not None and marker.status == "complete"
        if slot_was_dropped and config.snapshot.mode != "initial":
            raise SlotNotFoundError(
                f"Replication slot {source.slot!r} was dropped after wal2delta had "
                "streamed from it; changes made since are lost to it. Set snapshot.mode: "
                "initial to copy the tables again, or restore the slot."
            )
        if existing is not None or config.snapshot.mode != "initial":
            ensure_slot(conn, source.slot, create=source.create_slot, two_phase=source.two_phase)
            if marker is None and markers is not None and config.snapshot.mode != "initial":
                # Remember the slot, so that a later drop of it is noticed.
                markers.save_snapshot_marker(
                    SnapshotMarker(slot=source.slot, status="complete", consistent_point=Lsn(0))
                )
        timeout = wal_sender_timeout_seconds(conn)
    return SourceInfo(
        options=options,
        wal_sender_timeout=timeout,
        server_version=version,
        slot_exists=existing is not None or config.snapshot.mode != "initial",
    )


class CaptureService:
    """Streams one source database into the sink until stopped."""

    def __init__(
        self,
        config: AppConfig,
        sink: Sink,
        *,
        metrics: Metrics | None = None,
        endpos: Lsn | None = None,
        stop_event: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        frame_tap: Callable[[int, bytes], None] | None = None,
    ) -> None:
        self.config = config
        self.frame_tap = frame_tap
        self.sink = sink
        self.metrics = metrics if metrics is not None else Metrics()
        self.endpos = endpos
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self.clock = clock
        self.state = ServiceState()
        self._conninfo = config.source.conninfo()
        self._worker: SinkWorker | None = None
        self._tracker = FlushTracker()
        self._spool_dir: Path | None = None
        self._fatal: Wal2DeltaError | None = None
        self._shutdown_deadline: float | None = None
        self._spool_is_temporary = False

    def fail(self, error: Wal2DeltaError) -> None:
        """Stop the loop with ``error`` (called from other threads, e.g. the monitor)."""
        self._fatal = error

    # ------------------------------------------------------------------ set-up

    @property
    def _markers(self) -> SnapshotMarkerStore | None:
        return self.sink if isinstance(self.sink, SnapshotMarkerStore) else None

    def _ensure_snapshot(self, stream: ReplicationStream, info: SourceInfo) -> None:
        """Copy the tables unless this slot's snapshot already completed."""
        source = self.config.source
        markers = self._markers
        if markers is None:
            raise CaptureError(
                "snapshot.mode: initial needs a sink that records snapshot progress; "
                "this sink does not."
            )
        marker = markers.load_snapshot_marker(source.slot)
        if info.slot_exists and marker is not None and marker.status == "complete":
            return
        if info.slot_exists:
            log.warning("restarting an interrupted snapshot", slot=source.slot)
            with psycopg.connect(self._conninfo, autocommit=True) as conn:
                drop_slot(conn, source.slot)
        markers.save_snapshot_marker(
            SnapshotMarker(slot=source.slot, status="in_progress", consistent_point=Lsn(0))
        )
        # Created without two-phase on purpose, as PostgreSQL's own subscriber does: the
        # START_REPLICATION that follows enables it with two_phase_at at the consistent
        # point, so a transaction prepared before the snapshot (invisible to the copy) is
        # sent whole at its COMMIT PREPARED. A slot created with two-phase would place
        # two_phase_at earlier and send only the COMMIT PREPARED of such a transaction.
        exported = stream.create_slot_with_snapshot(
            source.slot, two_phase=False, server_version_num=info.server_version
        )
        log.info(
            "snapshot started",
            slot=source.slot,
            consistent_point=format_lsn(exported.consistent_point),
        )
        copier = SnapshotCopier(
            self._conninfo,
            source.publication,
            apply=self.sink.apply,
            metrics=self.metrics,
            chunk_rows=self.config.sink.batch.max_rows,
        )
        copier.run(exported)
        markers.save_snapshot_marker(
            SnapshotMarker(
                slot=source.slot, status="complete", consistent_point=exported.consistent_point
            )
        )
        self._tracker = FlushTracker(exported.consistent_point)

    def _spool(self) -> Path:
        if self._spool_dir is None:
            configured = self.config.spool.dir
            if configured is None:
                self._spool_dir = Path(tempfile.mkdtemp(prefix="wal2delta-spool-"))
                self._spool_is_temporary = True
            else:
                self._spool_dir = Path(configured)
                self._spool_dir.mkdir(parents=True, exist_ok=True)
        return self._spool_dir

    # ------------------------------------------------------------------ running

    def run(self) -> None:
        """Run until stopped or ``endpos`` is reached; reconnect on connection loss.

        Raises:
            Wal2DeltaError: a terminal error; nothing past it was acknowledged.
        """
        reconnect = self.config.source.reconnect
        delay = reconnect.initial_delay.total_seconds()
        attempts = 0
        self._worker = SinkWorker(self.sink)
        source = self.config.source
        heartbeat = source.heartbeat
        monitor = SourceMonitor(
            self._conninfo,
            source.slot,
            self.metrics,
            interval=min(10.0, source.status_interval.total_seconds()),
            heartbeat_statement=heartbeat.statement,
            heartbeat_interval=(
                heartbeat.interval.total_seconds() if heartbeat.interval is not None else None
            ),
            on_slot_lost=lambda slot: self.fail(
                SlotInvalidatedError(
                    f"Replication slot {slot.name!r} was invalidated by the server "
                    "(wal_status = lost) while streaming; WAL it needed is gone. Re-create "
                    "the slot with a new initial snapshot."
                )
            ),
        )
        monitor.start()
        try:
            while not self.stop_event.is_set():
                try:
                    self._run_session()
                    return
                except Wal2DeltaError as exc:
                    # Retryable: connection loss (also the sink's catalog connection), an
                    # unreachable engine, a concurrent Delta commit. Everything after the
                    # last durable LSN is sent again by the server and replayed safely.
                    if not exc.retryable:
                        raise
                    self.state.connected = False
                    self.metrics.record_error("capture", exc, time.time())
                    attempts += 1
                    if reconnect.max_attempts and attempts > reconnect.max_attempts:
                        raise
                    wait = min(delay, reconnect.max_delay.total_seconds())
                    wait = wait * (0.5 + random.random() / 2)  # jitter
                    log.warning(
                        "retryable error; reconnecting",
                        attempt=attempts,
                        delay_seconds=round(wait, 2),
                        error=str(exc),
                    )
                    self.metrics.reconnects.inc()
                    # The worker refuses everything after a failed batch (order is an
                    # invariant); the retry starts with a fresh one.
                    self._drain_worker(raise_failures=False)
                    self._worker.stop()
                    self._worker = SinkWorker(self.sink)
                    if self.stop_event.wait(wait):
                        return
                    delay = min(delay * 2, reconnect.max_delay.total_seconds())
        finally:
            monitor.stop()
            self._drain_worker(raise_failures=False)
            self._worker.stop()
            if self._spool_is_temporary and self._spool_dir is not None:
                # Spilled transactions are only ever replayed within one run.
                shutil.rmtree(self._spool_dir, ignore_errors=True)
                self._spool_dir = None

    def _run_session(self) -> None:
        source = self.config.source
        info = prepare_source(self.config, self._markers)
        options, wal_sender_timeout = info.options, info.wal_sender_timeout
        self.state.options = options
        self.metrics.build_info.labels(
            version=_version(),
            proto_version=str(options.proto_version),
            spark_mode=self.config.sink.spark.mode,
        ).set(1)
        stream = ReplicationStream.open(
            self._conninfo, connect_timeout=source.connect_timeout.total_seconds()
        )
        try:
            if self.config.snapshot.mode == "initial":
                self._ensure_snapshot(stream, info)
            assembler = Assembler(
                options,
                buffers=spilling_buffers(self._spool(), int(self.config.spool.memory_limit)),
            )
            tracker = FlushTracker(self._tracker.durable)
            self._tracker = tracker
            policy = FeedbackPolicy(
                status_interval=source.status_interval.total_seconds(),
                wal_sender_timeout=wal_sender_timeout,
            )
            batch_cfg = self.config.sink.batch
            batcher = Batcher(
                max_rows=batch_cfg.max_rows,
                max_age=batch_cfg.max_age.total_seconds(),
                max_rows_ceiling=batch_cfg.max_rows_ceiling,
                max_bytes=int(batch_cfg.max_bytes),
            )
            session = _Session(
                service=self,
                stream=stream,
                assembler=assembler,
                tracker=tracker,
                policy=policy,
                batcher=batcher,
            )
            stream.start(
                source.slot,
                0,
                start_replication_options(options, source.publication, source.origin),
            )
            self.state.connected = True
            log.info(
                "replication started",
                slot=source.slot,
                publication=",".join(source.publication),
                proto_version=options.proto_version,
                streaming=options.streaming,
                binary=options.binary,
                two_phase=options.two_phase,
            )
            session.loop()
        finally:
            self.state.connected = False
            stream.close()

    def _drain_worker(self, *, raise_failures: bool = True) -> None:
        """Wait for every handed-over batch and account for it (used at stop and reconnect).

        With ``raise_failures`` false (clean-up after an error) failed batches are only
        recorded: the first error is already on its way up.
        """
        worker = self._worker
        if worker is None:
            return
        while worker.in_flight:
            if self._shutdown_deadline is not None and time.monotonic() > self._shutdown_deadline:
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
            self._account(report)

    def _account(self, report: AppliedBatch | FailedBatch) -> None:
        """Record an applied batch and move the flush position; re-raise a failure."""
        if isinstance(report, FailedBatch):
            self.metrics.record_error("sink", report.error, time.time())
            raise report.error
        batch = report.batch
        self.metrics.batches.inc()
        self.metrics.batch_apply_duration_seconds.observe(report.duration_seconds)
        result = report.result
        for table, ops in result.rows_by_table.items():
            self.metrics.rows_merged.labels(table=table).inc(sum(ops.values()))
        for table, seconds in result.seconds_by_table.items():
            self.metrics.merge_duration_seconds.labels(table=table).observe(seconds)
        for table, count in result.toast_anomalies_by_table.items():
            self.metrics.toast_anomalies.labels(table=table).inc(count)
        if report.result.toast_anomalies:
            log.warning("toast anomalies in batch", count=report.result.toast_anomalies)
        if batch.durable_lsn is not None:
            self._tracker.on_durable(batch.durable_lsn)
        if batch.last_commit_time is not None:
            commit_seconds = pg_timestamp_to_datetime(batch.last_commit_time).timestamp()
            self.state.last_applied_commit_time = commit_seconds
            self.metrics.last_commit_timestamp_seconds.set(commit_seconds)
            lag = max(0.0, time.time() - commit_seconds)
            self.metrics.batch_apply_lag_seconds.observe(lag)
            self.metrics.apply_lag_seconds.set(lag)
        log.info(
            "batch applied",
            rows=len(batch.changes),
            transactions=batch.transaction_count,
            durable_lsn=format_lsn(batch.durable_lsn) if batch.durable_lsn is not None else None,
            duration_seconds=round(report.duration_seconds, 3),
        )


class _Session:
    """State of one replication connection; recreated on every reconnect."""

    def __init__(
        self,
        *,
        service: CaptureService,
        stream: ReplicationStream,
        assembler: Assembler,
        tracker: FlushTracker,
        policy: FeedbackPolicy,
        batcher: Batcher,
    ) -> None:
        self.service = service
        self.stream = stream
        self.assembler = assembler
        self.tracker = tracker
        self.policy = policy
        self.batcher = batcher
        self.metrics = service.metrics
        self.worker = service._worker
        assert self.worker is not None
        self.endpos = service.endpos
        self.endpos_reached = False
        self._message_counters: dict[str, Counter] = {}
        self._change_counters: dict[tuple[str, str], Counter] = {}
        self._burst_bytes = 0
        self._burst_tags = [0] * 256
        self._burst_wal_start = 0

    def loop(self) -> None:
        clock = self.service.clock
        stop = self.service.stop_event
        while not stop.is_set() and not self.endpos_reached:
            if self.service._fatal is not None:
                raise self.service._fatal
            self.service.state.last_loop_at = clock()
            frames = self.stream.read_frames()
            for frame in frames:
                self._on_frame(frame)
                if self.endpos_reached:
                    break
            if frames:
                self._update_gauges()
            self._collect_reports()
            self.service.state.pending = self.tracker.pending_count
            now = clock()
            if self.batcher.due(now, backlog=self._sink_busy()):
                self._hand_off(self.batcher.take())
            self._send_feedback_if_due(now)
            if not frames:
                self.stream.wait_readable(self._sleep_time(clock()))
        self._finish()

    def _sleep_time(self, now: float) -> float:
        deadlines = [self.policy.next_deadline(), now + 1.0]
        batch_deadline = self.batcher.next_deadline()
        if batch_deadline is not None:
            deadlines.append(batch_deadline)
        if self.worker is not None and self.worker.in_flight:
            deadlines.append(now + 0.05)
        return max(0.0, min(deadlines) - now)

    def _finish(self) -> None:
        """Apply everything committed, wait until durable, send the final status update.

        A stop request (SIGTERM) gets ``shutdown.grace_period`` for this; what is not
        durable by then is simply not acknowledged, so the server sends it again.
        """
        if not self.endpos_reached:
            grace = self.service.config.shutdown.grace_period.total_seconds()
            self.service._shutdown_deadline = time.monotonic() + grace
        self._hand_off(self.batcher.take())
        self.service._drain_worker()
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

    # ------------------------------------------------------------------ frames

    def _on_frame(self, frame: bytes) -> None:
        xlog = read_xlog_data(frame)
        if xlog is None:
            self._on_other_frame(frame)
            return
        wal_start, payload = xlog
        if self.service.frame_tap is not None:
            self.service.frame_tap(wal_start, payload)
        # Counted in plain integers; ``_update_gauges`` adds them to the Prometheus
        # counters once per read burst (a counter increment takes a lock).
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

    def _sink_busy(self) -> bool:
        """The sink still works on an earlier batch: let the open batch grow instead.

        Asked of the worker itself, not of the reports collected so far: during the
        replay of a large transaction reports are collected only at hand-offs, and a
        finished sink must not look busy (the batch would grow to the ceiling).
        """
        assert self.worker is not None
        return self.worker.busy

    def _update_gauges(self) -> None:
        """Once per read burst, not per message (hot path): gauges and burst counts."""
        self.tracker.on_data(self._burst_wal_start)
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
            self.tracker.on_prepare_resolved(txn.gid)
        self.tracker.on_commit(txn.end_lsn)
        self.metrics.transactions.labels(outcome="committed").inc()
        batcher = self.batcher
        clock = self.service.clock
        counts: dict[tuple[int, str], int] = {}
        relations: dict[tuple[int, str], Relation] = {}
        with structlog.contextvars.bound_contextvars(
            xid=txn.xid, commit_lsn=format_lsn(txn.commit_lsn)
        ):
            changes = self.assembler.replay(txn)
            while True:
                # A slice never larger than the room left in the open batch, so batches
                # close where adding one change at a time would close them, and small
                # enough that the sink-busy answer (adaptive batching) stays fresh: one
                # clock reading and busy check per slice instead of per change.
                busy = self._sink_busy()
                room = min(batcher.room(backlog=busy), _HAND_OFF_SLICE)
                chunk, size = _take_slice(changes, room, batcher.byte_room(), counts, relations)
                if not chunk:
                    break
                self._hand_off(batcher.add_many(chunk, clock(), backlog=busy, size=size))
        for key, count in counts.items():
            self._change_counter(relations[key].qualified_name, key[1]).inc(count)
        batcher.end_transaction(txn.end_lsn, txn.commit_time, clock())
        if batcher.row_count == 0 and batcher.due(clock(), backlog=self._sink_busy()):
            self._hand_off(batcher.take())

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
        deadline = self.service._shutdown_deadline
        while not self.worker.offer(batch, timeout=0.2):
            self._collect_reports()
            self._send_feedback_if_due(self.service.clock())
            if deadline is not None and time.monotonic() > deadline:
                return
        self._collect_reports()

    def _collect_reports(self) -> None:
        assert self.worker is not None
        for report in self.worker.reports():
            self.service._account(report)

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
        now = self.service.clock()
        positions = self.tracker.positions(decoder_idle=self.assembler.idle)
        payload = encode_standby_status_update(
            write=positions.write,
            flush=positions.flush,
            apply=positions.apply,
            send_time=datetime_to_pg_timestamp(datetime.now(UTC)),
            reply_requested=reply_requested,
        )
        with contextlib.suppress(ReplicationConnectionLostError):
            self.stream.send(payload)
        self.policy.sent(now, positions.flush)
        self.metrics.status_updates.labels(reason=reason).inc()
        self.metrics.written_lsn.set(positions.write)
        self.metrics.flushed_lsn.set(positions.flush)
        self.service.state.flushed_lsn = positions.flush


_HAND_OFF_SLICE = 512
"""Most changes handed to the batcher between two sink-busy checks."""


CHANGE_OVERHEAD_BYTES = 256
"""Memory of a replayed change besides its message bytes (``RowChange``, ``TupleData``)."""


def _take_slice(
    changes: Iterator[Change],
    max_rows: int,
    max_bytes: int | None,
    counts: dict[tuple[int, str], int],
    relations: dict[tuple[int, str], Relation],
) -> tuple[list[Change], int]:
    """Take up to ``max_rows`` changes, stopping at the one that reaches ``max_bytes``.

    Each change weighs its message bytes plus ``CHANGE_OVERHEAD_BYTES``. The changes are
    also counted per (relation object, operation) into ``counts``; ``relations`` keeps
    each counted relation object, so its id is not reused while the counts live.

    Returns:
        The changes and their total weight.
    """
    chunk: list[Change] = []
    append = chunk.append
    size = 0
    budget = max_bytes if max_bytes is not None else -1
    key: tuple[int, str]
    for change in changes:
        append(change)
        if type(change) is RowChange:
            key = (id(change.relation), change.op)
            count = counts.get(key)
            if count is None:
                relations[key] = change.relation
                count = 0
            counts[key] = count + 1
            data = change.new if change.new is not None else change.old
            wire = data.wire if data is not None else None
            size += CHANGE_OVERHEAD_BYTES + (
                len(wire[0]) if wire is not None else _split_size(data)
            )
        else:
            if isinstance(change, TruncateChange):
                for relation in change.relations:
                    key = (id(relation), "truncate")
                    relations[key] = relation
                    counts[key] = counts.get(key, 0) + 1
            size += CHANGE_OVERHEAD_BYTES + (
                len(change.content) if isinstance(change, MessageChange) else 0
            )
        if len(chunk) >= max_rows or size >= budget >= 0:
            break
    return chunk, size


def _split_size(data: TupleData | None) -> int:
    """Bytes of a tuple whose columns were already split (not on the hot path)."""
    if data is None:
        return 0
    return sum(len(value.data) for value in data.values if value.data is not None)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("wal2delta")
    except PackageNotFoundError:
        return "0+unknown"


__all__ = ["CaptureError", "CaptureService", "ServiceState", "prepare_source", "published_tables"]
