"""The sink worker stops within the grace period, whatever the sink is doing."""

from __future__ import annotations

import threading
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


def test_max_pending_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="max_pending"):
        SinkWorker(BlockedSink(), max_pending=-1)
