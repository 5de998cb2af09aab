"""HTTP endpoints on the metrics port: /metrics, /healthz and /readyz.

``/healthz`` answers 200 while the replication loop has turned recently (the process is
not wedged); ``/readyz`` answers 200 when connected and the apply lag is within the
configured limit. Both are cheap: they read state the loop already keeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from capture import Metrics, ServiceState

Check = Callable[[], tuple[bool, str]]


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


def loop_alive_check(last_loop_at: Callable[[], float], limit_seconds: float) -> Check:
    """Alive while the loop turned within ``limit_seconds``."""

    def check() -> tuple[bool, str]:
        age = time.monotonic() - last_loop_at()
        if age > limit_seconds:
            return False, f"replication loop stalled for {age:.0f}s"
        return True, "ok"

    return check


def readiness_check(state: ServiceState, max_lag_seconds: float) -> Check:
    """Ready: connected to the source, and no transaction waits for Delta longer than
    ``max_lag_seconds`` (``ServiceState.apply_lag_seconds``, which grows while the sink is
    stuck). The ``wal2delta_ready`` gauge reads the same check at every scrape."""

    def check() -> tuple[bool, str]:
        if not state.connected:
            why = state.not_streaming
            return False, f"not streaming: {why}" if why else "not connected to the source"
        lag = state.apply_lag_seconds(time.time())
        if lag > max_lag_seconds:
            return False, f"apply lag {lag:.0f}s above {max_lag_seconds:.0f}s"
        return True, "ok"

    return check
