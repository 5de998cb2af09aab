"""The COPY BOTH replication stream over a psycopg 3 connection.

Theory of operation: psycopg 3 has no replication API, but since 3.3 ``START_REPLICATION``
run through ``Connection.execute`` leaves the connection in COPY BOTH mode. From there we
drive libpq directly through ``conn.pgconn``: ``consume_input`` + ``get_copy_data(1)``
(non-blocking) until it would block, ``put_copy_data`` + ``flush`` to reply, and
``select`` on the socket with a timeout equal to the caller's next deadline (psycopg's own
copy helpers have no timeouts). Replication commands go through the simple query
protocol, which psycopg uses when a query has no parameters, so identifiers and literals
are composed with ``psycopg.sql``. This is the only module that touches ``conn.pgconn``.

Reading in bulk: the walsender sends every change as its own CopyData message and a
reader that wakes up for each one pays a wake-up, a ``select`` and a loop iteration per
few messages - and so does the walsender, which must wake it. While the stream flows, the
caller waits with ``bulk=True``: the socket's receive low-water mark (``SO_RCVLOWAT``)
is raised to ``BULK_LOW_WATER`` bytes, so the kernel reports it readable, and wakes the
loop, only once that much has arrived or the caller's (short) timeout has passed. A
non-blocking read still returns whatever is there. On a socket or platform that ignores
the mark, the wait simply returns as before.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Final

import psycopg
from psycopg import pq, sql

from capture.errors import (
    ReplicationConnectionLostError,
    map_psycopg_errors,
    replication_stream_ended,
)
from capture.snapshot import ExportedSnapshot
from decoder import format_lsn, parse_lsn

BULK_LOW_WATER: Final = 64 * 1024
"""Bytes that make the socket readable during a ``bulk`` wait: about 600 changes of 100
bytes, two milliseconds of a backlog's stream here, and far below the socket's buffer."""


class ReplicationStream:
    """One replication connection and, once started, its COPY BOTH stream."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        self._conn = conn
        self._pgconn = conn.pgconn
        self._started = False
        self._low_water = 1
        self._low_water_settable = True
        self._abandoned = False

    @classmethod
    def open(cls, conninfo: str, *, connect_timeout: float) -> ReplicationStream:
        """Open a ``replication=database`` connection."""
        with map_psycopg_errors("opening the replication connection"):
            conn = psycopg.connect(
                conninfo,
                replication="database",
                autocommit=True,
                connect_timeout=max(1, round(connect_timeout)),
                application_name="wal2delta",
            )
        return cls(conn)

    def identify_system(self) -> tuple[str, int, str]:
        """Return (system id, timeline, current xlogpos text) from IDENTIFY_SYSTEM."""
        with map_psycopg_errors("IDENTIFY_SYSTEM"):
            row = self._conn.execute("IDENTIFY_SYSTEM").fetchone()
        assert row is not None
        return str(row[0]), int(str(row[1])), str(row[2])

    def timeline_history(self, timeline: int) -> str:
        """The history file of ``timeline`` (``TIMELINE_HISTORY``): a line per ancestor
        timeline with the LSN where it ended (``capture.timeline``)."""
        with map_psycopg_errors("TIMELINE_HISTORY"):
            row = self._conn.execute(f"TIMELINE_HISTORY {int(timeline)}").fetchone()
        assert row is not None
        content = row[1]
        if isinstance(content, bytes | bytearray | memoryview):
            return bytes(content).decode("utf-8", errors="replace")
        return str(content)

    def create_slot_with_snapshot(
        self,
        slot: str,
        *,
        two_phase: bool,
        server_version_num: int,
        temporary: bool = False,
        failover: bool = False,
    ) -> ExportedSnapshot:
        """CREATE_REPLICATION_SLOT with an exported snapshot; keep the connection idle after.

        The snapshot stays valid until this connection runs its next command, so copy the
        tables before calling ``start``. A ``temporary`` slot (an online table copy's, as
        tablesync.c makes) is dropped by the server when this connection ends. A
        ``failover`` slot (PostgreSQL 17+, ``capture.slots.want_failover``) is kept by
        standbys that synchronize slots; a temporary one cannot be.
        """
        if failover and temporary:
            raise ValueError("a temporary replication slot cannot be a failover slot")
        kind = sql.SQL("TEMPORARY LOGICAL") if temporary else sql.SQL("LOGICAL")
        if server_version_num >= 150000:
            options = [sql.SQL("SNAPSHOT 'export'")]
            if two_phase:
                options.append(sql.SQL("TWO_PHASE true"))
            if failover:
                options.append(sql.SQL("FAILOVER true"))
            query = sql.SQL("CREATE_REPLICATION_SLOT {} {} pgoutput ({})").format(
                sql.Identifier(slot), kind, sql.SQL(", ").join(options)
            )
        else:
            query = sql.SQL("CREATE_REPLICATION_SLOT {} {} pgoutput EXPORT_SNAPSHOT").format(
                sql.Identifier(slot), kind
            )
        with map_psycopg_errors(f"creating replication slot {slot!r}"):
            row = self._conn.execute(query).fetchone()
        assert row is not None
        return ExportedSnapshot(
            slot=str(row[0]), consistent_point=parse_lsn(str(row[1])), snapshot_name=str(row[2])
        )

    def alter_slot_failover(self, slot: str, *, failover: bool) -> None:
        """Make ``slot`` a failover slot or not: ``ALTER_REPLICATION_SLOT`` (PostgreSQL 17+).

        The server waits while another process streams from the slot.
        """
        query = sql.SQL("ALTER_REPLICATION_SLOT {} (FAILOVER {})").format(
            sql.Identifier(slot), sql.SQL("true" if failover else "false")
        )
        with map_psycopg_errors(f"changing the failover flag of replication slot {slot!r}"):
            self._conn.execute(query)

    def start(self, slot: str, start_lsn: int, options: Mapping[str, str]) -> None:
        """Send START_REPLICATION for ``slot`` with pgoutput ``options``."""
        option_list = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(name), sql.Literal(value))
            for name, value in options.items()
        )
        query = sql.SQL("START_REPLICATION SLOT {} LOGICAL {} ({})").format(
            sql.Identifier(slot), sql.SQL(format_lsn(start_lsn)), option_list
        )
        with map_psycopg_errors(f"starting replication from slot {slot!r}"):
            self._conn.execute(query)
        self._started = True

    def read_frames(self, limit: int = 10_000) -> list[bytes]:
        """Return the CopyData payloads available now without blocking (maybe none).

        Raises:
            ReplicationConnectionLostError: the server ended the stream or the link broke.
            SlotUndecodableError: the server cannot decode the slot's WAL (it ends the
                stream the same way on every attempt).
        """
        frames: list[bytes] = []
        pgconn = self._pgconn
        try:
            pgconn.consume_input()
            while len(frames) < limit:
                size, data = pgconn.get_copy_data(1)
                if size == 0:
                    break
                if size < 0:
                    raise replication_stream_ended(self._end_of_copy_message())
                frames.append(bytes(data))
        except psycopg.OperationalError as exc:
            raise ReplicationConnectionLostError("replication stream broke") from exc
        return frames

    def _end_of_copy_message(self) -> str | None:
        """The server's primary message for ending the stream (None: it gave none)."""
        result = self._pgconn.get_result()
        if result is None:
            return None
        primary = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY)
        if primary:
            return primary.decode(errors="replace")
        return result.error_message.decode(errors="replace").strip() or None

    def send(self, payload: bytes, *, timeout: float | None = None) -> None:
        """Send one CopyData message and flush it, within ``timeout`` seconds (None: for as
        long as it takes; a peer that stopped reading would hold it for ever).

        Raises:
            ReplicationConnectionLostError: the link broke, or the socket took nothing
                for ``timeout`` seconds.
        """
        pgconn = self._pgconn
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while pgconn.put_copy_data(payload) == 0:
                self._wait_writable(deadline)
            while pgconn.flush() == 1:
                self._wait_writable(deadline)
        except psycopg.OperationalError as exc:
            raise ReplicationConnectionLostError("could not send to the server") from exc

    def _wait_writable(self, deadline: float | None) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise ReplicationConnectionLostError(
                "could not send to the server: its connection took nothing in time"
            )
        select.select([], [self._pgconn.socket], [], 1.0)

    def wait_readable(
        self, timeout: float, also: Sequence[int] = (), *, bulk: bool = False
    ) -> bool:
        """Block until the socket (or a descriptor in ``also``) is readable, or ``timeout``
        seconds pass; True when something is readable.

        With ``bulk`` the socket is readable only once ``BULK_LOW_WATER`` bytes wait in it
        (module docstring); the caller bounds the wait with ``timeout``.
        """
        if timeout <= 0:
            return False
        self._set_low_water(BULK_LOW_WATER if bulk else 1)
        readable, _, _ = select.select([self._pgconn.socket, *also], [], [], timeout)
        return bool(readable)

    @property
    def backend_pid(self) -> int:
        """The walsender serving this connection (``ReceiveTimeoutError.walsender_pid``)."""
        return self._conn.info.backend_pid

    def pending_input(self) -> bool:
        """Whether the server sent something not read yet (the socket is readable now);
        tells a quiet server from a loop that was busy and did not read."""
        self._set_low_water(1)  # a keepalive counts, however small
        readable, _, _ = select.select([self._pgconn.socket], [], [], 0)
        return bool(readable)

    def abandon(self) -> None:
        """The server stopped answering: ``close`` will not wait for its CopyDone."""
        self._abandoned = True

    def _set_low_water(self, size: int) -> None:
        """Set the socket's ``SO_RCVLOWAT`` (only when it changes: a system call)."""
        if size == self._low_water or not self._low_water_settable:
            return
        # A socket object over a duplicate: closing it leaves libpq's descriptor open, and
        # the option belongs to the socket both descriptors share.
        duplicate = os.dup(self._pgconn.socket)
        try:
            sock = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)  # not a socket: the duplicate is still ours to close
            self._low_water_settable = False
            return
        with sock:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)
            except OSError:
                # A socket that does not take the option: wait as before.
                self._low_water_settable = False
                return
        self._low_water = size

    def close(self, timeout: float = 10.0) -> None:
        """End COPY BOTH cleanly, then close the connection.

        The server processes everything we sent before our CopyDone - in particular the
        final status update - before it answers with its own CopyDone, so waiting for that
        answer means the acknowledged position is recorded in the slot when we return.
        """
        if self._started and not self._abandoned and not self._conn.closed:
            with contextlib.suppress(psycopg.Error, ReplicationConnectionLostError):
                self._set_low_water(1)  # the server's CopyDone is a few bytes
                self._pgconn.put_copy_end()
                self._pgconn.flush()
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    self._pgconn.consume_input()
                    size, _ = self._pgconn.get_copy_data(1)
                    if size < 0:
                        break
                    if size == 0:
                        select.select([self._pgconn.socket], [], [], 0.1)
        self._conn.close()
