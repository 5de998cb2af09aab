"""A fault-injecting HTTP proxy for an S3 server, for object-store fault tests.

Theory of operation
-------------------
``FaultProxy`` listens on 127.0.0.1 (one thread per connection, HTTP/1.1 keep-alive) and
forwards every request to the upstream S3 server (moto's) unchanged: method, path, query,
headers (the ``Host`` header too, so a request signed for the proxy's address stays
valid) and body. Each request first draws its fate from a ``random.Random`` seeded by the
test, so a run's schedule of faults is reproducible for the same sequence of requests:

* ``slow_down``: answered ``503 SlowDown`` with S3's XML error body, not forwarded;
* ``internal_error``: answered ``500 InternalError``, not forwarded;
* ``reset_before``: the connection is reset (``SO_LINGER`` 0, then close: the peer sees an
  RST) before the request is forwarded - it never reaches the store;
* ``reset_after``: forwarded, then the connection is reset instead of answered - the store
  did what was asked (a commit's PUT landed) and the client cannot know;
* ``delay``: forwarded after ``delay_seconds``.

``FaultPlan`` gives each fault's probability, and which requests may get one at all
(``methods``; ``path_contains``): a plan aimed at ``PUT`` hits a MERGE's data files and the
commit's ``_delta_log/*.json``. The proxy holds several plans; a request draws from the
first whose methods and path match. The store client retries a failed request itself
(object_store: 10 times within a few seconds, never a commit's conditional PUT), so a
fault that must reach the daemon repeats: ``streak`` gives the same answer to that many
requests in a row for the same method and object. ``max_faults`` ends the injection after
that many faults drawn (a streak counts once), which bounds a test's duration. A plan with
``permanent=True`` answers every request ``503 SlowDown``. The plans may be replaced while
the proxy runs (``set_plans``). Every fault drawn is counted by kind and by ``<kind>
<method> <object kind>`` (``injected``; object kinds ``commit`` for ``_delta_log/*.json``,
``log`` for the rest of ``_delta_log``, ``data``), and the requests seen (``requests``),
so a test can assert that faults really happened.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final
from uuid import uuid4

_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_ERRORS: Final = {
    "slow_down": (503, "SlowDown", "Please reduce your request rate."),
    "internal_error": (500, "InternalError", "We encountered an internal error. Please try again."),
}


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Probabilities of each fault per request (the module docstring); the rest forward."""

    slow_down: float = 0.0
    internal_error: float = 0.0
    reset_before: float = 0.0
    reset_after: float = 0.0
    delay: float = 0.0
    delay_seconds: float = 0.2
    methods: frozenset[str] = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"})
    path_contains: str = ""
    permanent: bool = False
    streak: int = 1

    def matches(self, method: str, path: str) -> bool:
        return self.permanent or (method in self.methods and self.path_contains in path)

    def draw(self, rng: random.Random, method: str, path: str) -> str | None:
        """The fault for one request, or None to forward it."""
        if self.permanent:
            return "slow_down"
        roll = rng.random()
        for kind in ("slow_down", "internal_error", "reset_before", "reset_after", "delay"):
            chance: float = getattr(self, kind)
            if roll < chance:
                return kind
            roll -= chance
        return None


def _object_kind(path: str) -> str:
    if "/_delta_log/" not in path:
        return "data"
    return "commit" if path.endswith(".json") else "log"


class FaultProxy:
    """A threaded proxy on 127.0.0.1 in front of ``upstream`` (``host:port``)."""

    def __init__(self, upstream: str, *, seed: int, max_faults: int | None = None) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._rng = random.Random(seed)
        self._plans: tuple[FaultPlan, ...] = ()
        self._streaks: dict[tuple[str, str], tuple[str, int]] = {}
        self._max_faults = max_faults
        self._lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        """Faults drawn so far, by kind and by ``<kind> <method> <object kind>``."""
        self.answered: Counter[str] = Counter()
        """Requests answered with a fault, by kind (a streak counts each request)."""
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fault-proxy", daemon=True
        )

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def set_plans(self, *plans: FaultPlan) -> None:
        """Draw from ``plans`` from now on (none: forward everything); streaks end."""
        with self._lock:
            self._plans = plans
            self._streaks.clear()

    @property
    def faults_drawn(self) -> int:
        with self._lock:
            return sum(n for kind, n in self.injected.items() if " " not in kind)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _fate(self, method: str, path: str) -> tuple[str | None, float]:
        with self._lock:
            self.requests += 1
            plan = next((p for p in self._plans if p.matches(method, path)), None)
            if plan is None:
                return None, 0.0
            target = (method, path.split("?", maxsplit=1)[0])
            fault: str | None
            if target in self._streaks:
                fault, left = self._streaks.pop(target)
                if left > 1:
                    self._streaks[target] = (fault, left - 1)
            else:
                drawn = sum(n for kind, n in self.injected.items() if " " not in kind)
                limit = self._max_faults
                if not plan.permanent and limit is not None and drawn >= limit:
                    return None, 0.0
                fault = plan.draw(self._rng, method, path)
                if fault is None:
                    return None, 0.0
                self.injected[fault] += 1
                self.injected[f"{fault} {method} {_object_kind(target[1])}"] += 1
                if plan.streak > 1:
                    self._streaks[target] = (fault, plan.streak - 1)
            self.answered[fault] += 1
            return fault, plan.delay_seconds

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            return response.status, response.reason, response.getheaders(), data
        finally:
            conn.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the test reads the counters

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    chunks: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _reset(self) -> None:
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                self.connection.close()

            def _error(self, kind: str) -> None:
                status, code, message = _ERRORS[kind]
                body = (
                    '<?xml version="1.0" encoding="UTF-8"?>\n'
                    f"<Error><Code>{code}</Code><Message>{message}</Message>"
                    f"<Resource>{self.path.split('?')[0]}</Resource>"
                    f"<RequestId>{uuid4().hex[:16].upper()}</RequestId></Error>"
                ).encode()
                self.send_response(status, code)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _handle(self) -> None:
                body = self._body()
                fault, delay = proxy._fate(self.command, self.path)
                if fault in _ERRORS:
                    self._error(fault)
                    return
                if fault == "reset_before":
                    self._reset()
                    return
                if fault == "delay":
                    time.sleep(delay)
                headers = [
                    (name, value)
                    for name, value in self.headers.items()
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length"
                ]
                try:
                    status, reason, answer_headers, data = proxy._forward(
                        self.command, self.path, headers, body
                    )
                except OSError:
                    self._reset()
                    return
                if fault == "reset_after":
                    self._reset()
                    return
                self.send_response(status, reason)
                length = str(len(data))
                for name, value in answer_headers:
                    if name.lower() == "content-length" and self.command == "HEAD":
                        length = value  # the object's size, not this answer's
                    elif name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle  # noqa: N815

        return Handler
