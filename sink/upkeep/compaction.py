"""Table upkeep between batches: small-file compaction, deletion-vector purges, retention,
log trimming.

Theory of operation
-------------------
Every MERGE adds at least one Parquet file (the rows it inserted or rewrote), every history
append and commit-log record another. Nothing removes them, and Sail's MERGE opens every
file of the table (it prunes partitions, not files by statistics): on a steady 5k
changes/s stream the MERGE of a 100k-row table went from 0.1 s to 0.4 s in 30 seconds, and
it keeps growing with the daemon's uptime (``python -m bench lag``).

So after every ``after_writes`` commits to a table (counted in memory, starting from the
commits after the newest compaction in the table's log when a process first writes it -
read by the upkeep after that batch, not on the batch's way to its acknowledgement:
``docs/decisions/0132-a-new-table-is-counted-for-compaction-by-the-upkeep.md``),
the sink compacts it with delta-rs (``DeltaTable.optimize.compact``): files smaller than
the target size are rewritten into few large ones in a commit with ``dataChange: false``.
Only the partitions (the whole table, when it has none) that hold ``MIN_SMALL_FILES`` small
files are compacted: those the batches write, not the ones left with a file or two by the
copy that filled the table, whose rewrite would only delay the next batch.
Readers see the same rows at every version; time travel to older versions still works
until the files are vacuumed.

A table written with deletion vectors (``layout.py``) keeps the rows its MERGEs replaced
in its files, marked deleted: reads and MERGEs still scan them. delta-rs's compaction
applies the vectors of the files it rewrites, but leaves alone a file at or above the
target size and a file alone in its bin (measured with deltalake 1.6.6), so the vectors of
a large table would pile up. At each compaction due, such a table's log is read
(``deltalog.py``): when ``PURGE_AT`` or more of the rows its files hold are marked deleted,
the table is *purged* instead - rewritten through the engine from its live rows in one
commit (``LakeTables.overwrite``, ``sql.render_live_rows``; Sail has no ``REORG TABLE ...
APPLY (PURGE)``), which leaves no deletion vector and keeps its layout and properties.
The rewrite is a ``WRITE`` commit with ``dataChange: true`` (readers of the change feed see
every row rewritten); it was preferred to delta-rs's Z-order, the other full rewrite,
which took 12 s for 3M rows against the engine's 2 s, and grew the daemon by 300 MB.

``wrote`` only counts in memory and notes the tables that are due (a table new to the
process is counted from its log by the next ``compact_due``); ``compact_due`` compacts or
purges them, then vacuums the tables whose retention turn has come (``retention.py``, with
``sink.retention``; without it the daemon never deletes a data file) and trims the logs
whose turn has come (``logtrim.py``, ``sink.log_retention``). After a batch it works
for at most ``UPKEEP_BUDGET_SECONDS`` and leaves the rest for the next batch or the next
idle moment: tables written together come due together (200 tables written by every batch
are due in the same batch every ``after_writes`` batches, and every table of a lake is due
for its first vacuum after a start), and done in one go their upkeep would delay the next
batch - and the lag of every table - by seconds to minutes.
The sink worker calls it (through ``DeltaSink.after_apply``) after it has reported the batch
durable, so upkeep never delays the batch that made it due, and never races the engine's
MERGE on the same table (the worker applies one batch at a time) nor an online copy that
replaces the table (``DeltaSink`` takes turns with the copier's thread). A failed compaction,
purge or vacuum only logs a warning (the batch is already durable); a compaction or purge
is tried again after the next ``after_writes`` writes, a vacuum at its next turn.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Final

import structlog

from sink.engine.deadline import engine_call
from sink.engine.spark import engine_errors, engine_message
from sink.engine.sql import delta_table, render_live_rows
from sink.lake import deltars
from sink.lake.deltalog import LogUnreadableError, read_table_files
from sink.lake.layout import warn_if_without_deletion_vectors
from sink.lake.tables import LakeTables
from sink.settings import SinkSettings
from sink.upkeep.logtrim import LogTrim, log_horizon, tombstone_horizon
from sink.upkeep.retention import Retention

log = structlog.get_logger("wal2delta.sink")


UPKEEP_BUDGET_SECONDS: Final = 1.0
"""How long the upkeep after a batch, or in one idle moment, may start new work (the
module docstring): the most it delays the next batch, unless one compaction, purge or
vacuum takes longer by itself."""

PURGE_AT: Final = 0.01
"""The share of a deletion-vector table's stored rows marked deleted at which a compaction
due purges the table instead. Low: a reader pays for deletion vectors however few rows they
delete (1.2-1.8x a full read of a 3M-row table, from 0.2% to 10% deleted; measured with Sail
and delta-rs), so the purge keeps them from piling up on top of that, at the price of one
rewrite per compaction for a table changed at random keys (docs/performance.md)."""


MIN_SMALL_FILES: Final = 8
"""A partition (the whole table when it has none) is compacted once it holds this many
files below the target size, or ``after_writes`` when that is fewer (at least two). A
partition the batches no longer write, with a few files already, is left alone: delta-rs
would rewrite every partition holding two small files, and the first compaction of a table
just copied in parallel rewrote all of it (0.9M of 1M rows, 1.2-2.6 s in front of the next
batch; docs/performance-log.md, issue 40)."""

DEFAULT_TARGET_FILE_SIZE: Final = 104_857_600
"""delta-rs's target file size when the table sets no ``delta.targetFileSize``: files
smaller than it are the ones a compaction rewrites."""


class Compactor:
    """Counts writes per Delta table and compacts each one every ``after_writes`` writes;
    purges the deletion vectors of tables that have many, and runs retention."""

    def __init__(
        self,
        after_writes: int,
        *,
        lake: LakeTables | None = None,
        retention: Retention | None = None,
        log_trim: LogTrim | None = None,
        settings: SinkSettings | None = None,
    ) -> None:
        """``lake``: the engine that purges deletion vectors (None: never purged);
        ``retention``: the vacuum schedule (None: nothing is ever deleted); ``log_trim``:
        the log-trimming schedule (None: logs keep every version); ``settings``: to warn
        once per table when its layout is not the configured one."""
        self._after_writes = after_writes
        self._min_files = max(2, min(MIN_SMALL_FILES, after_writes))
        """Small files a partition must hold to be compacted (``_crowded_partitions``)."""
        self._lake = lake
        self._retention = retention
        self._log_trim = log_trim
        self._settings = settings
        self._writes: dict[str, int] = {}
        """Writes since the newest compaction, per table this process has counted."""
        self._unread: dict[str, None] = {}
        """Tables written in this process whose log ``compact_due`` has yet to count from."""
        self._due: dict[str, None] = {}
        """Tables to compact at the next ``compact_due``, in the order they became due."""

    @classmethod
    def for_settings(cls, settings: SinkSettings, lake: LakeTables) -> Compactor:
        """The compactor ``DeltaSink`` runs: the configuration's, over the sink's lake port."""
        retention = (
            None if settings.retention is None else Retention(settings.retention, settings.path)
        )
        horizon = log_horizon(settings.log_retention, settings.retention)
        return cls(
            settings.compact_after_writes,
            lake=lake,
            retention=retention,
            log_trim=None
            if horizon is None
            else LogTrim(
                horizon, tombstones=tombstone_horizon(settings.log_retention, settings.retention)
            ),
            settings=settings,
        )

    @property
    def log_trim(self) -> LogTrim | None:
        """The log-trimming schedule (None: logs keep every version)."""
        return self._log_trim

    def wrote(self, paths: Iterable[str]) -> None:
        """Count one write to each of ``paths``; note those that are due.

        A table this process had not written yet is only noted: its count starts from its
        own log, read by the next ``compact_due`` (after the batch is reported durable),
        not here, on the way to the batch's acknowledgement.
        """
        paths = list(paths)
        if self._retention is not None:
            self._retention.wrote(paths)
        if self._log_trim is not None:
            self._log_trim.wrote(paths)
        for path in paths:
            count = self._writes.get(path)
            if count is None:
                self._unread[path] = None  # its log, read later, holds this write too
                continue
            if self._after_writes <= 0:
                continue
            if count + 1 < self._after_writes:
                self._writes[path] = count + 1
                continue
            self._writes[path] = 0
            self._due[path] = None

    def compact_due(self, budget_seconds: float | None = None) -> bool:
        """Count the tables first written since the last call from their logs, compact or
        purge the tables that are due, then vacuum and trim the logs of those whose turn
        has come (failures only warn); return whether some upkeep is still due.

        ``budget_seconds``: stop starting new work once this much time has passed; what is
        left waits for the next call. One log read, one compaction, one vacuum and one log
        trim run whatever the budget (when due), so every call makes progress, and one may run past
        it (a purge is one rewrite). None: everything due is done.
        """
        started = time.monotonic()
        deadline = None if budget_seconds is None else started + budget_seconds
        self._read_new_tables(deadline)
        while self._due:
            path = next(iter(self._due))
            del self._due[path]
            self._compact(path)
            if deadline is not None and time.monotonic() >= deadline:
                break
        waiting = bool(self._due or self._unread)
        if self._retention is not None:
            waiting = self._retention.vacuum_due(deadline) or waiting
        if self._log_trim is not None:
            waiting = self._log_trim.trim_due(deadline) or waiting
        return waiting

    def clear(self) -> None:
        """Forget the counts and what is due (a new process or a reset sink starts again)."""
        self._writes.clear()
        self._due.clear()
        self._unread.clear()
        if self._retention is not None:
            self._retention.clear()
        if self._log_trim is not None:
            self._log_trim.clear()

    def _read_new_tables(self, deadline: float | None) -> None:
        """Count the commits since the newest compaction of the tables first written since
        the last call, until ``deadline`` (at least one a call, so every call makes
        progress); warn of a table whose layout is not the configured one."""
        while self._unread:
            path = next(iter(self._unread))
            del self._unread[path]
            if self._settings is not None:
                warn_if_without_deletion_vectors(self._settings, path)
            count = self._commits_since_compaction(path) if self._after_writes > 0 else 0
            if 0 < self._after_writes <= count:
                self._writes[path] = 0
                self._due[path] = None
            else:
                self._writes[path] = count
            if deadline is not None and time.monotonic() >= deadline:
                return

    def _commits_since_compaction(self, path: str) -> int:
        """Commits after the table's newest compaction, read once per process and table.

        A daemon that restarts more often than every ``after_writes`` writes (a crash loop,
        frequent deploys) would otherwise never compact; the table's own log knows.
        """
        try:
            with engine_call(f"reading the history of {path}"):
                history = deltars.history(path, self._after_writes)
        except Exception:  # counted from here on; compaction can wait
            return 1
        for newer, commit in enumerate(history):  # newest first
            if commit.get("operation") == "OPTIMIZE":
                return newer
        return len(history)

    def _compact(self, path: str) -> None:
        started = time.monotonic()
        try:
            with engine_call(f"compacting {path}"):
                layout = deltars.file_layout(path)
                if self._lake is not None and layout.deletion_vectors:
                    deleted = self._deleted_fraction(path)
                    if deleted is not None and deleted >= PURGE_AT:
                        self._purge(path, self._lake, deleted)
                        return
                due = _crowded_partitions(layout, self._min_files)
                if not due:
                    log.debug("no partition of a Delta table to compact", table_path=path)
                    return
                result = deltars.compact(path, _filters(due))
        except Exception as exc:
            log.warning(
                "compacting a Delta table failed; it is tried again later",
                table_path=path,
                error=f"{type(exc).__name__}: {engine_message(exc)}",
            )
            return
        log.debug(
            "compacted a Delta table",
            table_path=path,
            files_removed=result.get("numFilesRemoved"),
            files_added=result.get("numFilesAdded"),
            duration_seconds=round(time.monotonic() - started, 3),
        )

    @staticmethod
    def _deleted_fraction(path: str) -> float | None:
        """The share of the table's stored rows marked deleted; None when its log cannot
        be read (the table is compacted as any other then)."""
        try:
            return read_table_files(path).deleted_fraction()
        except LogUnreadableError as exc:
            log.warning(
                "reading a Delta table's log for its deletion vectors failed; it is compacted",
                table_path=path,
                error=str(exc),
            )
            return None

    @staticmethod
    def _purge(path: str, lake: LakeTables, deleted: float) -> None:
        started = time.monotonic()
        purge_deletion_vectors(lake, path)
        log.info(
            "purged the deletion vectors of a Delta table",
            table_path=path,
            deleted_fraction=round(deleted, 3),
            duration_seconds=round(time.monotonic() - started, 3),
        )


def purge_deletion_vectors(lake: LakeTables, path: str) -> None:
    """Rewrite the table at ``path`` from its live rows in one commit, through the engine:
    no deletion vector is left, its layout and properties stay (the module docstring).

    Raises:
        SinkError: the engine failed (``SinkRetryableError`` when it was unreachable).
    """
    with engine_errors(f"purging the deletion vectors of {path}"):
        lake.overwrite(path, render_live_rows(target=delta_table(path)))


PartitionValues = tuple[tuple[str, object], ...]
"""One partition: (column, value) per partition column; () for a table without any."""


def _crowded_partitions(layout: deltars.FileLayout, min_files: int) -> list[PartitionValues]:
    """The partitions of the table holding at least ``min_files`` files smaller than its
    target size (``MIN_SMALL_FILES``); ``[()]`` for an unpartitioned table that does."""
    columns = layout.partition_columns
    target = layout.target_file_size or DEFAULT_TARGET_FILE_SIZE
    actions = layout.files
    if actions.num_rows == 0:
        return []  # no file at all (truncated): nothing to compact
    sizes = actions.column("size_bytes").to_pylist()
    values = [actions.column(f"partition.{c}").to_pylist() for c in columns]
    counts: dict[PartitionValues, int] = {}
    for row, size in enumerate(sizes):
        if size is not None and size < target:
            key = tuple((c, values[n][row]) for n, c in enumerate(columns))
            counts[key] = counts.get(key, 0) + 1
    return [key for key, count in counts.items() if count >= min_files]


def _filters(partitions: list[PartitionValues]) -> list[tuple[str, str, Any]] | None:
    """delta-rs partition filters selecting exactly ``partitions``; None (the whole table)
    for an unpartitioned table or when a partition value is null (no filter names it)."""
    if partitions == [()] or any(v is None for p in partitions for _, v in p):
        return None
    columns = [c for c, _ in partitions[0]]
    if len(columns) == 1:
        return [(columns[0], "in", sorted({str(p[0][1]) for p in partitions}))]
    # Several partition columns: one conjunction cannot name a set of tuples exactly;
    # the whole table is compacted, as before (the sink partitions by one column).
    return None
