"""The sink worker stops within the grace period, whatever the sink is doing."""

from __future__ import annotations

import select
import threading
import time
import weakref

import pytest

from capture import AppliedBatch, SinkWorker
from decoder import Lsn, PgTimestamp
from sink import Batch, BatchResult


class BlockedSink:
    """A sink whose first ``apply`` waits until released (a hanging MERGE)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.applied = 0

    def apply(self, batch: Batch) -> BatchResult:
        self.started.set()
        self.release.wait()
        self.applied += 1
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def close(self) -> None:
        pass


def _batch() -> Batch:
    return Batch(changes=(), durable_lsn=None, transaction_count=0, last_commit_time=None)


@pytest.mark.timeout(30)
def test_stop_returns_while_a_batch_hangs_and_queued_batches_are_not_applied() -> None:
    sink = BlockedSink()
    worker = SinkWorker(sink, max_pending=2)
    assert worker.offer(_batch(), timeout=1)
    assert sink.started.wait(5)
    assert worker.offer(_batch(), timeout=1)
    assert worker.offer(_batch(), timeout=1)  # the queue is full now
    assert not worker.stop(timeout=0.1), "the hanging batch keeps the thread alive"
    sink.release.set()
    assert worker.stop(timeout=10)
    assert sink.applied == 1, "batches queued behind the stop are never applied"


class _Change:
    """Stands in for a change; weakly referenceable, to see when the batch is released."""


class _CountingSink:
    def apply(self, batch: Batch) -> BatchResult:
        return BatchResult(
            rows_by_table={"public.t": {"insert": 1}}, toast_anomalies=0, duration_seconds=0.0
        )

    def close(self) -> None:
        pass


@pytest.mark.timeout(30)
def test_an_applied_batch_is_released_while_the_worker_waits_for_the_next() -> None:
    change = _Change()
    released = weakref.ref(change)
    batch = Batch(
        changes=(change,),  # type: ignore[arg-type]  # only its lifetime matters here
        durable_lsn=Lsn(0x1234),
        transaction_count=1,
        last_commit_time=PgTimestamp(42),
    )
    worker = SinkWorker(_CountingSink())
    assert worker.offer(batch, timeout=1)
    del batch, change
    report = worker.wait_report(10)
    assert isinstance(report, AppliedBatch)
    assert (report.durable_lsn, report.last_commit_time) == (0x1234, 42)
    assert (report.row_count, report.transaction_count) == (1, 1)
    assert report.result.rows_by_table == {"public.t": {"insert": 1}}
    assert released() is None, "the worker (or its report) still holds the applied batch"
    assert worker.stop(timeout=10)


@pytest.mark.timeout(30)
def test_one_batch_waits_while_one_is_applied_with_max_pending_one() -> None:
    sink = BlockedSink()
    worker = SinkWorker(sink, max_pending=1)
    assert worker.offer(_batch(), timeout=1)
    assert sink.started.wait(5)
    assert worker.offer(_batch(), timeout=1)
    assert not worker.offer(_batch(), timeout=0.1), "a second waiting batch was accepted"
    sink.release.set()
    assert worker.stop(timeout=10)


@pytest.mark.timeout(30)
def test_by_default_a_batch_is_handed_over_only_to_an_idle_worker() -> None:
    sink = BlockedSink()
    worker = SinkWorker(sink)
    assert worker.offer(_batch(), timeout=1)
    assert sink.started.wait(5)
    assert worker.busy
    assert not worker.offer(_batch(), timeout=0.1), "a batch waited while one was applied"
    # The worker takes the next batch the moment it is idle again: an offer waiting then
    # succeeds at once, and both batches are applied in order.
    handed_over = threading.Event()

    def offer_next() -> None:
        if worker.offer(_batch(), timeout=10):
            handed_over.set()

    offering = threading.Thread(target=offer_next)
    offering.start()
    assert not handed_over.wait(0.2), "handed over while the first batch was still applied"
    sink.release.set()
    assert handed_over.wait(5)
    offering.join(5)
    reports = [worker.wait_report(5), worker.wait_report(5)]
    assert all(isinstance(report, AppliedBatch) for report in reports)
    assert sink.applied == 2
    assert not worker.busy
    assert worker.stop(timeout=10)


@pytest.mark.timeout(30)
def test_an_offer_to_an_idle_worker_returns_once_the_worker_has_taken_the_batch() -> None:
    # The loop goes back to GIL-bound replay right after an offer; the worker must hold
    # the batch by then (see the module docstring of capture.sink_worker).
    sink = BlockedSink()
    worker = SinkWorker(sink)
    for _ in range(20):
        assert worker.offer(_batch(), timeout=1)
        assert worker.waiting == 0, "the offer returned before the worker took the batch"
        assert sink.started.wait(5)
        sink.started.clear()
        sink.release.set()
        assert isinstance(worker.wait_report(5), AppliedBatch)
        sink.release.clear()
    # A worker that may queue batches (max_pending) lets them wait, as before.
    hanging = BlockedSink()
    queueing = SinkWorker(hanging, max_pending=1)
    assert queueing.offer(_batch(), timeout=1)
    assert hanging.started.wait(5)
    assert queueing.offer(_batch(), timeout=1)
    assert queueing.waiting == 1
    hanging.release.set()
    assert worker.stop(timeout=10)
    assert queueing.stop(timeout=10)


def test_max_pending_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="max_pending"):
        SinkWorker(BlockedSink(), max_pending=-1)


class _DeferringSink:
    """Records applies, upkeep after them and settles; ``settle`` blocks while ``hold`` is
    clear, and says more is due for its first ``pieces - 1`` calls after each batch."""

    def __init__(self, *, fail: bool = False, pieces: int = 1) -> None:
        self.events: list[str] = []
        self.settling = threading.Event()
        self.hold = threading.Event()
        self.hold.set()
        self.fail = fail
        self.pieces = pieces
        self._left = pieces

    def apply(self, batch: Batch) -> BatchResult:
        self.events.append("apply")
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def after_apply(self) -> None:
        self.events.append("after")
        self._left = self.pieces

    def settle(self) -> bool:
        self.events.append("settle")
        self.settling.set()
        self.hold.wait()
        if self.fail:
            raise RuntimeError("the commit log is unreachable")
        self._left -= 1
        return self._left > 0

    def close(self) -> None:
        pass


@pytest.mark.timeout(30)
def test_a_settling_sink_is_settled_once_after_it_stays_idle() -> None:
    sink = _DeferringSink()
    worker = SinkWorker(sink, settle_after=0.3)
    # Batches that follow each other within settle_after: no settle in between.
    for _ in range(3):
        assert worker.offer(_batch(), timeout=5)
        assert isinstance(worker.wait_report(5), AppliedBatch)
    assert sink.settling.wait(5)
    assert sink.events == ["apply", "after", "apply", "after", "apply", "after", "settle"]
    # Settled once: idle on, nothing more to settle until the next batch.
    sink.settling.clear()
    assert not sink.settling.wait(0.8)
    assert worker.offer(_batch(), timeout=5)
    assert sink.settling.wait(5)
    assert sink.events[7:] == ["apply", "after", "settle"]
    assert worker.stop(timeout=10)


@pytest.mark.timeout(30)
def test_a_batch_offered_while_the_sink_settles_waits_for_it() -> None:
    sink = _DeferringSink()
    sink.hold.clear()
    worker = SinkWorker(sink, settle_after=0.05)
    assert worker.offer(_batch(), timeout=5)
    assert sink.settling.wait(5)
    assert not worker.offer(_batch(), timeout=0.2), "handed over while the sink settled"
    sink.hold.set()
    assert worker.offer(_batch(), timeout=5)
    reports = [worker.wait_report(5), worker.wait_report(5)]
    assert all(isinstance(report, AppliedBatch) for report in reports)
    assert sink.events[:4] == ["apply", "after", "settle", "apply"]
    assert worker.stop(timeout=10)


@pytest.mark.timeout(30)
def test_upkeep_still_due_is_settled_piece_by_piece_while_idle() -> None:
    sink = _DeferringSink(pieces=3)
    worker = SinkWorker(sink, settle_after=0.05)
    assert worker.offer(_batch(), timeout=5)
    assert isinstance(worker.wait_report(5), AppliedBatch)
    deadline = time.monotonic() + 5
    while sink.events.count("settle") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # no fourth piece: the third said nothing is left
    assert sink.events == ["apply", "after", "settle", "settle", "settle"]
    assert worker.stop(timeout=10)


@pytest.mark.timeout(30)
def test_a_batch_offered_between_pieces_of_upkeep_goes_first() -> None:
    sink = _DeferringSink(pieces=100)
    sink.hold.clear()
    worker = SinkWorker(sink, settle_after=0.05)
    assert worker.offer(_batch(), timeout=5)
    assert sink.settling.wait(5)
    offered: list[bool] = []
    offering = threading.Thread(target=lambda: offered.append(worker.offer(_batch(), 5)))
    offering.start()
    time.sleep(0.2)
    assert not offered, "handed over while the sink settled"
    sink.hold.set()  # this piece ends; the next one waits behind the batch
    offering.join(5)
    assert offered == [True]
    reports = [worker.wait_report(5), worker.wait_report(5)]
    assert all(isinstance(report, AppliedBatch) for report in reports)
    assert sink.events[:4] == ["apply", "after", "settle", "apply"]
    assert worker.stop(timeout=10)


@pytest.mark.timeout(30)
def test_a_failed_settle_does_not_stop_the_worker() -> None:
    sink = _DeferringSink(fail=True)
    worker = SinkWorker(sink, settle_after=0.05)
    assert worker.offer(_batch(), timeout=5)
    assert sink.settling.wait(5)
    sink.settling.clear()
    assert worker.offer(_batch(), timeout=5)
    assert isinstance(worker.wait_report(5), AppliedBatch)
    assert isinstance(worker.wait_report(5), AppliedBatch)
    assert sink.settling.wait(5), "settled again after the next batch"
    assert worker.stop(timeout=10)


class _SlowUpkeepSink(_DeferringSink):
    """``after_apply`` blocks until released (a long compaction)."""

    def __init__(self) -> None:
        super().__init__()
        self.upkeep_started = threading.Event()
        self.release_upkeep = threading.Event()

    def after_apply(self) -> None:
        super().after_apply()
        self.upkeep_started.set()
        self.release_upkeep.wait()


@pytest.mark.timeout(30)
def test_a_batch_is_reported_before_the_upkeep_it_leaves_and_the_next_waits_for_it() -> None:
    sink = _SlowUpkeepSink()
    worker = SinkWorker(sink, settle_after=60)
    assert worker.offer(_batch(), timeout=5)
    assert sink.upkeep_started.wait(5)
    assert isinstance(worker.wait_report(5), AppliedBatch), "reported before the upkeep ended"
    assert worker.busy
    assert not worker.offer(_batch(), timeout=0.2), "handed over during the upkeep"
    sink.release_upkeep.set()
    assert worker.offer(_batch(), timeout=5)
    assert isinstance(worker.wait_report(5), AppliedBatch)
    assert worker.stop(timeout=10)  # joins the thread, past the second batch's upkeep
    assert sink.events == ["apply", "after", "apply", "after"]


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


@pytest.mark.timeout(30)
def test_the_worker_wakes_the_loop_when_it_reports_and_when_it_is_idle_again() -> None:
    sink = _SlowUpkeepSink()
    worker = SinkWorker(sink, settle_after=60)
    assert _readable(worker.wakeup_fd, 5), "idle at start"
    worker.clear_wakeup()
    assert not _readable(worker.wakeup_fd, 0.1), "cleared"
    assert worker.offer(_batch(), timeout=5)
    assert sink.upkeep_started.wait(5)
    assert _readable(worker.wakeup_fd, 5), "the report is posted"
    worker.clear_wakeup()
    assert worker.busy
    assert not _readable(worker.wakeup_fd, 0.2), "busy with upkeep: no wake-up"
    sink.release_upkeep.set()
    assert _readable(worker.wakeup_fd, 5), "idle again after the upkeep"
    assert not worker.busy
    assert worker.stop(timeout=10)
    worker.clear_wakeup()  # harmless once stopped


class _HoldingSink:
    """Holds every batch's changes back until a ``release_held`` batch comes."""

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self.deadline: float | None = None
        self.released = threading.Event()

    def apply(self, batch: Batch) -> BatchResult:
        if batch.release_held:
            self.deadline = None
            self.released.set()
            return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)
        if self.deadline is None:
            self.deadline = time.monotonic() + self.max_age
        return BatchResult(
            rows_by_table={},
            toast_anomalies=0,
            duration_seconds=0.0,
            held_lsn=Lsn(42),
            held_changes=1,
        )

    def held_deadline(self) -> float | None:
        return self.deadline

    def discard_held(self) -> None:
        self.deadline = None

    def close(self) -> None:
        pass


@pytest.mark.timeout(30)
def test_held_changes_are_released_at_their_deadline_without_a_new_batch() -> None:
    sink = _HoldingSink(max_age=0.3)
    worker = SinkWorker(sink)
    try:
        assert worker.offer(_batch(), timeout=1)
        first = worker.wait_report(5)
        assert isinstance(first, AppliedBatch)
        assert first.result.held_lsn == 42
        assert sink.released.wait(5), "the worker applies a release batch at the deadline"
        release = worker.wait_report(5)
        assert isinstance(release, AppliedBatch)
        assert release.result.held_lsn is None
        assert release.durable_lsn is None
        assert worker.in_flight == 0, "the worker's own batch is accounted like any other"
    finally:
        assert worker.stop(timeout=5)
