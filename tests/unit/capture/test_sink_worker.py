"""The sink worker stops within the grace period, whatever the sink is doing."""

from __future__ import annotations

import threading

import pytest

from capture import SinkWorker
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
