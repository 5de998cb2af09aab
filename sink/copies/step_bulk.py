"""The bulk append step of the initial snapshot: copied rows appended, no MERGE.

``BulkLoader.begin_bulk`` prepares a table exactly as the MERGE path's first batch would and
hands out a ``bulk.BulkTarget``; this executor appends batches of copied rows to it
(``bulk.bulk_table`` turns the COPY's text forms into the Delta columns). delta-rs writes
them where it can (``deltars.py``: blind appends that never conflict); otherwise the
engine appends through the lake port, one append per table at a time. Values stored under
a convention are merged into the rejects table first (``rejects.py``), so a copy that is
repeated after a failure writes no reject twice.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import structlog

from sink.copies.bulk import BulkTarget, bulk_table
from sink.engine.deadline import engine_call
from sink.engine.spark import engine_errors
from sink.lake.deltars import DeltaRsAppender
from sink.lake.tables import LakeTables
from sink.records.rejects import RejectsLog, TableReject

log = structlog.get_logger("wal2delta.sink")


class BulkAppendExecutor:
    """Appends copied rows to prepared tables; safe to call from several threads."""

    def __init__(self, lake: LakeTables, rejects: RejectsLog, appender: DeltaRsAppender) -> None:
        self._lake = lake
        self._rejects = rejects
        self._appender = appender
        self._rejects_lock = threading.Lock()
        self._engine_appends: dict[str, threading.Lock] = {}
        self._engine_appends_guard = threading.Lock()

    def append(
        self, target: BulkTarget, strings: pa.RecordBatch | pa.Table, first_ordinal: int
    ) -> int:
        """Append copied rows (text forms, COPY order) to a table ``begin_bulk`` prepared.

        Written by delta-rs where it can (``deltars.py``), else by the engine. Safe to call
        from several threads at once, also for one table: delta-rs commits blind appends
        that never conflict (it retries the commit at the next version), and appends the
        engine writes are serialised per table here. Returns the rows appended.

        Raises:
            SinkDataError: a value cannot be stored in its Delta type.
            SinkRetryableError, SinkError: as ``apply``.
        """
        bulk = bulk_table(target, strings, first_ordinal)
        arrow = bulk.table
        rows: int = arrow.num_rows
        if not rows:
            return 0
        if bulk.rejects:
            # Before the rows: a copy that fails after this repeats it, and the merge skips
            # what is there; appends from other threads wait for the one merge at a time.
            with self._rejects_lock:
                self._rejects.merge([TableReject(target.table, r) for r in bulk.rejects])
            log.warning(
                "copied values stored under their convention",
                table=target.table,
                value_count=len(bulk.rejects),
                reasons=sorted({r.reason.value for r in bulk.rejects}),
            )
        action = f"appending the snapshot of {target.table}"
        partitions = [target.bucket[0]] if target.bucket is not None else []
        with engine_call(action):
            if self._appender.append(target.path, arrow, partitions, action):
                return rows
        with self._engine_append_lock(target.path), engine_errors(action):
            self._lake.append(target.path, arrow, target.frame, partitions=partitions)
        return rows

    def _engine_append_lock(self, path: str) -> threading.Lock:
        """The lock that serialises the engine's appends to the table at ``path``."""
        with self._engine_appends_guard:
            return self._engine_appends.setdefault(path, threading.Lock())
