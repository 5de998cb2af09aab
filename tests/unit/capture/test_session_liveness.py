"""The session's liveness check (``Session._check_liveness``), as worker.c keeps it.

The loop runs against a scripted stream and a clock that moves only when the loop waits, by
exactly what it asked to wait: after half of ``receive_timeout`` without a frame the
session sends a status update with a reply requested (a ping), after the whole of it it
abandons the connection with ``ReceiveTimeoutError``; any frame from the server, a
keepalive too, restarts the count, and so does data waiting unread on the socket.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence

import pytest

from capture.batcher import Batcher
from capture.errors import ReceiveTimeoutError, ReplicationConnectionLostError
from capture.feedback import FeedbackPolicy, FlushTracker
from capture.metrics import Metrics
from capture.session import ServiceState, Session
from capture.sink_worker import SinkWorker
from decoder import Assembler, Lsn, ProtocolOptions
from sink import Batch, BatchResult
from tests.support.sinks import HeldSink

WALSENDER_PID = 4242


def _keepalive(wal_end: int) -> bytes:
    return b"k" + struct.pack(">QqB", wal_end, 0, 0)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _ScriptedStream:
    """Frames due at set times; the wait moves the clock by the time the loop asks for."""

    def __init__(
        self,
        clock: _Clock,
        *,
        frames_at: Sequence[tuple[float, bytes]] = (),
        pending_at: Sequence[float] = (),
        stop_at: float | None = None,
        stop: threading.Event | None = None,
        always_pending: bool = False,
    ) -> None:
        self.clock = clock
        self.always_pending = always_pending
        self.frames_at = list(frames_at)
        self.pending_at = list(pending_at)
        self.stop_at = stop_at
        self.stop = stop
        self.sent: list[tuple[float, bytes]] = []
        self.abandoned_at: float | None = None
        self.backend_pid = WALSENDER_PID

    def read_frames(self) -> list[bytes]:
        due = [frame for at, frame in self.frames_at if at <= self.clock.now]
        self.frames_at = [(at, frame) for at, frame in self.frames_at if at > self.clock.now]
        return due

    def wait_readable(
        self, timeout: float, also: Sequence[int] = (), *, bulk: bool = False
    ) -> bool:
        assert timeout <= 1.0, "every wait of the loop is bounded by a second"
        upcoming = [at for at, _ in self.frames_at]
        target = self.clock.now + timeout
        if upcoming and min(upcoming) < target:
            target = min(upcoming)
        self.clock.now = target
        if self.stop_at is not None and self.clock.now >= self.stop_at and self.stop:
            self.stop.set()
        return False

    def pending_input(self) -> bool:
        if self.always_pending:
            return True
        due = [at for at in self.pending_at if at <= self.clock.now]
        self.pending_at = [at for at in self.pending_at if at > self.clock.now]
        return bool(due)

    def send(self, payload: bytes, *, timeout: float | None = None) -> None:
        self.sent.append((self.clock.now, payload))

    def abandon(self) -> None:
        self.abandoned_at = self.clock.now

    def pings(self) -> list[float]:
        """When status updates asking for a reply were sent (the last byte of ``r``)."""
        return [at for at, payload in self.sent if payload[:1] == b"r" and payload[-1] == 1]


class _NullSink:
    def apply(self, batch: Batch) -> BatchResult:
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def close(self) -> None:
        pass


def _run(
    stream: _ScriptedStream, clock: _Clock, receive_timeout: float, stop: threading.Event
) -> BaseException | None:
    worker = SinkWorker(_NullSink())
    session = Session(
        stream=stream,  # type: ignore[arg-type]
        assembler=Assembler(ProtocolOptions(1, "off")),
        tracker=FlushTracker(Lsn(0)),
        policy=FeedbackPolicy(status_interval=3600.0, wal_sender_timeout=0.0),
        batcher=Batcher(max_rows=1000, max_age=3600.0),
        worker=worker,
        metrics=Metrics(),
        state=ServiceState(),
        stop_event=stop,
        fatal=lambda: None,
        shutdown_grace=1.0,
        receive_timeout=receive_timeout,
        clock=clock,
    )
    try:
        session.loop()
    except ReplicationConnectionLostError as exc:
        return exc
    finally:
        assert worker.stop(timeout=10)
    return None


@pytest.mark.timeout(30)
def test_a_silent_server_is_pinged_at_half_the_timeout_and_dropped_at_the_whole() -> None:
    clock, stop = _Clock(), threading.Event()
    stream = _ScriptedStream(clock)
    error = _run(stream, clock, receive_timeout=10.0, stop=stop)
    assert isinstance(error, ReceiveTimeoutError)
    assert error.retryable
    assert error.walsender_pid == WALSENDER_PID
    assert "source.receive_timeout 10 s" in str(error)
    assert stream.pings() == [5.0]
    assert stream.abandoned_at == 10.0


@pytest.mark.timeout(30)
def test_a_keepalive_restarts_the_count_and_allows_a_new_ping() -> None:
    clock, stop = _Clock(), threading.Event()
    stream = _ScriptedStream(clock, frames_at=[(7.0, _keepalive(100))])
    error = _run(stream, clock, receive_timeout=10.0, stop=stop)
    assert isinstance(error, ReceiveTimeoutError)
    # Pinged at 5, answered at 7: pinged again at 12 and dropped at 17.
    assert stream.pings() == [5.0, 12.0]
    assert stream.abandoned_at == 17.0


@pytest.mark.timeout(30)
def test_data_waiting_unread_on_the_socket_counts_as_heard() -> None:
    clock, stop = _Clock(), threading.Event()
    stream = _ScriptedStream(clock, pending_at=[5.0])
    error = _run(stream, clock, receive_timeout=10.0, stop=stop)
    assert isinstance(error, ReceiveTimeoutError)
    # At 5 the socket had data (the loop reads it next): no ping until 10, drop at 15.
    assert stream.pings() == [10.0]
    assert stream.abandoned_at == 15.0


@pytest.mark.timeout(30)
def test_a_receive_timeout_of_zero_never_pings_nor_drops() -> None:
    clock, stop = _Clock(), threading.Event()
    stream = _ScriptedStream(clock, stop_at=500.0, stop=stop)
    assert _run(stream, clock, receive_timeout=0.0, stop=stop) is None
    assert clock.now >= 500.0
    assert stream.pings() == []
    assert stream.abandoned_at is None


class _TickingClock:
    """Moves two seconds at every reading; releases the sink once past ``release_at``."""

    def __init__(self, sink: HeldSink, release_at: float) -> None:
        self.now = 0.0
        self.sink = sink
        self.release_at = release_at

    def __call__(self) -> float:
        self.now += 2.0
        if self.now >= self.release_at:
            self.sink.release.set()
        return self.now


def _busy_session(
    stream: _ScriptedStream, clock: _TickingClock, sink: HeldSink
) -> tuple[Session, SinkWorker]:
    worker = SinkWorker(sink)
    session = Session(
        stream=stream,  # type: ignore[arg-type]
        assembler=Assembler(ProtocolOptions(1, "off")),
        tracker=FlushTracker(Lsn(0)),
        policy=FeedbackPolicy(status_interval=3600.0, wal_sender_timeout=0.0),
        batcher=Batcher(max_rows=1000, max_age=3600.0),
        worker=worker,
        metrics=Metrics(),
        state=ServiceState(),
        stop_event=threading.Event(),
        fatal=lambda: None,
        shutdown_grace=1.0,
        receive_timeout=10.0,
        clock=clock,
    )
    assert worker.offer(Batch((), None, 0, None), timeout=5)
    assert sink.started.wait(5)  # the worker is busy: the next hand-off waits
    return session, worker


@pytest.mark.timeout(60)
def test_a_busy_sink_with_data_waiting_on_the_socket_does_not_drop_the_connection() -> None:
    sink = HeldSink()
    clock = _TickingClock(sink, release_at=40.0)
    stream = _ScriptedStream(_Clock(), always_pending=True)  # unread data all along
    session, worker = _busy_session(stream, clock, sink)
    try:
        session._hand_off(Batch((), None, 0, None))  # waits well past the timeout
        assert clock.now >= 40.0
        assert stream.pings() == []
        assert stream.abandoned_at is None
    finally:
        sink.release.set()
        assert worker.stop(timeout=10)


@pytest.mark.timeout(60)
def test_a_silent_server_is_pinged_and_dropped_while_the_sink_is_busy() -> None:
    sink = HeldSink()
    clock = _TickingClock(sink, release_at=1000.0)
    stream = _ScriptedStream(_Clock())
    session, worker = _busy_session(stream, clock, sink)
    try:
        with pytest.raises(ReceiveTimeoutError):
            session._hand_off(Batch((), None, 0, None))
        assert len(stream.pings()) == 1
        assert stream.abandoned_at is not None
    finally:
        sink.release.set()
        assert worker.stop(timeout=10)
