"""/healthz and /readyz notice a sink stuck on a batch, and only while work is pending.

A real ``SinkWorker`` runs a sink whose ``apply`` waits until released (a MERGE that never
returns). Time is never waited for: the checks read the worker at a ``now`` ten minutes
ahead, which is what a scrape ten minutes later would see.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import generate_latest

from capture import Metrics, ServiceState, SinkWorker
from daemon.health import HealthServer, SinkProgress, loop_alive_check, readiness_check
from sink import Batch
from tests.support.sinks import HeldSink

LATER = 600.0
"""How far ahead of now the checks look (seconds)."""
STALL = 300.0


def _batch() -> Batch:
    return Batch(changes=(), durable_lsn=None, transaction_count=1, last_commit_time=None)


@pytest.fixture
def sink() -> Iterator[HeldSink]:
    hanging = HeldSink()
    yield hanging
    hanging.release.set()


@pytest.fixture
def worker(sink: HeldSink) -> Iterator[SinkWorker]:
    running = SinkWorker(sink)
    yield running
    sink.release.set()
    running.stop(timeout=10)


def _later(worker: SinkWorker, state: ServiceState) -> Callable[[], SinkProgress]:
    return lambda: SinkProgress.of(worker, state, now=time.monotonic() + LATER)


def _alive(worker: SinkWorker, state: ServiceState) -> Callable[[], tuple[bool, str]]:
    return loop_alive_check(
        time.monotonic, limit_seconds=300, sink=_later(worker, state), stall_seconds=STALL
    )


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _hang_one_batch(worker: SinkWorker, sink: HeldSink, state: ServiceState) -> None:
    state.on_received(100, time.time())
    state.on_received(200, time.time())
    assert worker.offer(_batch(), timeout=5)
    assert sink.started.wait(10), "the worker took the batch"


@pytest.mark.timeout(60)
def test_healthz_fails_when_the_sink_is_stuck_on_a_batch_and_says_why(
    worker: SinkWorker, sink: HeldSink
) -> None:
    state = ServiceState()
    state.connected = True
    _hang_one_batch(worker, sink, state)
    metrics = Metrics()
    server = HealthServer(
        metrics,
        host="127.0.0.1",
        port=0,
        alive=_alive(worker, state),
        ready=readiness_check(state, 1e9, sink=_later(worker, state), stall_seconds=STALL),
    )
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        healthz, readyz = _get(f"{base}/healthz"), _get(f"{base}/readyz")
    finally:
        server.stop()
    why = (
        f"sink made no progress for {LATER:.0f}s with 1 batch in flight and 2 transactions "
        "not durable"
    )
    assert healthz == (503, why)
    assert readyz == (503, why)


@pytest.mark.timeout(60)
def test_a_stalled_sink_shows_in_the_gauge_and_the_stall_ends_with_the_batch(
    worker: SinkWorker, sink: HeldSink
) -> None:
    state = ServiceState()
    _hang_one_batch(worker, sink, state)
    metrics = Metrics()
    metrics.sink_stalled_seconds.set_function(lambda: _later(worker, state)().stalled_seconds)
    exposed = generate_latest(metrics.registry).decode()
    line = next(x for x in exposed.splitlines() if x.startswith("wal2delta_sink_stalled_seconds "))
    assert float(line.split()[1]) >= LATER

    sink.release.set()
    report = worker.wait_report(timeout=10)
    assert report is not None, "the released batch is reported"
    state.on_durable(200)
    # The worker waits for its next batch again: nothing is stalled, however late we look.
    assert worker.in_flight == 0
    assert _later(worker, state)().stalled_seconds == 0.0
    assert _alive(worker, state)() == (True, "ok")


def test_an_idle_sink_without_pending_work_stays_healthy(worker: SinkWorker) -> None:
    state = ServiceState()
    progress = _later(worker, state)()
    assert progress == SinkProgress(seconds_on_work=0.0, batches=0, transactions=0)
    assert _alive(worker, state)() == (True, "ok")


def test_transactions_waiting_for_an_idle_sink_are_no_stall(worker: SinkWorker) -> None:
    # A transaction the batcher still holds (batch.max_age) after an hour without
    # traffic: the worker waits for a batch, so the sink has not stalled.
    state = ServiceState()
    state.on_received(100, time.time() - 3600)
    assert worker.seconds_on_work(time.monotonic() + LATER) == 0.0
    assert _alive(worker, state)() == (True, "ok")


def test_a_stuck_upkeep_with_transactions_pending_is_a_stall() -> None:
    progress = SinkProgress(seconds_on_work=400.0, batches=0, transactions=3)
    assert progress.stall(STALL) == (
        "sink made no progress for 400s with 0 batches in flight and 3 transactions not durable"
    )


def test_a_stall_timeout_of_zero_never_fails() -> None:
    assert SinkProgress(seconds_on_work=1e6, batches=2, transactions=9).stall(0) is None


def test_a_stall_below_the_timeout_is_healthy() -> None:
    assert SinkProgress(seconds_on_work=STALL, batches=1, transactions=1).stall(STALL) is None


def test_before_the_first_session_there_is_no_work() -> None:
    state = ServiceState()
    state.on_received(100, time.time())
    assert SinkProgress.of(None, state).stalled_seconds == 0.0
