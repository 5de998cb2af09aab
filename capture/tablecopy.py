"""Copy tables while the stream runs: tables that join the publications, ``wal2delta
resync`` requests, every table of a replaced slot.

Theory of operation (PostgreSQL's table sync, ``tablesync.c``, on our spooled design)
-------------------------------------------------------------------------------------
One thread, ``OnlineCopier``, next to the replication session. It looks for work every
second and whenever woken:

1. Requests are recorded by the sink (``OnlineCopySink.copy_requests``, kept in
   ``<path>/_wal2delta_copies``): a ``wal2delta resync`` message read in commit order, a
   table found by ``look_for_new_tables`` (every ``snapshot.new_tables_interval`` with
   ``snapshot.mode: initial``: a published table with neither a Delta table nor a copy
   record), a replaced slot's tables, or a copy interrupted by a crash.
2. ``start_copies``: from now on the sink drops the tables' changes, holding the
   acknowledgement at the first one dropped.
3. A temporary slot is created on a replication connection of its own with an exported
   snapshot (``CREATE_REPLICATION_SLOT ... TEMPORARY LOGICAL pgoutput (SNAPSHOT
   'export')``); its consistent point S splits the tables' history: transactions committed
   before S are in the snapshot, the rest are not.
4. ``SnapshotCopier`` copies the tables in that snapshot - in parallel ranges, with the
   publications' row filters and column lists, through the initial snapshot's bulk path -
   into staging tables (``begin_copy``), and each replaces its table in one commit
   (``finish_copy``). The temporary slot goes with its connection.
5. The session sees ``copy_rewind_due`` and restarts from the acknowledged position
   (``StreamRewindError``): the dropped changes come again; those committed before S are
   skipped, the rest applied.

Progress (rows, rows/s, ETA) goes to the log and the ``wal2delta_snapshot_*`` metrics as
for the initial snapshot; ``wal2delta status`` lists the copies from the lake. A copy that
fails is logged and counted (``wal2delta_errors_total{component="copy"}``), its table's
changes are applied again (after a rewind), and it is tried again after
``RETRY_SECONDS``. A crash at any point leaves either the old table or the copy, never a
mix: the record says ``copying`` and the copy starts over.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Final

import psycopg
import structlog

from capture.errors import CaptureError
from capture.metrics import Metrics
from capture.settings import CaptureSettings
from capture.slots import read_published_tables
from capture.snapshot import SnapshotCopier
from capture.stream import ReplicationStream
from decoder import cause_line, format_lsn
from sink import Batch, OnlineCopySink

log = structlog.get_logger("wal2delta.copy")

RETRY_SECONDS: Final = 30.0
"""Wait before a failed copy is tried again."""
LOOK_SECONDS: Final = 0.25
"""How often the thread looks for requests when nothing wakes it (a request arrives as a
message the sink records in a batch; the look is a read of the sink's memory, and it is up
to this long of a copy's time: 0.5 s on average at 1 s, 7% of ``bench resync``'s copy)."""

_copy_numbers = itertools.count(1)


class OnlineCopier:
    """Copies the tables the sink has requests for, one group at a time, on its own thread."""

    def __init__(
        self,
        settings: CaptureSettings,
        sink: OnlineCopySink,
        metrics: Metrics,
        *,
        server_version: int,
        watch_new_tables: bool,
    ) -> None:
        self._settings = settings
        self._sink = sink
        self._metrics = metrics
        self._server_version = server_version
        self._watch = watch_new_tables
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._next_look = 0.0
        self._retry_at = 0.0
        self._known: set[str] = set()
        """Published tables found known before: not looked at again (``look_for_new_tables``)."""
        self._thread = threading.Thread(target=self._run, name="wal2delta-copy", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> bool:
        """Ask the thread to end; a copy under way is abandoned (it starts over next time).

        Returns:
            Whether the thread ended within ``timeout`` seconds.
        """
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def wake(self) -> None:
        """Look for requests now."""
        self._wake.set()

    def settle(self, timeout: float) -> bool:
        """Look for new tables now, then wait until no copy is requested or running.

        Returns:
            Whether every copy finished within ``timeout`` seconds.
        """
        if self._watch:
            self._next_look = 0.0
        deadline = time.monotonic() + timeout
        self._wake.set()
        time.sleep(0.05)
        with self._idle:
            while (
                self._busy or self._sink.copy_requests() or (self._watch and self._next_look == 0.0)
            ):
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._wake.set()
                self._idle.wait(min(left, LOOK_SECONDS))
            return True

    # --- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            now = time.monotonic()
            with self._idle:
                self._busy = True
            try:
                if self._watch and now >= self._next_look:
                    self.look_for_new_tables()
                    self._next_look = now + self._settings.new_tables_interval
                requests = self._sink.copy_requests()
                if requests and now >= self._retry_at:
                    self._copy(requests)
            except Exception as exc:  # logged and counted; tried again later
                self._retry_at = time.monotonic() + RETRY_SECONDS
                self._metrics.record_error("copy", exc, time.time())
                log.error(
                    "copying tables while streaming failed; it is tried again",
                    error=cause_line(exc),
                    error_type=type(exc).__name__,
                    retry_seconds=RETRY_SECONDS,
                )
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()
                self._metrics.tables_copying.set(len(self._sink.tables_copying()))
            self._wake.wait(LOOK_SECONDS)
            self._wake.clear()

    def look_for_new_tables(self) -> list[str]:
        """Request a copy of every published table with neither a Delta table nor a copy
        record (joined the publications since it was last looked at); return them."""
        settings = self._settings
        with psycopg.connect(settings.conninfo, application_name="wal2delta-copy") as conn:
            published = read_published_tables(conn, settings.publications)
        new = []
        for table in published:
            name = f"{table.schema}.{table.name}"
            if name in self._known:
                continue
            if self._sink.knows_table(table.schema, table.name):
                self._known.add(name)
            else:
                new.append(name)
        if new:
            log.info("tables joined the publications; copying them", tables=new)
            self._sink.request_copies(new, "new table")
        return new

    def _copy(self, requests: list[tuple[str, str]]) -> None:
        """Copy the requested tables in one temporary slot's snapshot."""
        tables = [table for table, _ in requests]
        reasons = dict(requests)
        for reason in sorted(set(reasons.values())):
            self._sink.start_copies([t for t in tables if reasons[t] == reason], reason)
        self._metrics.tables_copying.set(len(self._sink.tables_copying()))
        settings = self._settings
        started = time.monotonic()
        slot = f"{settings.slot}_copy_{os.getpid()}_{next(_copy_numbers)}"[:63]
        stream = ReplicationStream.open(settings.conninfo, connect_timeout=settings.connect_timeout)
        finished: set[str] = set()
        try:
            exported = stream.create_slot_with_snapshot(
                slot,
                two_phase=False,
                server_version_num=self._server_version,
                temporary=True,
            )
            point = exported.consistent_point
            log.info(
                "copying tables while streaming",
                tables=tables,
                consistent_point=format_lsn(point),
            )
            copier = SnapshotCopier(
                settings.conninfo,
                settings.publications,
                apply=_no_merge_path,
                metrics=self._metrics,
                chunk_rows=settings.batch.max_rows,
                bulk=self._sink,
                tuning=settings.snapshot,
                begin=self._sink.begin_copy,
                record=False,
            )
            copier.run(exported, only=set(tables))
            for relation, target in copier.copied:
                name = relation.qualified_name
                self._sink.finish_copy(relation, target, point, reasons[name])
                finished.add(name)
            for table in tables:
                if table not in finished:
                    # Not published (any more) in the snapshot: nothing to copy, and no
                    # change of it will come.
                    self._sink.finish_empty_copy(table, point, reasons[table])
                    finished.add(table)
        except BaseException:
            for table in tables:
                if table not in finished:
                    self._sink.abandon_copy(table, reasons[table])
            raise
        finally:
            stream.close()
        log.info(
            "tables copied while streaming",
            tables=tables,
            consistent_point=format_lsn(point),
            duration_seconds=round(time.monotonic() - started, 3),
        )


def _no_merge_path(batch: Batch) -> object:
    """``begin_copy`` never declines a table, so the MERGE path is never taken."""
    raise CaptureError("an online table copy does not copy through MERGE")
