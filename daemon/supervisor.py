"""The supervisor: one source database streamed into the sink, session after session.

Theory of operation
-------------------
``Supervisor.run`` starts the slot monitor and a sink worker, then runs replication
sessions (``capture.Session``) until stopped, ``--endpos`` is reached or a terminal error
happens. A retryable error - connection loss (also of the sink's catalog connection), an
unreachable Spark engine, a concurrent Delta commit - ends the session; the supervisor
accounts for what the sink worker finished, replaces the worker (it refuses everything
after a failed batch: order is an invariant), waits with capped exponential backoff and
jitter, and starts a new session from the durable position the last one reached. The
server sends everything after the acknowledged position again, and the sink's replay
guard makes that harmless. Terminal errors (decode errors, data errors, a lost slot,
impossible configuration) stop the daemon with a message that says what to fix.

One failure is neither: a slot the server cannot decode (``SlotUndecodableError``, a
PostgreSQL defect around slot creation). Retrying repeats it, so with
``snapshot.on_slot_loss: resync`` the supervisor has ``capture.drop_undecodable_slot`` drop
the slot and the next session replaces it and copies every table again while streaming,
as after a dropped or invalidated slot (at most ``MAX_SLOT_RECREATIONS`` times per run);
otherwise it is terminal. A slot the monitor finds invalidated while streaming is handled
the same way.

Each session first runs ``capture.prepare_source`` (server checks, publication, slot,
protocol negotiation) and, with an initial snapshot, ``capture.ensure_snapshot``.

Tables copied while streaming (``capture.tablecopy``, a sink that is an
``OnlineCopySink``): the ``OnlineCopier`` thread runs beside the sessions. When a copy
lands, the session ends with ``StreamRewindError`` and a new one starts at once from the
acknowledged position (no backoff), so the changes the sink dropped during the copy come
again. With ``--endpos``, the run ends only once no copy is requested or running (new
tables looked for at the end too) and every landed copy's changes up to ``endpos`` were
applied by a rewound session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from capture import (
    Batcher,
    CaptureError,
    CaptureSettings,
    FeedbackPolicy,
    FlushTracker,
    LakeAheadOfServerError,
    Metrics,
    OnlineCopier,
    ReceiveTimeoutError,
    ReconnectSettings,
    ReplicationConnectionLostError,
    ReplicationStream,
    ServiceState,
    Session,
    SinkWorker,
    SlotInvalidatedError,
    SlotUndecodableError,
    SourceInfo,
    SourceMonitor,
    SourceRefusedError,
    StreamRewindError,
    check_lake_timeline,
    drop_undecodable_slot,
    ensure_snapshot,
    prepare_source,
    start_replication_options,
)
from config import AppConfig
from daemon.health import SinkProgress
from daemon.spool import SpoolDirectory, open_spool_directory
from daemon.version import package_version
from daemon.wiring import capture_settings, reconnect_settings, store_retry_settings
from decoder import (
    DECODER_KERNEL,
    Assembler,
    CountingChangeBuffer,
    Lsn,
    SpoolError,
    Wal2DeltaError,
    parse_lsn,
    spilling_buffers,
)
from sink import (
    HoldingSink,
    Sink,
    SinkError,
    SinkStoreError,
    SnapshotMarkerStore,
    parts_of,
)

log = structlog.get_logger("wal2delta.supervisor")

MAX_SLOT_RECREATIONS = 3
"""How often one run drops an undecodable new slot and copies again before giving up."""


_ENDPOS_COPY_TIMEOUT = 3600.0
"""How long a run with ``--endpos`` waits at the end for tables still being copied."""


class Supervisor:
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
        frames_tap: Callable[[list[bytes], int, int], None] | None = None,
        replay_changes: bool = True,
    ) -> None:
        """``frame_tap`` sees every XLogData payload as it arrives - the runs of frames
        the loop takes in bulk through ``frames_tap`` when one is given
        (``capture.session.Session``); ``replay_changes`` False hands the sink only
        transaction ends (``wal2delta capture``, whose sink makes the recording durable)."""
        self.config = config
        self.settings: CaptureSettings = capture_settings(config)
        self.reconnect: ReconnectSettings = reconnect_settings(config)
        self.store_retries: ReconnectSettings = store_retry_settings(config)
        self._store_failures = 0
        """Object-store failures in a row, no batch durable in between (``_store_wait``)."""
        self._store_failed_at: int | None = None
        """``_sessions_with_progress`` when the store last failed."""
        self._sessions_with_progress = 0
        """Ended sessions in which the sink made a transaction durable."""
        self.frame_tap = frame_tap
        self.frames_tap = frames_tap
        self.replay_changes = replay_changes
        self.sink = sink
        self.metrics = metrics if metrics is not None else Metrics()
        self.endpos = endpos
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self.clock = clock
        self.state = ServiceState()
        # Computed at every scrape, so it grows while a MERGE hangs.
        self.metrics.apply_lag_seconds.set_function(
            lambda: self.state.apply_lag_seconds(time.time())
        )
        # Also at every scrape: grows while the sink is stuck on a batch (daemon/health.py).
        self.metrics.sink_stalled_seconds.set_function(lambda: self.sink_progress().stalled_seconds)
        # Where the next session's flush position starts: the last one a session
        # reported, which never passes a PREPARE still waiting for its COMMIT PREPARED.
        # (Not the durable position: that may be past such a PREPARE, and the first
        # status update of a reconnected session would then skip it for good.)
        self._resume_flush = Lsn(0)
        self._slot_recreations = 0
        self._session: Session | None = None
        self._worker: SinkWorker | None = None
        self._spool_dir: Path | None = None
        self._spool_directory: SpoolDirectory | None = None
        self._fatal: Wal2DeltaError | None = None
        self._copier: OnlineCopier | None = None
        self._timeline: int | None = None
        """The server timeline the last session found the lake consistent with."""
        self._abandoned_walsender: int | None = None
        """The walsender of a connection given up after a receive timeout, which may still
        hold the slot (``capture.startup.release_own_walsender``)."""

    def sink_progress(self) -> SinkProgress:
        """How long the current sink worker has been on its work, and what is pending."""
        return SinkProgress.of(self._worker, self.state)

    def fail(self, error: Wal2DeltaError) -> None:
        """Stop the session with ``error`` (called from other threads, e.g. the monitor)."""
        self._fatal = error

    def _spool(self) -> Path:
        """The run's spool directory, made at the first session that replays; what dead
        processes left there is removed then (``daemon.spool``)."""
        if self._spool_dir is None:
            self._spool_directory = open_spool_directory(self.settings.spool_dir)
            self._spool_dir = self._spool_directory.path
        return self._spool_dir

    def run(self) -> None:
        """Run until stopped or ``endpos`` is reached; reconnect after retryable errors.

        Raises:
            Wal2DeltaError: a terminal error; nothing past it was acknowledged.
        """
        reconnect = self.reconnect
        attempts = 0
        self._worker = SinkWorker(self.sink)
        source = self.config.source
        heartbeat = source.heartbeat
        monitor = SourceMonitor(
            self.settings.resolve_conninfo,  # a rotated password file on each reconnect
            self.settings.slot,
            self.metrics,
            interval=min(10.0, self.settings.status_interval),
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
                    if self._copies_landed_at_end():
                        self._restart_worker()  # a rewound session applies their changes
                        continue
                    return
                except StreamRewindError:
                    log.info(
                        "a table copy landed; the stream restarts from the acknowledged position"
                    )
                    self._restart_worker()
                    continue
                except SlotInvalidatedError as exc:
                    # Found by the monitor while streaming; at start-up prepare_source
                    # replaces the slot itself (or stops) by snapshot.on_slot_loss.
                    self.metrics.record_error("capture", exc, time.time())
                    if self.settings.on_slot_loss != "resync":
                        raise
                    self._fatal = None
                    self._restart_worker()  # the next session replaces the slot
                except SlotUndecodableError as exc:
                    self.metrics.record_error("capture", exc, time.time())
                    self._restart_worker()
                    if self._slot_recreations >= MAX_SLOT_RECREATIONS:
                        raise SlotUndecodableError(
                            f"{exc}. The slot was dropped and created again "
                            f"{self._slot_recreations} times in this run and the server still "
                            "cannot decode it; stopping. Look for DDL running while the slot "
                            "is created (it waits for open and prepared transactions to end).",
                            server_message=exc.server_message,
                        ) from exc
                    drop_undecodable_slot(self.settings, exc)
                    self._slot_recreations += 1
                except SinkStoreError as exc:
                    self.state.connected = False
                    self.state.not_streaming = str(exc)
                    self.metrics.record_not_streaming(_reason(exc))
                    self.metrics.record_error("sink", exc, time.time())
                    self._restart_worker()
                    if self.stop_event.wait(self._store_wait(exc)):
                        return
                except Wal2DeltaError as exc:
                    if not exc.retryable:
                        raise
                    if isinstance(exc, ReceiveTimeoutError):
                        self._abandoned_walsender = exc.walsender_pid
                    self.state.connected = False
                    self.state.not_streaming = str(exc)
                    self.metrics.record_not_streaming(_reason(exc))
                    self.metrics.record_error("capture", exc, time.time())
                    if isinstance(exc, SpoolError):
                        self.metrics.spool_errors.labels(reason=exc.reason).inc()
                    attempts += 1
                    if reconnect.max_attempts and attempts > reconnect.max_attempts:
                        raise
                    wait = reconnect.delay(attempts)
                    log.warning(
                        "retryable error; reconnecting",
                        attempt=attempts,
                        delay_seconds=round(wait, 2),
                        error=str(exc),
                    )
                    self.metrics.reconnects.inc()
                    self._restart_worker()
                    if self.stop_event.wait(wait):
                        return
        finally:
            monitor.stop()
            if self._copier is not None:
                self._copier.stop(timeout=self.settings.shutdown_grace)
                self._copier = None
            self._end_session()
            self._stop_worker()
            if self._spool_directory is not None:
                # Spilled transactions are only ever replayed within one run.
                self._spool_directory.close()
                self._spool_directory = None
                self._spool_dir = None

    def _store_wait(self, exc: SinkStoreError) -> float:
        """Count an object-store failure and return the backoff before the next session;
        past ``sink.store_retries.max_attempts`` failures in a row raise a terminal error
        naming the store's error (decision 0115).

        Call after ``_restart_worker``, which accounted for the batches the worker made
        durable: a failure after any progress starts a new run of failures.
        """
        retries = self.store_retries
        progress = self._sessions_with_progress
        if self._store_failed_at is None or progress > self._store_failed_at:
            self._store_failures = 0
        self._store_failed_at = progress
        self._store_failures += 1
        if retries.max_attempts and self._store_failures > retries.max_attempts:
            raise SinkError(
                f"the object store failed {self._store_failures} times in a row without a "
                f"durable batch in between (sink.store_retries.max_attempts "
                f"{retries.max_attempts}); the last failure ({exc.operation}): {exc.store_error}. "
                "Nothing past the last durable batch was "
                "acknowledged; the next run starts there"
            ) from exc
        wait = retries.delay(self._store_failures)
        self.metrics.store_retries.labels(operation=exc.operation).inc()
        log.warning(
            "the object store failed; the batch is applied again",
            attempt=self._store_failures,
            operation=exc.operation,
            store_error=exc.store_error,
            delay_seconds=round(wait, 2),
        )
        return wait

    def _interruption(self) -> Wal2DeltaError | None:
        """What ends the running session early: a fatal error, or a landed table copy."""
        if self._fatal is not None:
            return self._fatal
        copies = parts_of(self.sink).copies
        if copies is not None and copies.copy_rewind_due():
            return StreamRewindError("a table copied while streaming landed")
        return None

    def _start_copier(self, info: SourceInfo) -> None:
        """Start copying tables while streaming, once, when the sink can take such copies."""
        copies = parts_of(self.sink).copies
        if self._copier is not None or copies is None:
            return
        self._copier = OnlineCopier(
            self.settings,
            copies,
            self.metrics,
            server_version=info.server_version,
            watch_new_tables=self.settings.initial_snapshot,
        )
        if self.settings.initial_snapshot:
            copies.copy_new_tables()
        self._copier.start()

    def _copies_landed_at_end(self) -> bool:
        """At ``--endpos``: wait for every copy requested or running (new tables looked for
        too); True when one landed, so a rewound session must apply its changes."""
        copier = self._copier
        copies = parts_of(self.sink).copies
        if self.endpos is None or copier is None or copies is None:
            return False
        if self.stop_event.is_set():
            return False
        if not copier.settle(timeout=_ENDPOS_COPY_TIMEOUT):
            raise CaptureError(
                f"tables still being copied after {_ENDPOS_COPY_TIMEOUT:.0f} s at endpos: "
                f"{', '.join(copies.tables_copying()) or 'none started'}; run again to finish"
            )
        return copies.copy_rewind_due()

    def _restart_worker(self) -> None:
        """After a failed session: account for what the worker finished, start a new one.

        Changes the sink held back for a later batch were never acknowledged: the next
        session receives them again, so the sink forgets its copies.
        """
        self._end_session()
        self._stop_worker()
        if isinstance(self.sink, HoldingSink):
            self.sink.discard_held()
        self._worker = SinkWorker(self.sink)

    def _stop_worker(self) -> None:
        """Stop the sink worker within the shutdown grace period."""
        assert self._worker is not None
        if not self._worker.stop(timeout=self.settings.shutdown_grace):
            log.warning(
                "sink worker still applying a batch after the grace period",
                consequence="it is not acknowledged; the server sends it again",
            )

    def _end_session(self) -> None:
        """Account for what the worker finished (failures are on their way up already)."""
        session = self._session
        if session is None:
            return
        session.drain(raise_failures=False)
        if session.tracker.durable > self._resume_flush:  # where this session started
            self._sessions_with_progress += 1
        self._resume_flush = Lsn(session.tracker.acknowledged)
        self._session = None

    def _check_timeline(self, stream: ReplicationStream) -> int:
        """The server's timeline; a lake ahead of it (a failover to a standby that lacked
        changes the lake holds, ``capture/timeline.py``) stops the daemon, or with
        ``snapshot.on_slot_loss: resync`` has every table copied again."""
        parts = parts_of(self.sink)
        store = parts.timeline
        check = check_lake_timeline(stream, self.settings, store, checked=self._timeline)
        if check.fork is not None:
            assert store is not None
            self.metrics.record_error(
                "capture", LakeAheadOfServerError(check.fork.describe()), time.time()
            )
            if parts.copies is not None:
                parts.copies.request_copies(check.tables_to_copy, "lake ahead of server")
            store.accept_timeline(check.timeline)
        self._timeline = check.timeline
        return check.timeline

    def _markers(self) -> SnapshotMarkerStore | None:
        return parts_of(self.sink).markers

    def _run_session(self) -> None:
        settings = self.settings
        info: SourceInfo = prepare_source(
            settings, self._markers(), abandoned_walsender=self._abandoned_walsender
        )
        self._abandoned_walsender = None
        options = info.options
        self.metrics.build_info.labels(
            version=package_version(),
            proto_version=str(options.proto_version),
            spark_mode=self.config.sink.spark.mode,
            decoder_kernel=DECODER_KERNEL,
        ).set(1)
        stream = ReplicationStream.open(settings.conninfo, connect_timeout=settings.connect_timeout)
        try:
            # Where the server's WAL ends as the session starts: the backlog it already
            # holds is read in fewer, larger batches (``capture/batcher.py``, catching up).
            catch_up_to = parse_lsn(stream.identify_system()[2])
            timeline = self._check_timeline(stream)
            if settings.initial_snapshot:
                consistent_point = ensure_snapshot(settings, stream, info, self.sink, self.metrics)
                if consistent_point is not None:
                    self._resume_flush = consistent_point
            self._start_copier(info)
            copies = parts_of(self.sink).copies
            if info.lost_slot_tables and copies is not None:
                copies.request_copies(info.lost_slot_tables, "slot lost")
                if self._copier is not None:
                    self._copier.wake()
            assembler = Assembler(
                options,
                buffers=(
                    spilling_buffers(
                        self._spool(),
                        settings.spool_memory_limit,
                        max_bytes=settings.spool_max_bytes,
                    )
                    if self.replay_changes
                    # Recording: every transaction is discarded, never replayed.
                    else CountingChangeBuffer
                ),
            )
            batch = settings.batch
            assert self._worker is not None
            session = Session(
                stream=stream,
                assembler=assembler,
                tracker=FlushTracker(self._resume_flush),
                policy=FeedbackPolicy(
                    status_interval=settings.status_interval,
                    wal_sender_timeout=info.wal_sender_timeout,
                ),
                batcher=Batcher(
                    max_rows=batch.max_rows,
                    max_age=batch.max_age,
                    max_rows_ceiling=batch.max_rows_ceiling,
                    max_bytes=batch.max_bytes,
                    close_when_idle=batch.close_when_idle,
                    timeline=timeline,
                    catch_up_to=catch_up_to,
                ),
                worker=self._worker,
                metrics=self.metrics,
                state=self.state,
                stop_event=self.stop_event,
                fatal=self._interruption,
                shutdown_grace=settings.shutdown_grace,
                receive_timeout=settings.receive_timeout,
                endpos=self.endpos,
                clock=self.clock,
                frame_tap=self.frame_tap,
                frames_tap=self.frames_tap,
                replay_changes=self.replay_changes,
            )
            self._session = session
            stream.start(
                settings.slot,
                0,
                start_replication_options(options, settings.publications, settings.request.origin),
            )
            self.state.connected = True
            self.state.not_streaming = None
            self.metrics.record_not_streaming(None)
            log.info(
                "replication started",
                slot=settings.slot,
                publication=",".join(settings.publications),
                proto_version=options.proto_version,
                streaming=options.streaming,
                binary=options.binary,
                two_phase=options.two_phase,
            )
            session.loop()
            self._resume_flush = Lsn(session.tracker.acknowledged)
            self._session = None
        finally:
            self.state.connected = False
            stream.close()


def _reason(exc: Wal2DeltaError) -> str:
    """A bounded label for why the daemon is not streaming."""
    if isinstance(exc, SourceRefusedError):
        return exc.reason
    if isinstance(exc, ReceiveTimeoutError):
        return "receive_timeout"
    if isinstance(exc, ReplicationConnectionLostError):
        return "connection_lost"
    return type(exc).__name__
