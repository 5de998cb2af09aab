"""Small-file compaction of the tables the sink writes, between batches.

Theory of operation
-------------------
Every MERGE adds at least one Parquet file (the rows it inserted or rewrote), every history
append and commit-log record another. Nothing removes them, and Sail's MERGE opens every
file of the table (it prunes partitions, not files by statistics): on a steady 5k
changes/s stream the MERGE of a 100k-row table went from 0.1 s to 0.4 s in 30 seconds, and
it keeps growing with the daemon's uptime (``python -m bench lag``).

So after every ``after_writes`` commits to a table (counted in memory, starting from the
commits after the newest compaction in the table's log when a process first writes it),
the sink compacts it with delta-rs (``DeltaTable.optimize.compact``): files smaller than
the target size are rewritten into few large ones in a commit with ``dataChange: false``.
Readers see the same rows at every version; time travel to older versions still works until
the files are vacuumed (which the daemon never does: retention is the operator's choice).
``wrote`` only counts and notes the tables that are due; ``compact_due`` compacts them.
The sink worker calls it (through ``DeltaSink.after_apply``) after it has reported the batch
durable, so a compaction never delays the batch that made it due, and never races the
engine's MERGE on the same table (the worker applies one batch at a time). A failed
compaction only logs a warning (the batch is already durable) and is tried again after
the next ``after_writes`` writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import structlog

from sink.settings import SinkSettings
from sink.spark import engine_message
from sink.tables import LakeTables

log = structlog.get_logger("wal2delta.sink")


class Compactor:
    """Counts writes per Delta table and compacts each one every ``after_writes`` writes."""

    def __init__(self, after_writes: int) -> None:
        self._after_writes = after_writes
        self._writes: dict[str, int] = {}
        self._due: dict[str, None] = {}
        """Tables to compact at the next ``compact_due``, in the order they became due."""

    @classmethod
    def for_settings(cls, settings: SinkSettings, lake: LakeTables) -> Compactor:
        """The compactor ``DeltaSink`` runs: the configuration's, over the sink's lake port."""
        del lake  # not needed yet
        return cls(settings.compact_after_writes)

    def wrote(self, paths: Iterable[str]) -> None:
        """Count one write to each of ``paths``; note those that are due."""
        if self._after_writes <= 0:
            return
        for path in paths:
            known = self._writes.get(path)
            count = known + 1 if known is not None else self._commits_since_compaction(path)
            if count < self._after_writes:
                self._writes[path] = count
                continue
            self._writes[path] = 0
            self._due[path] = None

    def compact_due(self) -> None:
        """Compact the tables that are due (failures only warn)."""
        while self._due:
            path = next(iter(self._due))
            del self._due[path]
            self._compact(path)

    def clear(self) -> None:
        """Forget the counts and what is due (a new process or a reset sink starts again)."""
        self._writes.clear()
        self._due.clear()

    def _commits_since_compaction(self, path: str) -> int:
        """Commits after the table's newest compaction, read once per process and table.

        A daemon that restarts more often than every ``after_writes`` writes (a crash loop,
        frequent deploys) would otherwise never compact; the table's own log knows.
        """
        from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

        try:
            history = DeltaTable(path).history(limit=self._after_writes)
        except Exception:  # counted from here on; compaction can wait
            return 1
        for newer, commit in enumerate(history):  # newest first
            if commit.get("operation") == "OPTIMIZE":
                return newer
        return len(history)

    @staticmethod
    def _compact(path: str) -> None:
        from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

        started = time.monotonic()
        try:
            result = DeltaTable(path).optimize.compact()
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
