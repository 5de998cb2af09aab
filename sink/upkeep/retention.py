"""Retention: each table's old files vacuumed on a schedule, every version a cut names kept.

Theory of operation
-------------------
Every MERGE, compaction and deletion-vector purge leaves the files it replaced in storage:
older versions still read them (time travel, ``wal2delta cut``). With ``sink.retention``
set to R, the daemon deletes the files no version it promises needs any more, as Delta's
own VACUUM does:

* a file is deleted only when the log (``deltalog.py``) holds a ``remove`` of it older
  than R and nothing still reads it: it is not live, no ``remove`` of it younger than R
  exists, and no kept version (below) reads it. So every version that was current at
  some moment of the last R stays readable, and time travel to any point of the last R
  works. Files the log never named (a write that failed before its commit) are left;
* deletion-vector files are treated alike, by the same rules: delta-rs's vacuum cannot be
  used for them (``deltalog.py``). A vector removed at version r is kept for any kept
  version before r;
* the versions ``wal2delta cut`` can still name are kept whatever their age: from the
  commit log (``commits.retained_versions``), at most two a table - its newest version
  recorded before ``now - R`` and the one the oldest boundary a cut may take names. Cut
  refuses older boundaries (``commits.oldest_retained_boundary``). Together: a cut that
  ``wal2delta cut`` answers always reads
  (docs/decisions/0106-deletion-vectors-per-table-and-a-retention.md).
  That relies on the commit log's record of a batch being appended within R of the
  batch (it rides with the next batch's intent, or is flushed when the sink goes idle).

Data files are listed as delta-rs lists them, too (the newest version's and every kept
version's ``file_uris``), and a file is only deleted inside the table's directory.

Each table the sink writes is vacuumed when this process first writes it and then every
``max(R / 4, 1 hour)`` (``vacuum_interval``), from the sink worker between batches
(``Compactor.compact_due``, within its time budget: tables due at once - every table of a
lake after a start - are spread over the next batches), so a vacuum never races the
engine's writes to the table.
A vacuum that fails only logs a warning and is tried at the next interval. No commit is
written: the log is left as it is (delta-rs's own vacuum would add two commits).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from sink.engine.deadline import engine_call
from sink.engine.spark import engine_message
from sink.lake.deltalog import read_table_files, table_filesystem
from sink.lake.deltars import file_uris
from sink.records.commits import read_commit_records, retained_versions
from sink.upkeep.turns import TableTurns, run_turn

log = structlog.get_logger("wal2delta.sink")

HOUR = 3600.0


def vacuum_interval(retention: float) -> float:
    """Seconds between two vacuums of a table: a quarter of the retention, at most hourly."""
    return max(retention / 4, HOUR)


@dataclass(frozen=True, slots=True)
class Vacuumed:
    """What one vacuum deleted: data files and deletion-vector files, by their paths
    relative to the table."""

    data_files: tuple[str, ...]
    vector_files: tuple[str, ...]


def vacuum_table(path: str, *, cutoff: datetime, keep_versions: Iterable[int] = ()) -> Vacuumed:
    """Delete the files of the table at ``path`` no version since ``cutoff`` reads, and no
    version in ``keep_versions`` (the module docstring).

    Raises:
        deltalog.LogUnreadableError: the log cannot be replayed; nothing was deleted.
        OSError: a file could not be deleted (those before it are gone).
        Exception: delta-rs could not read the table.
    """
    files = read_table_files(path)
    kept = sorted(set(keep_versions))
    cutoff_ms = int(cutoff.timestamp() * 1000)
    needed_paths = files.live_paths | _relative(path, file_uris(path))
    for version in kept:
        try:
            uris = file_uris(path, version)
        except Exception:
            continue  # a version whose log is gone reads nothing anyway
        needed_paths |= _relative(path, uris)
    needed_vectors = set(files.live_vectors)
    expired_paths: set[str] = set()
    expired_vectors: set[str] = set()
    for tombstone in files.tombstones.values():
        fresh = tombstone.removed_at >= cutoff_ms
        (needed_paths if fresh else expired_paths).add(tombstone.path)
        if tombstone.vector is None:
            continue
        if fresh or any(version < tombstone.version for version in kept):
            needed_vectors.add(tombstone.vector)
        else:
            expired_vectors.add(tombstone.vector)
    doomed_paths = sorted(p for p in expired_paths - needed_paths if _inside(p))
    doomed_vectors = sorted(v for v in expired_vectors - needed_vectors if _inside(v))
    fs, root = table_filesystem(path)
    for relative in [*doomed_paths, *doomed_vectors]:
        try:
            fs.delete_file(f"{root.rstrip('/')}/{relative}")
        except FileNotFoundError:
            continue  # deleted before (a vacuum interrupted after it)
    return Vacuumed(tuple(doomed_paths), tuple(doomed_vectors))


def _relative(path: str, uris: Iterable[str]) -> set[str]:
    """delta-rs's file URIs as paths relative to the table (absolute ones kept)."""
    found = set()
    roots = [f"{path.rstrip('/')}/", f"file://{path.rstrip('/')}/"]
    for uri in uris:
        root = next((r for r in roots if uri.startswith(r)), "")
        found.add(uri[len(root) :])
    return found


def _inside(relative: str) -> bool:
    """Whether a path the log names lies inside the table's directory."""
    return "://" not in relative and not relative.startswith("/") and ".." not in relative


class Retention:
    """Vacuums each Delta table the sink writes, on schedule (the module docstring)."""

    def __init__(
        self,
        retention: float,
        root: str,
        *,
        every: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``retention``: seconds of versions kept; ``root``: the lake, whose commit log
        names the versions cuts may take; ``every``: seconds between two vacuums of a
        table (default ``vacuum_interval(retention)``)."""
        self._retention = retention
        self._root = root
        self._turns = TableTurns(vacuum_interval(retention) if every is None else every, clock)

    def wrote(self, paths: Iterable[str]) -> None:
        """Note writes to ``paths``: a table first written in this process is due now."""
        self._turns.wrote(paths)

    def vacuum_due(self, deadline: float | None = None) -> bool:
        """Vacuum the tables that are due (failures only warn); return whether some wait.

        ``deadline`` (a ``time.monotonic`` reading): once it has passed, the tables not yet
        vacuumed wait for the next call; one is vacuumed whatever the deadline, so every
        call makes progress (``Compactor.compact_due``).
        """
        now = self._turns.clock()
        due = self._turns.due(now)
        if not due:
            return False
        cutoff = datetime.fromtimestamp(now - self._retention, UTC)
        try:
            with engine_call("reading the commit log for a vacuum"):
                kept = retained_versions(read_commit_records(self._root), cutoff)
        except FileNotFoundError:
            kept = {}  # no commit log: no cut to keep
        except Exception as exc:
            self._turns.postpone(due, now)
            log.warning(
                "reading the commit log for a vacuum failed; the vacuum waits for its next turn",
                error=f"{type(exc).__name__}: {engine_message(exc)}",
            )
            return False
        return self._turns.take(
            due, now, deadline, lambda path: self._vacuum(path, cutoff, kept.get(path, set()))
        )

    def clear(self) -> None:
        """Forget the schedule (a new process vacuums each table when it first writes it)."""
        self._turns.clear()

    @staticmethod
    def _vacuum(path: str, cutoff: datetime, keep: set[int]) -> None:
        def vacuum() -> dict[str, object]:
            vacuumed = vacuum_table(path, cutoff=cutoff, keep_versions=keep)
            return {
                "data_files_removed": len(vacuumed.data_files),
                "vector_files_removed": len(vacuumed.vector_files),
                "versions_kept_for_cuts": sorted(keep),
            }

        run_turn(path, "vacuuming a Delta table", vacuum, done="vacuumed a Delta table")
