"""What the lake records of each batch: its intent, the values stored under a convention,
the logical decoding messages, and its record in the commit log.

``DeltaSink`` opens a batch (``begin``: the commit log's intent, before any table is
written), writes its tables, then closes it (``finish``): the column origins its schema
changes noted (``bookkeeping.py``), its messages, its rejects (``rejects.py``) and the
Delta version of every table it wrote (``commits.py``). ``failed`` forgets what a batch
that did not finish noted, so a replay notes it again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from decoder import Lsn
from sink.base import Batch
from sink.constants import REJECTS_TABLE
from sink.planning.plan import BatchPlan
from sink.records.bookkeeping import Bookkeeping
from sink.records.commits import CommitLog, commits_path
from sink.records.rejects import RejectsLog, TableReject
from sink.values.naming import history_name, table_path


@dataclass(frozen=True, slots=True)
class FinishedBatch:
    """What recording a batch wrote and found."""

    written: tuple[str, ...]
    """The location of every Delta table the batch wrote, the lake's own ones included
    (for the compactor)."""
    unrepresentable: Counter[tuple[str, str, str]]
    """Values stored under a convention, by (table, column, reason)."""


class BatchRecords:
    """The records of each batch in the lake at ``root`` (the module docstring)."""

    def __init__(
        self,
        root: str,
        *,
        commits: CommitLog,
        bookkeeping: Bookkeeping,
        rejects: RejectsLog,
        messages_table: bool,
    ) -> None:
        self._root = root
        self._commits = commits
        self._bookkeeping = bookkeeping
        self._rejects = rejects
        self._messages_table = messages_table

    def begin(self, batch: Batch) -> Lsn | None:
        """Write the batch's intent (``CommitLog.begin``); its newest commit LSN.

        Raises:
            SinkError: the intent could not be written.
        """
        return self._commits.begin(batch)

    def tables_written(self) -> str | None:
        """Write the column origins the batch's tables noted; the origins table's location
        when there were any."""
        return self._bookkeeping.flush_column_origins()

    def failed(self) -> None:
        """Forget what the unfinished batch noted: its replay notes it again."""
        self._bookkeeping.forget_unwritten_origins()

    def finish(self, batch: Batch, plan: BatchPlan, histories: Mapping[str, str]) -> FinishedBatch:
        """Write the batch's messages and rejects and record it in the commit log;
        ``histories``: the change history each table appended to.

        Raises:
            SinkError: a record could not be written.
        """
        written: dict[str, str] = {}
        for table in plan.tables:
            name = table.qualified_name
            written[name] = table_path(self._root, table.schema, table.table)
            if name in histories:
                written[history_name(name)] = histories[name]
        if plan.messages and self._messages_table:
            self._bookkeeping.write_messages(plan.messages)
        rejects = [TableReject(t.qualified_name, r) for t in plan.tables for r in t.rejects]
        if self._rejects.append(rejects):
            written[REJECTS_TABLE] = self._rejects.path
        self._commits.record(batch, written)
        paths = (*written.values(), commits_path(self._root)) if written else ()
        return FinishedBatch(
            paths, Counter((r.table, r.reject.column, r.reject.reason.value) for r in rejects)
        )

    def flush(self) -> None:
        """Write the records deferred into the next batch's intent (``CommitLog.flush``).

        Raises:
            SinkError: they could not be written.
        """
        self._commits.flush()

    def clear(self) -> None:
        """Forget what the records cache (the sink closes)."""
        self._bookkeeping.clear()
        self._rejects.clear()
        self._commits.clear()
