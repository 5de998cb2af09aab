"""HTTP endpoints on the metrics port: /metrics, /healthz and /readyz.

``/healthz`` answers 200 while the replication loop has turned recently and the sink is
not stalled (the process is not wedged); ``/readyz`` answers 200 when connected, the
apply lag is within the configured limit and the sink is not stalled. All are cheap: they
read state the loop and the sink worker already keep.

A stalled sink: work is pending - a batch handed to the sink worker and not reported back,
or a transaction received and not yet durable - and the worker has been on the same batch
or upkeep for longer than ``health.stall_timeout`` (``SinkProgress``). The replication
loop keeps turning meanwhile (it answers the server while the sink works), so the loop's
own check cannot see it. An idle sink is never stalled, however long nothing came: the
clock counts from the start of the worker's current piece of work, not from its last
finished batch. The ``wal2delta_sink_stalled_seconds`` gauge is the same number.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from capture import Metrics, ServiceState, SinkWorker

Check = Callable[[], tuple[bool, str]]


@dataclass(frozen=True, slots=True)
class SinkProgress:
    """What a health check sees of the sink (the module docstring).

    Attributes:
        seconds_on_work: seconds the sink worker has been on its current batch or upkeep;
            0 while it waits for a batch.
        batches: batches handed to the worker and not reported back.
        transactions: transactions received and not yet durable.
    """

    seconds_on_work: float
    batches: int
    transactions: int

    @classmethod
    def of(
        cls, worker: SinkWorker | None, state: ServiceState, now: float | None = None
    ) -> SinkProgress:
        """Read ``worker`` (None before the first session: no work) and ``state``; ``now``
        is a ``time.monotonic`` reading (default: now)."""
        return cls(
            seconds_on_work=0.0 if worker is None else worker.seconds_on_work(now),
            batches=0 if worker is None else worker.in_flight,
            transactions=len(state.pending_commits),
        )

    @property
    def stalled_seconds(self) -> float:
        """``seconds_on_work`` while work is pending, else 0."""
        return self.seconds_on_work if self.batches or self.transactions else 0.0

    def stall(self, limit_seconds: float) -> str | None:
        """Why the sink counts as stalled past ``limit_seconds`` (0: never); None if not."""
        seconds = self.stalled_seconds
        if limit_seconds <= 0 or seconds <= limit_seconds:
            return None
        return (
            f"sink made no progress for {seconds:.0f}s with {self.batches} "
            f"batch{'' if self.batches == 1 else 'es'} in flight and {self.transactions} "
            f"transaction{'' if self.transactions == 1 else 's'} not durable"
        )


class HealthServer:
    """Serves metrics and health checks on a background thread."""

    def __init__(
        self, metrics: Metrics, *, host: str, port: int, alive: Check, ready: Check
    ) -> None:
        registry = metrics.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/metrics"):
                    self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif self.path.startswith("/healthz"):
                    ok, why = alive()
                    self._reply(200 if ok else 503, why.encode(), "text/plain")
                elif self.path.startswith("/readyz"):
                    ok, why = ready()
                    self._reply(200 if ok else 503, why.encode(), "text/plain")
                else:
                    self._reply(404, b"not found", "text/plain")

            def _reply(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # access logs would drown the structured log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="wal2delta-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def loop_alive_check(
    last_loop_at: Callable[[], float],
    limit_seconds: float,
    *,
    sink: Callable[[], SinkProgress] | None = None,
    stall_seconds: float = 0.0,
) -> Check:
    """Alive while the loop turned within ``limit_seconds`` and the sink (when given) is
    not stalled for more than ``stall_seconds`` (0: never counts as stalled)."""

    def check() -> tuple[bool, str]:
        age = time.monotonic() - last_loop_at()
        if age > limit_seconds:
            return False, f"replication loop stalled for {age:.0f}s"
        stall = None if sink is None else sink().stall(stall_seconds)
        if stall is not None:
            return False, stall
        return True, "ok"

    return check


def readiness_check(
    state: ServiceState,
    max_lag_seconds: float,
    *,
    sink: Callable[[], SinkProgress] | None = None,
    stall_seconds: float = 0.0,
) -> Check:
    """Ready: connected to the source, the sink (when given) not stalled for more than
    ``stall_seconds``, and no transaction waits for Delta longer than ``max_lag_seconds``
    (``ServiceState.apply_lag_seconds``, which grows while the sink is stuck). The
    ``wal2delta_ready`` gauge reads the same check at every scrape."""

    def check() -> tuple[bool, str]:
        stall = None if sink is None else sink().stall(stall_seconds)
        if stall is not None:
            return False, stall
        if not state.connected:
            why = state.not_streaming
            return False, f"not streaming: {why}" if why else "not connected to the source"
        lag = state.apply_lag_seconds(time.time())
        if lag > max_lag_seconds:
            return False, f"apply lag {lag:.0f}s above {max_lag_seconds:.0f}s"
        return True, "ok"

    return check
