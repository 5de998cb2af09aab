"""How long the capture loop waits when nothing arrived (``Session._sleep_time``).

An open batch past its age is handed over at once to an idle sink worker, so the loop
must not wait past its deadline then. While the worker is busy the batch keeps growing
(``Batcher.due``) and the worker's wake-up ends the wait once it is free: the deadline
must not count, or every wait would be zero and the loop would spin for as long as the
worker applies, holding the interpreter lock its threads need.
"""

from __future__ import annotations

import pytest

from capture.batcher import Batcher
from capture.feedback import FeedbackPolicy, FlushTracker
from capture.session import Session
from capture.sink_worker import SinkWorker
from decoder import Lsn
from sink import Batch
from tests.support.sinks import HeldSink


def _session(worker: SinkWorker, batcher: Batcher, now: float, received: int = 0) -> Session:
    """A session with only what ``_sleep_time`` reads (the rest is never touched)."""
    session = object.__new__(Session)
    session.worker = worker
    session.batcher = batcher
    session.tracker = FlushTracker(received)
    session.receive_timeout = 0.0
    session.policy = FeedbackPolicy(status_interval=10.0, wal_sender_timeout=60.0)
    session.policy.sent(now, 0)
    return session


@pytest.mark.timeout(30)
def test_an_overdue_batch_ends_the_wait_only_while_the_worker_can_take_it() -> None:
    sink = HeldSink()
    worker = SinkWorker(sink)
    batcher = Batcher(max_rows=1000, max_age=0.1)
    batcher.end_transaction(Lsn(100), 0, now=0.0)  # a batch opened at 0, due at 0.1
    session = _session(worker, batcher, now=5.0)
    # Idle worker: the batch is overdue, so the loop does not wait.
    assert session._sleep_time(5.0) == 0.0
    # Busy worker: the batch grows; the wait lasts until the next feedback or a second.
    assert worker.offer(Batch((), None, 0, None), timeout=5)
    assert sink.started.wait(5)
    assert session._sleep_time(5.0) == pytest.approx(1.0)
    sink.release.set()
    assert worker.wait_report(5) is not None
    assert worker.stop(timeout=10)


@pytest.mark.timeout(30)
def test_catching_up_the_wait_lasts_until_max_age_after_the_last_change_added() -> None:
    # Catching up (``Batcher.catching_up``), the batch closes max_age after its last
    # change, not after its first: the wait must count that deadline, not spin on the
    # earlier one.
    worker = SinkWorker(HeldSink())
    batcher = Batcher(max_rows=1000, max_age=0.1, close_when_idle=True, catch_up_to=Lsn(900))
    batcher.end_transaction(Lsn(100), 0, now=0.0)
    assert batcher.take() is not None  # the session's first batch went at once
    batcher.end_transaction(Lsn(200), 0, now=4.0)  # opened at 4.0
    batcher.end_transaction(Lsn(300), 0, now=4.95)  # the last addition
    session = _session(worker, batcher, now=5.0, received=300)
    assert session._sleep_time(5.0) == pytest.approx(0.05)
    assert not session._batch_due(5.0)
    assert session._batch_due(5.06)
    assert worker.stop(timeout=10)
