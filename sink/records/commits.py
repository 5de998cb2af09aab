"""The commit log: after every batch, its source position and the Delta versions it made.

Theory of operation
-------------------
Delta has no multi-table transactions, so a reader of two tables can see one after batch
N and the other after batch N-1. After every applied batch (its MERGEs and history
appends done), ``CommitLog.record`` makes one row per table the batch wrote, for
``<path>/_wal2delta_commits`` (appended later, see below): a batch number, the transaction
boundary the batch ends at (``transaction_boundary``; NULL when it ends inside a
transaction), its newest complete transaction's commit time, the table (``schema.table``,
or ``schema.table__changes`` for a change history), its location and its Delta version
right after the batch.

Batch numbers grow by one per batch; the first batch of a process continues after the
newest number in the table. Before its first write, a batch records its *intent*: one row
with its number and ``high_lsn``, the newest commit LSN among its changes (no table).

The record of a batch is not appended at once: its rows (the versions read right after
the batch) wait, and go into the same Delta commit as the next batch's intent, so a busy
sink makes one commit-log append per batch instead of two. When the sink goes idle they
are appended on their own (``flush``, from the sink worker's ``settle`` and from
``close``). A crash before that loses the record, not data: the batch's intent is in the
log and its writes are durable, so the next recorded batch is a boundary as soon as its
LSN passes the lost batch's ``high_lsn`` - the cut skips one batch, it is never wrong. A
crash part-way through a batch leaves its intent and some of its writes; after the
restart the server re-sends from the last acknowledged position, and the replayed batches
- new numbers, cut differently - rewrite nothing already written, so until the replay
passes the crashed batch's ``high_lsn`` the tables hold changes of transactions after
the replayed batch's boundary (some tables more than others). A record is therefore a
consistent boundary only when its LSN is past the ``high_lsn`` of every earlier batch
(``wal2delta cut`` checks); otherwise it says nothing wrong, just no cut. Every recorded
version reflects a state at or after its batch; ``cut`` takes, for every table, the newest
version recorded at or before a valid boundary.

Versions are read with delta-rs (``deltalake``): Sail has no ``DESCRIBE HISTORY``. It
reads the lake with the credentials of the process environment, as ``wal2delta status``
does; the table objects are kept and brought forward incrementally.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Final

import pyarrow.fs as pa_fs
import structlog

from decoder import Lsn, cause_line, pg_timestamp_to_datetime
from sink.base import Batch, SinkRetryableError, WrittenTimeline
from sink.constants import COMMITS_TABLE
from sink.engine.arrow import ArrowColumn, arrow_table
from sink.engine.spark import engine_errors
from sink.engine.sql import delta_table, render_max, render_maxima, render_newest_timeline
from sink.lake.deltars import TableVersions, is_delta_table, read_rows
from sink.lake.logversion import local_directory, newest_logged_version
from sink.lake.tables import LakeTables
from sink.values.typemap import BIGINT, STRING, TIMESTAMP

log = structlog.get_logger("wal2delta.sink")

#: Columns of the commit log, in order.
COMMIT_COLUMNS: Final = (
    ArrowColumn("batch", BIGINT.spark_sql, BIGINT.arrow),
    ArrowColumn("lsn", BIGINT.spark_sql, BIGINT.arrow),
    ArrowColumn("commit_time", TIMESTAMP.spark_sql, TIMESTAMP.arrow),
    ArrowColumn("table_name", STRING.spark_sql, STRING.arrow),
    ArrowColumn("table_path", STRING.spark_sql, STRING.arrow),
    ArrowColumn("version", BIGINT.spark_sql, BIGINT.arrow),
    ArrowColumn("recorded_at", TIMESTAMP.spark_sql, TIMESTAMP.arrow),
    ArrowColumn("high_lsn", BIGINT.spark_sql, BIGINT.arrow),
    ArrowColumn("timeline", BIGINT.spark_sql, BIGINT.arrow),
)


OPEN_TABLES: Final = 128
"""delta-rs table handles the commit log keeps open to read versions incrementally. Each
holds its table's active-file list, so keeping one per table would grow memory with the
table count (issue 31: 1,000 tables); a table not among the 128 written last is opened
again when written (about 5 ms)."""


CommitRow = tuple[
    int,
    Lsn | None,
    datetime | None,
    str | None,
    str | None,
    int | None,
    datetime,
    Lsn | None,
    int | None,
]
"""One row of the commit log, in the order of ``COMMIT_COLUMNS``."""


def transaction_boundary(batch: Batch) -> Lsn | None:
    """The batch's ``durable_lsn`` when the batch ends at it, else None.

    A batch may end inside a transaction: one larger than a batch, or a batch closed at
    ``max_rows`` part-way through the next transaction after a complete one, whose
    ``durable_lsn`` is then that complete transaction's end. The batch ends at its
    ``durable_lsn`` exactly when its last change commits before it: a transaction that
    commits after the durable one has its commit record at or after that end.
    """
    durable = batch.durable_lsn
    if durable is None:
        return None
    for change in reversed(batch.changes):
        if change.commit_lsn is not None:  # not a non-transactional message
            return durable if change.commit_lsn < durable else None
    return durable


def _high_lsn(batch: Batch) -> Lsn | None:
    """The newest commit LSN among the batch's changes (None without any)."""
    return max((c.commit_lsn for c in batch.changes if c.commit_lsn is not None), default=None)


def commits_path(root: str) -> str:
    """Where the commit log of the lake at ``root`` lives."""
    return f"{root.rstrip('/')}/{COMMITS_TABLE}"


class CommitLog:
    """Records batches in ``<root>/_wal2delta_commits``."""

    def __init__(self, lake: LakeTables, root: str) -> None:
        self._lake = lake
        self._path = commits_path(root)
        self._last_batch: int | None = None
        self._intent: tuple[Batch, int, Lsn] | None = None
        """The batch whose intent was written last: it, its number and its ``high_lsn``."""
        self._versions = TableVersions(OPEN_TABLES)
        """The versions of tables outside a local lake, read with delta-rs: the
        ``OPEN_TABLES`` written lately stay open."""
        self._unwritten: list[CommitRow] = []
        """Record rows of applied batches, appended with the next intent or by ``flush``."""

    def clear(self) -> None:
        """Forget the batch number, the open tables and records not yet written.

        A record dropped here costs one boundary of ``wal2delta cut``, never a wrong cut
        (the module docstring); ``DeltaSink.close`` flushes before it clears.
        """
        self._last_batch = None
        self._intent = None
        self._versions.clear()
        self._unwritten.clear()

    def begin(self, batch: Batch) -> Lsn | None:
        """Record the intent of ``batch`` (its number and newest change) before it writes;
        return that newest change's commit LSN (None for a batch without changes, which
        records nothing).

        The records still waiting go into the same append.

        Raises:
            SinkError: the intent could not be written (the waiting records still wait).
        """
        high = _high_lsn(batch)
        if high is None:
            return None
        number = self._write_intent(high, batch.timeline)
        self._intent = (batch, number, high)
        return high

    def _write_intent(self, high: Lsn | None, timeline: int | None) -> int:
        """Append the intent row of the next batch number, with the records still
        waiting; return the number."""
        number = self._next_number()
        intent: CommitRow = (
            number,
            None,
            None,
            None,
            None,
            None,
            datetime.now(UTC),
            high,
            timeline,
        )
        self._append_rows([*self._unwritten, intent])
        self._unwritten.clear()
        self._last_batch = number
        return number

    def flush(self) -> None:
        """Append the records that wait for the next intent.

        Raises:
            SinkError: they could not be written (they still wait).
        """
        if self._unwritten:
            self._append_rows(self._unwritten)
            self._unwritten.clear()

    def _next_number(self) -> int:
        if self._last_batch is None:
            self._last_batch = self._read_newest()[0]
        return self._last_batch + 1

    def record(self, batch: Batch, written: Mapping[str, str]) -> None:
        """Record ``batch`` with the current version of each table in ``written``.

        The versions are read now; the rows are appended with the next batch's intent, or
        by ``flush`` (the module docstring).

        Args:
            batch: the batch just applied.
            written: table name -> Delta location, for every table the batch wrote.

        Raises:
            SinkRetryableError: a version could not be read (replaying is safe).
            SinkError: the batch number could not be read from the commit log.
        """
        intent, self._intent = self._intent, None
        if not written:
            return
        high: Lsn | None
        if intent is not None and intent[0] is batch:
            _, number, high = intent  # read once, in begin: a pass over every change
        else:
            number, high = self._next_number(), _high_lsn(batch)
        commit_time = (
            None
            if batch.last_commit_time is None
            else pg_timestamp_to_datetime(batch.last_commit_time)
        )
        now = datetime.now(UTC)
        rows: list[CommitRow] = [
            (
                number,
                transaction_boundary(batch),
                commit_time,
                name,
                path,
                self._version(name, path),
                now,
                high,
                batch.timeline,
            )
            for name, path in written.items()
        ]
        self._unwritten += rows
        self._last_batch = number

    def _append_rows(self, rows: list[CommitRow]) -> None:
        columns = [list(column) for column in zip(*rows, strict=True)]
        arrow = arrow_table(COMMITS_TABLE, COMMIT_COLUMNS, columns)
        with engine_errors("recording batches in the commit log"):
            # A lake written before the timeline was recorded gets the column now.
            self._lake.append(self._path, arrow, COMMIT_COLUMNS, merge_schema=True)

    def written_timeline(self) -> WrittenTimeline | None:
        """The newest server timeline recorded, and the newest commit LSN a batch streamed
        on it may have written (its intents' ``high_lsn``; None when the lake accepted the
        timeline and wrote nothing since). When no record has a timeline (a commit log
        written before timelines were recorded, ``timeline`` None) the newest ``high_lsn``
        of any batch; None for a lake that holds no batch.

        Raises:
            SinkError: the commit log could not be read.
        """
        if self._lake.states.get(self._path) is None and not is_delta_table(self._path):
            return None  # a new lake: nothing written yet
        target = delta_table(self._path)
        with engine_errors("reading the commit log"):
            state = self._lake.load(self._path, COMMITS_TABLE, COMMIT_COLUMNS)
            if "timeline" in state.columns:
                rows = self._lake.rows(
                    render_newest_timeline(timeline="timeline", lsn="high_lsn", target=target)
                )
                if rows and rows[0]["timeline"] is not None:
                    high = rows[0]["high"]
                    return WrittenTimeline(
                        int(rows[0]["timeline"]), None if high is None else Lsn(int(high))
                    )
            # Written before timelines were recorded: only the positions tell.
            rows = self._lake.rows(render_max("high_lsn", target=target))
        if not rows or rows[0]["m"] is None:
            return None
        return WrittenTimeline(None, Lsn(int(rows[0]["m"])))

    def accept_timeline(self, timeline: int) -> None:
        """Record, as the intent of a batch that writes nothing, that the lake follows
        ``timeline`` from now on. Its ``high_lsn`` is NULL: the changes the lake holds from
        an older timeline are no frontier on this one (and the older intents still keep a
        cut from being claimed before the stream passes them, ``consistent_boundaries``).

        Raises:
            SinkError: the record could not be written.
        """
        self._write_intent(None, timeline)

    def newest_high_lsn(self) -> Lsn | None:
        """The newest ``high_lsn`` of the log: no table of the lake holds a change above it
        (every batch records its intent before it writes); None when no batch did.

        Raises:
            SinkError: the commit log could not be read.
        """
        batch, high = self._read_newest()
        if self._last_batch is None:
            # Read in the same scan: no intent is written between this read and the next
            # batch number (the replay horizon asks before the first intent of a process).
            self._last_batch = batch
        return high

    def _read_newest(self) -> tuple[int, Lsn | None]:
        """The newest batch number (0 for an empty log) and ``high_lsn``, in one scan."""
        with engine_errors("reading the commit log"):
            self._lake.load(self._path, COMMITS_TABLE, COMMIT_COLUMNS)
            rows = self._lake.rows(
                render_maxima("batch", "high_lsn", target=delta_table(self._path))
            )
        batch, high = (rows[0]["m0"], rows[0]["m1"]) if rows else (None, None)
        return (
            0 if batch is None else int(str(batch)),
            None if high is None else Lsn(int(str(high))),
        )

    def _version(self, name: str, path: str) -> int:
        local = local_directory(path)
        if local is not None:
            # The log's names (sink/lake/logversion.py): a hundredth of delta-rs's update.
            version = newest_logged_version(local)
            if version is not None:
                return version
        try:
            return self._versions.version(path)
        except Exception as exc:
            # Retryable: the batch is durable, and recording it again after a replay is safe.
            raise SinkRetryableError(
                f"cannot read the Delta version of {name} for the commit log "
                f"({cause_line(exc)}); delta-rs reads the lake with this process's "
                "credentials (AWS_* for s3://)"
            ) from exc


# --- reading the log: boundaries, and the versions a cut can still name ------------------


Record = Mapping[str, object]
"""One row of the commit log as read back (column name -> value)."""


def read_commit_records(root: str) -> list[dict[str, object]]:
    """Every row of the commit log of the lake at ``root``, read with delta-rs.

    Raises:
        FileNotFoundError: the lake has no commit log yet.
        Exception: delta-rs could not read it.
    """
    path = commits_path(root)
    if not is_delta_table(path):
        raise FileNotFoundError(path)
    return read_rows(path, _native_filesystem(path))


def _native_filesystem(path: str) -> pa_fs.FileSystem | None:
    """Arrow's own filesystem for a local table, else None (delta-rs's).

    delta-rs hands Arrow a Python filesystem; Arrow's I/O threads calling into it may still
    run when the interpreter exits, which then aborts ("terminate called without an active
    exception", apache/arrow#34314, delta-rs#2184) after the output is printed - seen in
    about one run in fifty under load (``wal2delta cut``). A local lake is read through
    Arrow's own filesystem, which has no such threads.
    """
    if "://" in path and not path.startswith("file://"):
        return None
    root = path.removeprefix("file://")
    return pa_fs.SubTreeFileSystem(root, pa_fs.LocalFileSystem())


def consistent_boundaries(records: Iterable[Record]) -> list[Record]:
    """The records that are transaction boundaries a cut may take, in batch order.

    A record is one when it has an LSN past the ``high_lsn`` of every earlier batch (the
    module docstring: replayed batches after a crash are no boundary until the replay
    passes the crashed batch).
    """
    found = []
    earlier = -1  # the newest change of the batches before the current one
    current, current_high = None, -1
    for row in sorted(records, key=lambda r: _int(r["batch"])):
        number = _int(row["batch"])
        if number != current:
            earlier = max(earlier, current_high)
            current, current_high = number, -1
        high = row.get("high_lsn")
        if high is not None:
            current_high = max(current_high, _int(high))
        lsn = row["lsn"]
        if lsn is not None and row["table_name"] is not None and _int(lsn) > earlier:
            found.append(row)
    return found


def oldest_retained_boundary(records: Iterable[Record], cutoff: datetime) -> int | None:
    """The batch of the oldest boundary a cut may still take when versions older than
    ``cutoff`` are vacuumed: the newest boundary recorded before ``cutoff`` (a cut at a
    point between it and the next boundary takes it). None: every boundary is younger.
    """
    older = [_int(r["batch"]) for r in consistent_boundaries(records) if _recorded(r) < cutoff]
    return max(older, default=None)


def retained_versions(records: Iterable[Record], cutoff: datetime) -> dict[str, set[int]]:
    """Per table location, the versions recorded before ``cutoff`` a cut may still name.

    A cut at a boundary B names, for every table, its newest version recorded at or before
    B. For a boundary recorded at or after ``cutoff`` that version is either recorded at
    or after ``cutoff`` too - its files were removed later still, so a vacuum keeping every
    file removed after ``cutoff`` keeps them - or it is the table's newest version recorded
    before ``cutoff``. The oldest boundary a cut may take (``oldest_retained_boundary``)
    names the newest version recorded at or before it. So these are at most two versions
    a table, whatever the length of the log
    (docs/decisions/0106-deletion-vectors-per-table-and-a-retention.md).
    """
    rows = sorted(records, key=lambda r: _int(r["batch"]))
    oldest = oldest_retained_boundary(rows, cutoff)
    kept: dict[str, set[int]] = {}
    newest_before: dict[str, int] = {}
    at_oldest: dict[str, int] = {}
    for row in rows:
        path, version = row["table_path"], row["version"]
        if path is None or version is None or _recorded(row) >= cutoff:
            continue
        name, number = str(path), _int(version)
        newest_before[name] = max(newest_before.get(name, number), number)
        if oldest is not None and _int(row["batch"]) <= oldest:
            at_oldest[name] = max(at_oldest.get(name, number), number)
    for versions in (newest_before, at_oldest):
        for name, number in versions.items():
            kept.setdefault(name, set()).add(number)
    return kept


def _recorded(row: Record) -> datetime:
    moment = row["recorded_at"]
    assert isinstance(moment, datetime)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value
