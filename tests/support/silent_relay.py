"""A TCP relay in front of a test server that can make the network go silent.

Theory of operation
-------------------
``SilentRelay`` listens on 127.0.0.1 and connects every client it accepts to the target
(a test PostgreSQL). One thread per connection copies bytes both ways with ``select`` on
the two sockets, a tenth of a second at a time, so it notices a change of mode promptly.

``go_silent`` does what a dropped NAT or conntrack entry, or a hung peer, does to the
connections through it: every connection open at that moment stops forwarding, in both
directions and for ever. Its sockets stay open and are simply no longer read or written -
no FIN, no RST - so each side sees a connection that is alive and carries nothing (their
kernels still acknowledge what they send until the buffers fill, which is why TCP
keepalives cannot notice this, and why the daemon needs a receive timeout of its own).
Until ``restore``, new connections are accepted and held the same way: a client's connect
succeeds and then hears nothing, so only its own connect timeout ends the attempt.
After ``restore`` new connections go through again; the frozen ones stay frozen until
``close``, which closes every socket.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from types import TracebackType

from psycopg.conninfo import make_conninfo


class SilentRelay:
    """Forwards 127.0.0.1:``port`` to ``target``; ``go_silent``/``restore`` as above."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._silent = False
        self._closed = threading.Event()
        self._live: list[_Pair] = []
        self._held: list[socket.socket] = []
        self.connections = 0
        """Connections forwarded so far (held ones not counted)."""
        self.held = 0
        """Connections accepted while silent and never forwarded."""
        self._acceptor = threading.Thread(target=self._accept, name="relay-accept", daemon=True)
        self._acceptor.start()

    def dsn(self, dsn: str, **params: str) -> str:
        """``dsn`` pointed at the relay instead, with ``params`` added."""
        return make_conninfo(dsn, host="127.0.0.1", port=str(self.port), **params)

    def go_silent(self) -> None:
        """Freeze every open connection for good; hold new ones until ``restore``."""
        with self._lock:
            self._silent = True
            for pair in self._live:
                pair.frozen.set()

    def restore(self) -> None:
        """Let new connections through again (the frozen ones stay frozen)."""
        with self._lock:
            self._silent = False

    def close(self) -> None:
        """Close the listener and every socket (the peers then see the connections end)."""
        self._closed.set()
        self._listener.close()
        with self._lock:
            pairs, held = list(self._live), list(self._held)
        for pair in pairs:
            pair.close()
        for sock in held:
            sock.close()
        self._acceptor.join(5)
        for pair in pairs:
            pair.thread.join(5)

    def __enter__(self) -> SilentRelay:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._silent:
                    self._held.append(client)  # accepted, never read nor answered
                    self.held += 1
                    continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, upstream, self._closed)
            with self._lock:
                self._live.append(pair)
                self.connections += 1
            pair.thread.start()


class _Pair:
    """One relayed connection and the thread that copies its bytes both ways."""

    def __init__(self, client: socket.socket, upstream: socket.socket, closed: threading.Event):
        self.client = client
        self.upstream = upstream
        self.frozen = threading.Event()
        self._closed = closed
        self.thread = threading.Thread(target=self._pump, name="relay-pump", daemon=True)

    def _pump(self) -> None:
        peers = {self.client: self.upstream, self.upstream: self.client}
        try:
            while not self._closed.is_set():
                if self.frozen.is_set():
                    # Silent for good: nothing read, nothing written, nothing closed.
                    self._closed.wait(0.1)
                    continue
                readable, _, _ = select.select(list(peers), [], [], 0.1)
                for sock in readable:
                    if self.frozen.is_set():
                        break
                    data = sock.recv(65536)
                    if not data:
                        self.close()  # a real end of connection passes through
                        return
                    peers[sock].sendall(data)
        except OSError:
            self.close()

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a send blocked on a full buffer
            sock.close()
