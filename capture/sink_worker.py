"""The single sink worker thread: applies batches while the replication loop keeps going.

A long MERGE must not starve the replication connection of status updates (the
walsender would time us out), so the loop hands batches to this thread (``offer``, which
waits at most its timeout for room) and keeps replying to the server while there is none.
The worker reports each applied batch - or the error that stopped it - back through a
queue. Batches are applied strictly in the order they were handed over.

A batch is released as soon as it is applied: the report of an applied batch carries only
the figures the loop needs (positions, counts, timings), and the worker drops its own
reference before it waits for the next batch. By default nothing waits in between: a
batch is handed over only when the worker is idle (``max_pending=0``), and the loop keeps
the next full batch - and keeps answering the server - until then. The sink still always
has its next batch ready the moment it finishes one, and at most two batches are in
memory (one applied, one built), however long the backlog.

A batch handed to an idle worker is taken by the worker before ``offer`` returns: the
loop waits for the pick-up on a condition, which releases the interpreter lock (GIL).
Without that hand-shake, a worker woken while the loop replayed a spilled transaction
started its batch only when the loop blocked on the next full one (183 ms later in
``bench memory``): the loop holds the GIL but for short file reads, and the woken worker
did not get it in between (measured; CPython's GIL "convoy effect" is the likely
mechanism). Two full batches were then alive instead of one.

The worker wakes the replication loop (``wakeup_fd``, a pipe the loop's ``select`` also
waits on) whenever it posts a report or becomes idle, so a batch that waits for an idle
worker is handed over at once, not at the loop's next poll or the server's next message.

A sink that defers upkeep (``DeferringSink``: ``DeltaSink`` compacts tables, and writes its
commit-log records with the next batch's intent) gets ``after_apply`` right after each
applied batch is reported - so its transactions are acknowledged and their lag ends before
the upkeep - and ``settle`` once the worker has waited ``settle_after`` seconds without a
batch. A batch offered meanwhile waits for either: the worker is not idle. Both do a
bounded piece of upkeep (``DeltaSink``: about a second); while ``settle`` says more is
due, the worker settles again as long as no batch is waiting.

``seconds_on_work`` tells a health check how long the worker has been on its current
batch or upkeep (0 while it waits for a batch): a batch or an upkeep that never ends - an
engine call that hangs with no deadline - shows as a number that only grows
(``daemon/health.py``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from decoder import Lsn, PgTimestamp, format_lsn
from sink import Batch, BatchResult, DeferringSink, HoldingSink, Sink

log = structlog.get_logger("wal2delta.sink_worker")

_PICK_UP_WAIT_SECONDS = 0.1
"""Longest an ``offer`` to an idle worker waits for the worker to take the batch (it takes
microseconds; the bound only keeps a stuck worker from holding up the replication loop)."""


@dataclass(frozen=True, slots=True)
class AppliedBatch:
    """An applied batch, without its changes (see the module docstring)."""

    durable_lsn: Lsn | None
    last_commit_time: PgTimestamp | None
    row_count: int
    transaction_count: int
    result: BatchResult
    duration_seconds: float


@dataclass(frozen=True, slots=True)
class FailedBatch:
    batch: Batch
    error: BaseException


class SinkWorker:
    """Runs ``sink.apply`` for each handed-over batch on its own thread."""

    def __init__(self, sink: Sink, *, max_pending: int = 0, settle_after: float = 1.0) -> None:
        """Start the worker thread.

        Args:
            sink: where batches are applied.
            max_pending: batches that may wait while one is applied; 0 hands a batch over
                only to an idle worker.
            settle_after: seconds without a batch after which a ``DeferringSink`` is settled.
        """
        if max_pending < 0:
            raise ValueError("max_pending must not be negative")
        self._sink = sink
        self._deferring = sink if isinstance(sink, DeferringSink) else None
        self._holding = sink if isinstance(sink, HoldingSink) else None
        self._settle_after = settle_after
        self._unsettled = False
        """A batch was applied since the sink was last settled (worker thread only)."""
        self._max_pending = max_pending
        self._inbox: collections.deque[Batch] = collections.deque()
        self._inbox_changed = threading.Condition()
        self._idle = False
        """The worker waits for a batch (guarded by ``_inbox_changed``)."""
        self._offers = 0
        """``offer`` calls waiting for room (guarded by ``_inbox_changed``)."""
        self._outbox: queue.Queue[AppliedBatch | FailedBatch] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="wal2delta-sink", daemon=True)
        self._in_flight = 0
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._failed = False
        self._stopping = threading.Event()
        self._work_started = time.monotonic()
        """When the worker began its current batch or upkeep (``seconds_on_work``)."""
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._thread.start()

    @property
    def wakeup_fd(self) -> int:
        """Readable once the worker posted a report or became idle (``clear_wakeup``)."""
        return self._wake_read

    def clear_wakeup(self) -> None:
        """Consume the wake-ups so far; call it before looking at the worker's state."""
        if self._wake_read < 0:  # stopped
            return
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 512):
                pass

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe is readable already
            os.write(self._wake_write, b"\0")

    @property
    def waiting(self) -> int:
        """Batches handed over that the worker has not taken yet."""
        with self._inbox_changed:
            return len(self._inbox)

    @property
    def in_flight(self) -> int:
        """Batches handed over and not yet reported back."""
        return self._in_flight

    @property
    def busy(self) -> bool:
        """The worker still has a batch queued or being applied, or does the sink's upkeep."""
        with self._busy_lock:
            return self._busy > 0

    def seconds_on_work(self, now: float | None = None) -> float:
        """Seconds the worker has been on its current batch or upkeep; 0 while it waits
        for a batch. ``now`` is a ``time.monotonic`` reading (default: now)."""
        if self._idle:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - self._work_started)

    def offer(self, batch: Batch, timeout: float) -> bool:
        """Hand a batch over; False when there was no room for ``timeout`` seconds.

        Room means the worker is idle, or fewer than ``max_pending`` batches wait.
        """
        with self._busy_lock:
            self._busy += 1
        with self._inbox_changed:
            self._offers += 1
            room = self._inbox_changed.wait_for(self._has_room, timeout=max(timeout, 0.0))
            self._offers -= 1
            if not room:
                self._inbox_changed.notify_all()  # a worker waiting for this offer goes on
                with self._busy_lock:
                    self._busy -= 1
                return False
            self._inbox.append(batch)
            self._inbox_changed.notify_all()
            if not self._max_pending:
                # Wait, without the GIL, until the worker holds the batch (see the module
                # docstring): a caller that goes on with GIL-bound work at once would
                # otherwise keep the worker from starting for as long as that work lasts.
                self._inbox_changed.wait_for(self._picked_up, timeout=_PICK_UP_WAIT_SECONDS)
        with self._busy_lock:
            self._in_flight += 1
        return True

    def _picked_up(self) -> bool:
        return not self._inbox or self._stopping.is_set()

    def _has_room(self) -> bool:
        waiting = len(self._inbox)
        return waiting < self._max_pending or (self._idle and not waiting)

    def reports(self) -> list[AppliedBatch | FailedBatch]:
        """Return the reports that arrived since the last call, without blocking."""
        out: list[AppliedBatch | FailedBatch] = []
        while True:
            try:
                report = self._outbox.get_nowait()
            except queue.Empty:
                return out
            with self._busy_lock:
                self._in_flight -= 1
            out.append(report)

    def wait_report(self, timeout: float) -> AppliedBatch | FailedBatch | None:
        """Block up to ``timeout`` seconds for the next report."""
        try:
            report = self._outbox.get(timeout=timeout)
        except queue.Empty:
            return None
        with self._busy_lock:
            self._in_flight -= 1
        return report

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                # Batches waiting behind a stop are not applied, hence never acknowledged:
                # the server sends them again to the next run.
                return
            report = self._apply(batch)
            del batch  # not kept alive while the next one is awaited
            self._outbox.put(report)
            self._wake()
            if self._deferring is not None and isinstance(report, AppliedBatch):
                self._unsettled = True
                self._upkeep(self._deferring.after_apply)

    def _next_batch(self) -> Batch | None:
        """Wait for the next batch, settling the sink if none comes for a moment.

        Changes a ``HoldingSink`` holds back (``sink.table_min_rows``) must not wait past
        their age limit for a batch that may not come: at that deadline the worker applies
        an empty ``release_held`` batch of its own, reported like any other, which lets
        the session acknowledge them.

        Returns:
            The batch, or None once a stop was asked for.
        """
        idle_since = time.monotonic()
        while True:
            with self._inbox_changed:
                self._idle = True
                self._inbox_changed.notify_all()
                self._wake()
                self._inbox_changed.wait_for(self._has_work, timeout=self._idle_timeout(idle_since))
                if self._offers and not self._has_work():
                    # An offer was waiting for this idle moment: its batch goes before any
                    # upkeep (the condition's lock alone would not let it in first).
                    self._inbox_changed.wait_for(self._offer_done, timeout=_PICK_UP_WAIT_SECONDS)
                self._idle = False  # also while settling: an offered batch waits for it
                self._work_started = time.monotonic()
                if self._stopping.is_set():
                    return None
                if self._inbox:
                    batch = self._inbox.popleft()
                    self._inbox_changed.notify_all()  # an ``offer`` waits for the pick-up
                    return batch
            if self._held_due():
                with self._busy_lock:
                    self._busy += 1
                    self._in_flight += 1
                return Batch(
                    (),
                    durable_lsn=None,
                    transaction_count=0,
                    last_commit_time=None,
                    release_held=True,
                )
            if self._unsettled and time.monotonic() - idle_since >= self._settle_after:
                self._settle()

    def _idle_timeout(self, idle_since: float) -> float | None:
        """How long an idle worker waits for a batch before it has something to do."""
        deadlines = []
        if self._unsettled:
            deadlines.append(idle_since + self._settle_after)
        held = self._held_deadline()
        if held is not None:
            deadlines.append(held)
        return None if not deadlines else max(0.0, min(deadlines) - time.monotonic())

    def _held_deadline(self) -> float | None:
        if self._holding is None or self._failed:
            return None
        return self._holding.held_deadline()

    def _held_due(self) -> bool:
        deadline = self._held_deadline()
        return deadline is not None and time.monotonic() >= deadline

    def _has_work(self) -> bool:
        return bool(self._inbox) or self._stopping.is_set()

    def _offer_done(self) -> bool:
        return self._has_work() or not self._offers

    def _settle(self) -> None:
        self._unsettled = False
        if self._deferring is not None and not self._failed:
            # Still due: settle again at once unless a batch came meanwhile (``_next_batch``).
            self._unsettled = self._upkeep(self._deferring.settle) is True

    def _upkeep(self, work: Callable[[], object]) -> object:
        """Run the sink's upkeep and return what it returns (None when it failed); the
        worker counts as busy meanwhile (``busy``)."""
        with self._busy_lock:
            self._busy += 1
        self._work_started = time.monotonic()
        try:
            return work()
        except Exception as exc:  # the sink logs its own failures; this is a last resort
            log.warning("sink upkeep failed", error=f"{type(exc).__name__}: {exc}")
            return None
        finally:
            self._done()

    def _apply(self, batch: Batch) -> AppliedBatch | FailedBatch:
        if self._failed:
            # After a failure nothing later may be applied: order is an invariant.
            self._done()
            return FailedBatch(batch, RuntimeError("an earlier batch failed"))
        started = self._work_started = time.monotonic()
        try:
            result = self._sink.apply(batch)
        except BaseException as exc:  # reported to the loop, which decides
            self._failed = True
            self._done()
            return FailedBatch(batch, exc)
        self._done()
        duration = time.monotonic() - started
        log.debug(
            "batch durable",
            rows=len(batch.changes),
            durable_lsn=format_lsn(batch.durable_lsn) if batch.durable_lsn else None,
            duration_seconds=round(duration, 3),
        )
        return AppliedBatch(
            durable_lsn=batch.durable_lsn,
            last_commit_time=batch.last_commit_time,
            row_count=len(batch.changes),
            transaction_count=batch.transaction_count,
            result=result,
            duration_seconds=duration,
        )

    def _done(self) -> None:
        with self._busy_lock:
            self._busy -= 1

    def stop(self, timeout: float = 30.0) -> bool:
        """End the thread within ``timeout`` seconds; queued batches are not applied.

        The batch being applied finishes (a MERGE cannot be interrupted); the call never
        waits for room in a full queue, so a stop honours the shutdown grace period even
        while a MERGE hangs. Callers that want every handed-over batch applied wait for
        their reports first (``Session.drain``).

        Returns:
            Whether the thread ended in time (it is a daemon thread either way).
        """
        with self._inbox_changed:
            self._stopping.set()
            self._inbox_changed.notify_all()  # wakes a worker waiting for work
        self._thread.join(max(0.0, timeout))
        if self._thread.is_alive():
            return False  # the pipe stays open: the thread may still write to it
        if self._wake_write >= 0:
            os.close(self._wake_write)
            os.close(self._wake_read)
            self._wake_write = self._wake_read = -1
        return True
