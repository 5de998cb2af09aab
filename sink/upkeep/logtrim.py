"""Log trimming: each table's Delta log holds the versions kept readable, and no more.

Theory of operation
-------------------
Every commit adds two files to a table's ``_delta_log`` (``<v>.json`` and ``<v>.crc``), and
nothing removes them: Sail 0.7.2 writes checkpoints but never deletes expired log files,
and delta-rs only does when asked. Each engine call and each delta-rs load lists that
directory to find the newest checkpoint, and on a local or mounted file system the
listing reads every entry (object stores page through it too): measured on the
benchmark machine, an append cost 19 ms with 74 log entries, 49 ms with 3,256 and 172 ms
with 20,105 (7.5 us an entry). The daemon commits a busy table and its commit log several
times a second, so without trimming every MERGE and every intent gets slower for as long
as the daemon runs: an hour at 5 commits a second is 36,000 entries, a quarter of a second
on every engine call (docs/decisions/0134-the-delta-log-is-trimmed-to-the-versions-kept.md).

So the upkeep deletes, per table, the log files of versions nobody can read any more, as
Delta's own metadata cleanup does after a checkpoint (``delta.logRetentionDuration``):

* the horizon is ``sink.log_retention`` (L), or ``sink.retention`` (R) when that is longer
  - the versions vacuum keeps stay readable (``log_horizon``);
* every version that was current at some moment since ``now - horizon - TRIM_GRACE`` is
  kept: the version current at that cutoff (the newest whose commit file is older) and all
  later ones. The grace covers a cut taken just inside the horizon and read a little
  later, and a batch's record that rides with the next intent;
* the newest ``KEEP_VERSIONS`` versions are kept whatever their age. So the log a call lists
  is bounded by the horizon on the busy tables, while a table committed to once a minute
  keeps more than an hour. And on a quiet source the newest boundary
  ``wal2delta cut`` answers with can be older than the horizon, while the versions it
  names are among each table's newest (a compaction may follow them);
* the log must stay replayable: only files of versions before the newest complete classic
  checkpoint at or before that version go (commits, checksums, checkpoints, in version
  order, so an interrupted trim leaves a readable log). Without such a checkpoint nothing
  is deleted; ``_last_checkpoint`` and files of other names are never touched.

The checkpoints are part of the log too: each carries a tombstone for every file removed
within the table's ``delta.deletedFileRetentionDuration`` (a week by default), so vacuums
can find them. At two removes a commit a busy table's checkpoint (written every ten
commits, read by every engine call) held 1,315 tombstones after two and a half minutes of
``bench lag``: a week would be millions. So once a table's log has outlived the horizon
(the first trim in a process that deletes files), the trim sets that property to
``tombstone_horizon`` (with delta-rs: one metadata commit, only when it differs; tables
that never get old are left as they were): with ``sink.retention``, until the vacuum that
may delete a removed file has surely run; without it, the log's horizon and grace
(nothing of the daemon's reads older ones; a vacuum of your own then needs
``vacuum(full=True)`` or Spark's ``VACUUM``, which list the table's files, as delta-rs's
default vacuum only deletes what tombstones name).

A commit file's age is its modification time in the listing (as Delta's cleanup reads
it): the trim needs one listing a table and no read of the log or the commit log.
``wal2delta cut`` checks that every version it names is still in its table's log
(``deltalog.oldest_readable_version``) and refuses the cut otherwise, naming the table.

Each table the sink writes is trimmed when this process first writes it and then every
``TRIM_INTERVAL`` seconds, from the sink worker between batches (``Compactor.compact_due``,
within its time budget), so a trim never races the engine's commits to the table. A trim
that fails only logs a warning and is tried at the next interval.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Final

import structlog

from sink.lake.deltalog import list_log, log_directory, log_files
from sink.lake.deltars import set_table_properties
from sink.upkeep.retention import HOUR, vacuum_interval
from sink.upkeep.turns import TableTurns, run_turn

log = structlog.get_logger("wal2delta.sink")

TRIM_INTERVAL: Final = 60.0
"""Seconds between two trims of a table: at 5 commits a second, 600 log files grow back."""
TRIM_GRACE: Final = 60.0
"""Seconds kept beyond the horizon (the module docstring)."""
KEEP_VERSIONS: Final = 100
"""A table's newest versions kept whatever their age (the module docstring): about 200 log
files, a few milliseconds on every engine call on a local lake (500 cost 13 ms more)."""
_VERSIONED: Final = re.compile(r"^(\d{20})\.")
TOMBSTONE_RETENTION_PROPERTY: Final = "delta.deletedFileRetentionDuration"


def log_horizon(log_retention: float | None, retention: float | None) -> float | None:
    """Seconds of versions whose log is kept: the longer of ``sink.log_retention`` and
    ``sink.retention``; None (both None) keeps the whole log."""
    kept = [seconds for seconds in (log_retention, retention) if seconds is not None]
    return max(kept) if kept else None


def tombstone_horizon(log_retention: float | None, retention: float | None) -> float | None:
    """Seconds a removed file's tombstone stays in the checkpoints
    (``delta.deletedFileRetentionDuration``): with ``sink.retention`` R, until the vacuum
    that may delete the file has surely run (R, one vacuum interval and an hour); without
    it, the log's horizon and grace (nothing of the daemon's reads older ones); None (both
    None) leaves the tables' own setting."""
    if retention is not None:
        return retention + vacuum_interval(retention) + HOUR
    horizon = log_horizon(log_retention, retention)
    return None if horizon is None else horizon + TRIM_GRACE


def tombstone_property(seconds: float) -> dict[str, str]:
    """The table property keeping tombstones ``seconds`` (an interval Delta and Sail parse)."""
    return {TOMBSTONE_RETENTION_PROPERTY: f"interval {math.ceil(seconds)} seconds"}


def trim_log(path: str, *, cutoff: datetime, keep_versions: int = KEEP_VERSIONS) -> tuple[str, ...]:
    """Delete the log files of the table at ``path`` that neither a version current since
    ``cutoff`` nor one of its newest ``keep_versions`` versions needs (the module
    docstring); return their names, in deletion order.

    Raises:
        OSError: the log could not be listed, or a file could not be deleted (those
            before it are gone; the log stays readable).
    """
    fs, log_dir = log_directory(path)
    listed = list_log(fs, log_dir)
    commits, checkpoints = log_files(info.base_name for info in listed)
    cutoff_ns = int(cutoff.timestamp() * 1_000_000_000)
    committed = {info.base_name: info.mtime_ns for info in listed}
    older = [
        version
        for version, name in commits.items()
        if (mtime := committed.get(name)) is not None and mtime <= cutoff_ns
    ]
    if not older:
        return ()
    keep_from = min(max(older), max(commits) - keep_versions)
    starts = [version for version in checkpoints if version <= keep_from]
    if not starts:
        return ()
    first_kept = max(starts)
    doomed = sorted(
        (int(match[1]), info.base_name)
        for info in listed
        if (match := _VERSIONED.match(info.base_name)) and int(match[1]) < first_kept
    )
    for _, name in doomed:
        try:
            fs.delete_file(f"{log_dir}/{name}")
        except FileNotFoundError:
            continue  # deleted before (a trim interrupted after it)
    return tuple(name for _, name in doomed)


class LogTrim:
    """Trims the log of each Delta table the sink writes, on schedule (the module
    docstring)."""

    def __init__(
        self,
        horizon: float,
        *,
        tombstones: float | None = None,
        every: float = TRIM_INTERVAL,
        keep_versions: int = KEEP_VERSIONS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``horizon``: seconds of versions kept readable (``log_horizon``); ``tombstones``:
        seconds each table keeps removed files' tombstones (``tombstone_horizon``; None
        leaves the tables' setting); ``every``:
        seconds between two trims of a table; ``keep_versions``: newest versions kept
        whatever their age."""
        self._horizon = horizon
        self._tombstones = None if tombstones is None else tombstone_property(tombstones)
        self._keep_versions = keep_versions
        self._settled: set[str] = set()
        """Tables whose tombstone retention this process has set (or found set)."""
        self._turns = TableTurns(every, clock)

    def wrote(self, paths: Iterable[str]) -> None:
        """Note writes to ``paths``: a table first written in this process is due now."""
        self._turns.wrote(paths)

    def trim_due(self, deadline: float | None = None) -> bool:
        """Trim the logs that are due (failures only warn); return whether some wait.

        ``deadline`` (a ``time.monotonic`` reading): once it has passed, the tables not yet
        trimmed wait for the next call; one is trimmed whatever the deadline, so every
        call makes progress.
        """
        now = self._turns.clock()
        cutoff = datetime.fromtimestamp(now - self._horizon - TRIM_GRACE, UTC)
        return self._turns.take(
            self._turns.due(now),
            now,
            deadline,
            self._turn_work(cutoff),
        )

    def _turn_work(self, cutoff: datetime) -> Callable[[str], None]:
        def turn(path: str) -> None:
            trimmed = self._trim(path, cutoff, self._keep_versions)
            # A table whose log outlived the horizon is one whose tombstones pile up.
            if trimmed and self._tombstones is not None and path not in self._settled:
                self._settle_tombstones(path, self._tombstones)

        return turn

    def _settle_tombstones(self, path: str, properties: dict[str, str]) -> None:
        def settle() -> dict[str, object] | None:
            changed = set_table_properties(path, properties)
            self._settled.add(path)
            return dict(properties) if changed else None

        run_turn(
            path,
            "setting a Delta table's tombstone retention",
            settle,
            done="set a Delta table's tombstone retention",
        )

    def clear(self) -> None:
        """Forget the schedule (a new process trims each table when it first writes it)."""
        self._turns.clear()
        self._settled.clear()

    @staticmethod
    def _trim(path: str, cutoff: datetime, keep_versions: int) -> bool:
        """Trim one table's log; return whether files were deleted."""
        deleted: tuple[str, ...] = ()

        def trim() -> dict[str, object] | None:
            nonlocal deleted
            deleted = trim_log(path, cutoff=cutoff, keep_versions=keep_versions)
            return {"log_files_removed": len(deleted)} if deleted else None

        run_turn(path, "trimming a Delta log", trim, done="trimmed a Delta log")
        return bool(deleted)

    @property
    def horizon(self) -> float:
        """Seconds of versions kept readable."""
        return self._horizon

    @property
    def tombstones(self) -> dict[str, str] | None:
        """The tombstone retention set on the tables whose log is trimmed, or None."""
        return self._tombstones
