"""Initial snapshot: copy existing rows, then stream from the slot's consistent point.

Theory of operation
-------------------
The slot is created on the replication connection with ``SNAPSHOT 'export'``; PostgreSQL
returns the slot's consistent point and the name of a snapshot that sees exactly the
transactions committed before it. While that replication connection stays idle, normal
connections can ``SET TRANSACTION SNAPSHOT`` to it and ``COPY`` each published table -
honouring the publications' column lists and row filters - so the copy and the stream
meet at the consistent point with nothing missed and nothing doubled: the copy holds every
transaction committed before it, the stream every one committed after it.

What is copied is what the server will stream, read from the catalog inside the snapshot
(``read_published_tables``): every table any of the publications publishes, whether
``source.tables`` lists it or not (``FOR ALL TABLES`` and ``TABLES IN SCHEMA`` included),
with the combined row filter and column list, as PostgreSQL's table sync copies for a
subscription to the same publications. A regular table is read ``FROM ONLY``: inheritance
children are published, and copied, as tables of their own. Finding no table while the
publications publish some would silently lose every existing row, so it is an error.

Copied rows are bulk appends (``BulkSnapshotSink``, ``sink.bulk``): the sink prepares each
table exactly as a MERGE of inserts would find it - created from the relation, truncated
at the consistent point (which removes whatever an interrupted earlier snapshot appended,
all of it stamped with an earlier consistent point), following the relation - and then
appends Arrow batches of the rows, stamped with the consistent point as their LSN. The
sink's replay guard makes streamed changes (later LSNs) win over copied rows. Rows are
read by ``copyreader`` (COPY csv parsed by Arrow, no Python object per row) one chunk of
about ``chunk_bytes`` at a time, one chunk ahead of the append, so memory follows the
chunk size and the number of workers, never the table.

``parallelism`` workers copy at once, each on its own connection in the exported snapshot
(the replication connection stays idle until all are done): several tables, and a large
table in page ranges (``ctid`` TID range scans, PostgreSQL 14+). Ranges of one table are
appended at once too (``append_bulk`` is safe for that); they number their rows from bases
of their own (``RANGE_ORDINAL_STRIDE``), so ordinals and hidden row identities stay unique
per table. Progress - rows, bytes, rows/s, ETA per table - goes to the log every
``progress_interval`` seconds and to the ``wal2delta_snapshot_*`` metrics.

A table the sink declines (``begin_bulk`` returns None: an append could write something
else than MERGEd inserts) and every table of a sink without bulk appends are copied as
before: inserts with the consistent point as commit LSN, preceded by a TRUNCATE with the
same LSN, applied through ``apply`` in batches of ``chunk_rows``.

A table is locked (ACCESS SHARE, in the snapshot's transaction) just before its copy reads
it, as PostgreSQL's table sync holds it while it copies; until then anyone may alter it.
The snapshot shows its columns as they were, but the copy's query names them as they are:
``_lock`` compares the two catalogs once the lock is held. A column dropped since is read
as NULL (its values are gone from every view); any other change that leaves the
snapshot's rows unreadable raises ``TableChangedSinceSnapshotError`` (retryable: the copy
starts over in a newer snapshot). Decision 0125.

Whether the snapshot of a slot finished is recorded by the sink (``SnapshotMarkerStore``)
next to the data. A slot without a "complete" marker is dropped and snapshotted again: an
interrupted snapshot restarts cleanly.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import psycopg
import structlog
from psycopg import errors as pg_errors
from psycopg import sql

from capture.adbcreader import AdbcSnapshotReader, adbc_available
from capture.copyreader import (
    MIN_TID_RANGE_SCAN_VERSION,
    PageRange,
    copy_query,
    page_ranges,
    prefetched,
    read_text_batches,
)
from capture.errors import CaptureError, TableChangedSinceSnapshotError
from capture.metrics import Metrics
from capture.settings import SnapshotTuning
from capture.slots import PublishedTable, read_published_tables, require_publications
from decoder import (
    Change,
    ColumnKind,
    ColumnValue,
    Lsn,
    Oid,
    PgTimestamp,
    Relation,
    RelationColumn,
    RowChange,
    TupleData,
    datetime_to_pg_timestamp,
    format_lsn,
)
from sink import (
    RANGE_ORDINAL_STRIDE,
    Batch,
    BulkSnapshotSink,
    CopyTarget,
    OnlineCopySink,
    copy_truncate,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = structlog.get_logger("wal2delta.snapshot")

Conn = psycopg.Connection[tuple[object, ...]]


@dataclass(frozen=True, slots=True)
class ExportedSnapshot:
    """A freshly created slot and the snapshot it exported."""

    slot: str
    consistent_point: Lsn
    snapshot_name: str


def relation_from_catalog(conn: Conn, table: PublishedTable) -> Relation:
    """Describe a table the way a pgoutput Relation message would.

    Columns are the published ones: ``table.columns`` when given (the column list the
    catalog reports, generated columns included only when published), else every column
    but generated and dropped ones. Key flags follow the replica identity (every column
    for FULL, as pgoutput sends it).
    """
    qualified = sql.Identifier(table.schema, table.name).as_string(conn)
    row = conn.execute(
        "SELECT c.oid, c.relreplident FROM pg_class c WHERE c.oid = %s::regclass",
        (qualified,),
    ).fetchone()
    assert row is not None
    oid, identity = int(str(row[0])), str(row[1])
    published = None if table.columns is None else set(table.columns)
    rows = conn.execute(
        """
        SELECT a.attname, a.atttypid, a.atttypmod,
               COALESCE(a.attnum = ANY(i.indkey), false) AS in_identity_index,
               a.attgenerated <> '' AS generated
        FROM pg_attribute a
        LEFT JOIN pg_index i ON i.indrelid = a.attrelid
             AND ((%s = 'd' AND i.indisprimary) OR (%s = 'i' AND i.indisreplident))
        WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (identity, identity, oid),
    ).fetchall()
    columns = []
    for name, type_oid, typmod, in_index, generated in rows:
        is_published = str(name) in published if published is not None else not generated
        if not is_published:
            continue
        is_key = identity == "f" or bool(in_index)
        columns.append(
            RelationColumn(
                flags=1 if is_key else 0,
                name=str(name),
                type_oid=Oid(int(str(type_oid))),
                type_modifier=int(str(typmod)),
            )
        )
    return Relation(
        xid=None,
        relation_id=Oid(oid),
        namespace=table.schema,
        relation_name=table.name,
        replica_identity=identity,
        columns=tuple(columns),
    )


def copy_rows(
    conn: Conn,
    relation: Relation,
    row_filter: str | None,
    chunk_rows: int,
    nulls: Collection[str] = (),
) -> Iterator[list[TupleData]]:
    """Yield the table's rows as text TupleData, ``chunk_rows`` at a time.

    ``row_filter`` is the publications' combined WHERE clause, read back from the
    catalog. A regular table is read without its inheritance children (published as
    tables of their own); a partitioned table (published via its root) with all its
    partitions. Columns named in ``nulls`` (dropped since the snapshot) are NULL.
    """
    row = conn.execute(
        "SELECT relkind FROM pg_class WHERE oid = %s", (relation.relation_id,)
    ).fetchone()
    only = row is not None and str(row[0]) == "r"
    columns = sql.SQL(", ").join(
        sql.SQL("NULL AS {}").format(sql.Identifier(c.name))
        if c.name in nulls
        else sql.Identifier(c.name)
        for c in relation.columns
    )
    query = sql.SQL("COPY (SELECT {} FROM {}{}{}) TO STDOUT").format(
        columns,
        sql.SQL("ONLY ") if only else sql.SQL(""),
        sql.Identifier(relation.namespace, relation.relation_name),
        sql.SQL(" WHERE " + row_filter) if row_filter else sql.SQL(""),
    )
    null = ColumnValue(ColumnKind.NULL)
    chunk: list[TupleData] = []
    with conn.cursor() as cur, cur.copy(query) as copy:
        copy.set_types(["text"] * len(relation.columns))
        for row in copy.rows():
            chunk.append(
                TupleData(
                    tuple(
                        null if v is None else ColumnValue(ColumnKind.TEXT, str(v).encode())
                        for v in row
                    )
                )
            )
            if len(chunk) >= chunk_rows:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _estimated_rows(conn: Conn, relation: Relation) -> int:
    row = conn.execute(
        "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s",
        (relation.relation_id,),
    ).fetchone()
    return int(str(row[0])) if row is not None else 0


@dataclass(slots=True)
class _TableJob:
    """One table of a bulk copy: its target, ranges left and progress."""

    relation: Relation
    row_filter: str | None
    only: bool
    target: CopyTarget
    estimate: int
    pages: int
    ranges: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    nulls: dict[str, str] = field(default_factory=dict)
    """Columns dropped since the snapshot, by their type: copied as NULL (``_lock``)."""
    rows: int = 0
    bytes: int = 0
    started: float = 0.0
    last_report: float = 0.0


_RangeReader = Callable[[_TableJob, PageRange, Callable[[int], None]], Iterator["pa.RecordBatch"]]
"""Reads one page range of one table as Arrow batches, reporting bytes read."""


class SnapshotCopier:
    """Copies every table the publications publish, in one exported snapshot, into the sink.

    With a ``bulk`` sink, tables are read as COPY csv into Arrow string batches
    (``copyreader``) and appended (``BulkSnapshotSink``) by ``tuning.parallelism``
    workers, each its own connection in the exported snapshot, several tables at once and
    large tables in page ranges. Tables the sink declines, and every table without a bulk
    sink, are copied as inserts through ``apply`` (the MERGE path).
    """

    def __init__(
        self,
        conninfo: str,
        publications: Sequence[str],
        *,
        apply: Callable[[Batch], object],
        metrics: Metrics,
        chunk_rows: int,
        bulk: BulkSnapshotSink | OnlineCopySink | None = None,
        tuning: SnapshotTuning,
        progress_interval: float = 5.0,
        begin: Callable[[Relation, Lsn, PgTimestamp], CopyTarget | None] | None = None,
        record: bool = True,
    ) -> None:
        """``begin`` prepares a table's target (default: ``bulk.begin_bulk``, the table
        itself; an online copy passes its staging table's); ``record``: record the
        appended tables in the sink's commit log (``finish_bulk``) once copied."""
        if begin is None and isinstance(bulk, BulkSnapshotSink):
            begin = bulk.begin_bulk
        self._begin = begin
        self._record = record
        self.copied: list[tuple[Relation, CopyTarget]] = []
        """The tables the last ``run`` appended, with their targets."""
        self._conninfo = conninfo
        self._publications = tuple(publications)
        self._apply = apply
        self._metrics = metrics
        self._chunk_rows = chunk_rows
        self._bulk = bulk
        self._tuning = tuning
        self._progress_interval = progress_interval
        self._remaining = 0
        self._remaining_lock = threading.Lock()
        self._conn: Conn | None = None
        """The connection in the snapshot that holds the tables' locks (``run``)."""
        self._catalog: Conn | None = None
        """An autocommit connection that reads the catalog as it is now (``_lock``)."""
        self._catalog_lock = threading.Lock()

    def run(self, snapshot: ExportedSnapshot, *, only: Collection[str] | None = None) -> int:
        """Copy all published tables (``only``: those of these names); return the number of
        rows copied.

        Raises:
            PublicationError: a publication does not exist (in the snapshot), or the
                publications publish a table with different column lists.
            CaptureError: no table was found although the publications publish some.
            SinkError: the sink could not write the copied rows.
        """
        lsn = snapshot.consistent_point
        commit_time = datetime_to_pg_timestamp(datetime.now(UTC))
        total = 0
        started = time.monotonic()
        with (
            psycopg.connect(self._conninfo, application_name="wal2delta-snapshot") as conn,
            contextlib.ExitStack() as stack,
        ):
            stack.callback(self._close_catalog)
            _enter_snapshot(conn, snapshot.snapshot_name)
            self._conn = conn
            tables = self._published_tables(conn)
            if only is not None:
                tables = [t for t in tables if f"{t.schema}.{t.name}" in only]
            self._remaining = len(tables)
            self._metrics.snapshot_tables_remaining.set(self._remaining)
            jobs: list[_TableJob] = []
            merged: list[tuple[Relation, str | None]] = []
            for table in tables:
                relation = relation_from_catalog(conn, table)
                job = self._bulk_job(conn, relation, table.where, lsn, commit_time)
                if job is None:
                    merged.append((relation, table.where))
                else:
                    jobs.append(job)
            if jobs:
                assert self._bulk is not None
                total += self._copy_bulk(conn, snapshot.snapshot_name, jobs)
                if self._record and isinstance(self._bulk, BulkSnapshotSink):
                    self._bulk.finish_bulk([job.target for job in jobs])
            self.copied = [(job.relation, job.target) for job in jobs]
            # Tables the bulk path declined go through the sink's MERGE path, after the
            # workers: the sink is used by one thread at a time.
            for relation, row_filter in merged:
                total += self._copy_table(conn, relation, row_filter, lsn, commit_time)
                self._table_done()
            conn.execute("COMMIT")
        log.info(
            "snapshot copied",
            rows=total,
            tables=len(tables),
            consistent_point=format_lsn(lsn),
            duration_seconds=round(time.monotonic() - started, 3),
            parallelism=self._tuning.parallelism,
        )
        return total

    def _close_catalog(self) -> None:
        self._conn = None
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    def _lock(self, relation: Relation) -> dict[str, str]:
        """Lock the table in the snapshot before its copy reads it; return the columns
        dropped since the snapshot was taken, by type: the copy reads them as NULL.

        Until it is locked, a table can be altered by anyone; the snapshot still shows
        it as it was, but a query names columns as they are now. Once the connection in
        the snapshot holds ACCESS SHARE (as PostgreSQL's table sync holds it while it
        copies), no ``ALTER TABLE`` can change it before the snapshot ends, and what
        changed before is what the catalog shows now besides what the snapshot shows
        (decision 0125).

        Raises:
            TableChangedSinceSnapshotError: the snapshot's rows cannot be read as they
                were (the table dropped or renamed, a column renamed or given another
                type, a key column dropped, the table rewritten or its partitions
                changed): the copy must start over in a newer snapshot.
        """
        assert self._conn is not None
        name = relation.qualified_name
        oid = int(relation.relation_id)
        with self._catalog_lock:
            if self._catalog is None:
                self._catalog = psycopg.connect(
                    self._conninfo, autocommit=True, application_name="wal2delta-snapshot"
                )
            now = _table_shape(self._catalog, oid)
            if now is not None:
                only = sql.SQL("ONLY " if now.kind == "r" else "")
                statement = sql.SQL("LOCK TABLE {}{} IN ACCESS SHARE MODE")
                try:
                    self._conn.execute(statement.format(only, sql.Identifier(*now.name)))
                except (pg_errors.UndefinedTable, pg_errors.DeadlockDetected) as exc:
                    raise TableChangedSinceSnapshotError(
                        f"{name} could not be locked for its copy: {exc.diag.message_primary}; "
                        "it was altered since the snapshot was taken. The copy starts over "
                        "in a new snapshot."
                    ) from exc
                now = _table_shape(self._catalog, oid)  # cannot change any more
            then = _table_shape(self._conn, oid)
        assert then is not None, "the snapshot published the table"
        if now is None:
            problems = ["it was dropped"]
            nulls: dict[str, str] = {}
        else:
            problems, nulls = _changes(relation, then, now)
        if problems:
            raise TableChangedSinceSnapshotError(
                f"{name} changed after the snapshot was taken: {'; '.join(problems)}. The "
                "rows the snapshot shows can no longer be read as they were; the copy starts "
                "over in a new snapshot."
            )
        if nulls:
            log.warning(
                "snapshot: columns dropped after the snapshot was taken are copied as NULL",
                table=name,
                columns=sorted(nulls),
            )
        return nulls

    def _table_done(self) -> None:
        with self._remaining_lock:
            self._remaining -= 1
            self._metrics.snapshot_tables_remaining.set(self._remaining)

    def _published_tables(self, conn: Conn) -> list[PublishedTable]:
        """The tables to copy, as the snapshot sees the publications."""
        publications = self._publications
        # Seen from the snapshot: a publication dropped since start-up is missing here.
        require_publications(conn, publications, hint="there is nothing to copy from it.")
        tables = read_published_tables(conn, publications)
        if not tables:
            row = conn.execute(
                "SELECT count(*) FROM pg_publication_tables WHERE pubname = ANY(%s)",
                (list(publications),),
            ).fetchone()
            published = int(str(row[0])) if row is not None else 0
            if published:
                raise CaptureError(
                    f"The snapshot found no table to copy although publications "
                    f"{', '.join(publications)} publish {published}; nothing was copied. "
                    "This is a bug in wal2delta; please report it."
                )
            log.warning(
                "snapshot: the publications publish no table yet",
                publications=",".join(publications),
            )
        return tables

    # --- bulk path -------------------------------------------------------------------------

    def _bulk_job(
        self,
        conn: Conn,
        relation: Relation,
        row_filter: str | None,
        lsn: Lsn,
        commit_time: PgTimestamp,
    ) -> _TableJob | None:
        """Prepare a table for bulk appends; None when it goes through ``apply``."""
        if self._bulk is None or self._begin is None or not relation.columns:
            return None
        target = self._begin(relation, lsn, commit_time)
        if target is None:
            log.info("snapshot: table copied through MERGE", table=relation.qualified_name)
            return None
        row = conn.execute(
            "SELECT relkind, greatest(reltuples, 0)::bigint, "
            "pg_relation_size(oid) / current_setting('block_size')::int "
            "FROM pg_class WHERE oid = %s",
            (relation.relation_id,),
        ).fetchone()
        assert row is not None
        kind, estimate, pages = str(row[0]), int(str(row[1])), int(str(row[2]))
        ranges = 1
        tuning = self._tuning
        if (
            tuning.parallelism > 1
            and kind == "r"
            and conn.info.server_version >= MIN_TID_RANGE_SCAN_VERSION
        ):
            size = pages * _BLOCK_SIZE
            ranges = max(1, min(4 * tuning.parallelism, size // tuning.chunk_bytes))
        self._metrics.snapshot_table_rows_estimated.labels(table=target.table).set(estimate)
        return _TableJob(relation, row_filter, kind == "r", target, estimate, pages, ranges)

    def _copy_bulk(self, conn: Conn, snapshot_name: str, jobs: list[_TableJob]) -> int:
        """Copy the prepared tables; ``parallelism`` workers, each in the snapshot."""
        work: queue.SimpleQueue[tuple[_TableJob, int, PageRange]] = queue.SimpleQueue()
        # Largest tables first, so the last table to finish is a small one.
        for job in sorted(jobs, key=lambda j: j.estimate, reverse=True):
            for index, pages in enumerate(page_ranges(job.pages, job.ranges)):
                work.put((job, index, pages))
        workers = min(self._tuning.parallelism, work.qsize())
        if workers <= 1:
            with self._reader(conn, snapshot_name) as reader:
                return self._work(reader, work, threading.Event())
        failed = threading.Event()
        errors: list[BaseException] = []
        copied: list[int] = []

        def worker() -> None:
            try:
                with self._reader(None, snapshot_name) as reader:
                    copied.append(self._work(reader, work, failed))
            except BaseException as exc:
                errors.append(exc)
                failed.set()

        threads = [
            threading.Thread(target=worker, name=f"wal2delta-snapshot-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return sum(copied)

    @contextlib.contextmanager
    def _reader(self, conn: Conn | None, snapshot_name: str) -> Iterator[_RangeReader]:
        """A reader of ranges in the exported snapshot: ADBC when installed, else COPY csv.

        ``conn`` (already in the snapshot) is used by the csv reader; without it, the
        reader opens a connection of its own.
        """
        block = self._tuning.chunk_bytes
        if self._tuning.reader == "adbc" or (self._tuning.reader == "auto" and adbc_available()):
            with AdbcSnapshotReader(self._conninfo, snapshot_name) as adbc:

                def read_adbc(
                    job: _TableJob, pages: PageRange, on_bytes: Callable[[int], None]
                ) -> Iterator[pa.RecordBatch]:
                    return adbc.batches(
                        job.relation,
                        job.row_filter,
                        only=job.only,
                        pages=pages,
                        block_bytes=block,
                        on_bytes=on_bytes,
                        nulls=job.nulls,
                    )

                yield read_adbc
            return
        with contextlib.ExitStack() as stack:
            if conn is None:
                conn = stack.enter_context(
                    psycopg.connect(self._conninfo, application_name="wal2delta-snapshot")
                )
                _enter_snapshot(conn, snapshot_name)
            csv_conn = conn

            def read_csv(
                job: _TableJob, pages: PageRange, on_bytes: Callable[[int], None]
            ) -> Iterator[pa.RecordBatch]:
                query = copy_query(
                    job.relation, job.row_filter, only=job.only, pages=pages, nulls=job.nulls
                )
                columns = len(job.relation.columns)
                return read_text_batches(
                    csv_conn, query, columns, block_bytes=block, on_bytes=on_bytes
                )

            yield read_csv

    def _work(
        self,
        reader: _RangeReader,
        work: queue.SimpleQueue[tuple[_TableJob, int, PageRange]],
        failed: threading.Event,
    ) -> int:
        """Copy ranges from ``work`` until it is empty (or another worker failed)."""
        assert self._bulk is not None
        copied = 0
        while not failed.is_set():
            try:
                job, index, pages = work.get_nowait()
            except queue.Empty:
                break
            copied += self._copy_range(reader, job, index, pages, failed)
        return copied

    def _copy_range(
        self,
        reader: _RangeReader,
        job: _TableJob,
        index: int,
        pages: PageRange,
        failed: threading.Event,
    ) -> int:
        assert self._bulk is not None
        name = job.target.table
        with job.lock:
            if not job.started:
                job.nulls = self._lock(job.relation)
                job.started = job.last_report = time.monotonic()
        bytes_counter = self._metrics.snapshot_bytes.labels(table=name)

        def read(size: int) -> None:
            bytes_counter.inc(size)
            with job.lock:
                job.bytes += size

        rows_counter = self._metrics.snapshot_rows.labels(table=name)
        ordinal = index * RANGE_ORDINAL_STRIDE + 1
        copied = 0
        for batch in prefetched(reader(job, pages, read)):
            if failed.is_set():
                break
            appended = self._bulk.append_bulk(job.target, batch, ordinal)
            with job.lock:
                job.rows += appended
            ordinal += appended
            copied += appended
            rows_counter.inc(appended)
            self._maybe_report(job)
        with job.lock:
            job.ranges -= 1
            done = job.ranges == 0
        if done:
            elapsed = time.monotonic() - job.started
            self._report(name, job.rows, job.bytes, max(job.estimate, job.rows), elapsed, done=True)
            self._table_done()
        return copied

    def _maybe_report(self, job: _TableJob) -> None:
        now = time.monotonic()
        with job.lock:
            if now - job.last_report < self._progress_interval:
                return
            job.last_report = now
            rows, read = job.rows, job.bytes
        self._report(job.target.table, rows, read, job.estimate, now - job.started)

    # --- MERGE path ------------------------------------------------------------------------

    def _copy_table(
        self,
        conn: Conn,
        relation: Relation,
        row_filter: str | None,
        lsn: Lsn,
        commit_time: PgTimestamp,
    ) -> int:
        name = relation.qualified_name
        nulls = self._lock(relation)
        estimate = _estimated_rows(conn, relation)
        self._metrics.snapshot_table_rows_estimated.labels(table=name).set(estimate)
        # Replaces whatever an interrupted earlier snapshot left behind.
        first: list[Change] = [copy_truncate(relation, lsn, commit_time)]
        copied = read = 0
        ordinal = 1
        started = last_report = time.monotonic()
        counter = self._metrics.snapshot_rows.labels(table=name)
        bytes_counter = self._metrics.snapshot_bytes.labels(table=name)
        for chunk in copy_rows(conn, relation, row_filter, self._chunk_rows, nulls):
            size = sum(len(v.data or b"") for data in chunk for v in data.values)
            read += size
            bytes_counter.inc(size)
            changes = [
                RowChange(
                    op="insert",
                    relation=relation,
                    new=data,
                    old=None,
                    old_kind=None,
                    commit_lsn=lsn,
                    commit_time=commit_time,
                    ordinal=ordinal + i,
                )
                for i, data in enumerate(chunk)
            ]
            ordinal += len(chunk)
            self._apply(_batch([*first, *changes]))
            first = []
            copied += len(chunk)
            counter.inc(len(chunk))
            now = time.monotonic()
            if now - last_report >= self._progress_interval:
                last_report = now
                self._report(name, copied, read, estimate, now - started)
        if first:
            self._apply(_batch(first))
        self._report(
            name, copied, read, max(estimate, copied), time.monotonic() - started, done=True
        )
        return copied

    def _report(
        self,
        table: str,
        rows: int,
        read: int,
        estimate: int,
        elapsed: float,
        *,
        done: bool = False,
    ) -> None:
        rate = rows / elapsed if elapsed > 0 else 0.0
        eta = (estimate - rows) / rate if rate > 0 and estimate > rows else 0.0
        log.info(
            "snapshot table copied" if done else "snapshot progress",
            table=table,
            rows=rows,
            bytes=read,
            estimated_rows=estimate,
            rows_per_second=round(rate),
            eta_seconds=round(eta),
        )
        if sys.stderr.isatty() and not done:
            percent = 100 * rows / estimate if estimate else 0
            print(
                f"\rsnapshot {table}: {rows} rows ({percent:.0f}%), "
                f"{rate:,.0f} rows/s, ETA {eta:.0f}s",
                end="",
                file=sys.stderr,
            )


_BLOCK_SIZE: Final = 8192
"""PostgreSQL's default page size; only sizes the ranges a table is split into."""


def _enter_snapshot(conn: Conn, snapshot_name: str) -> None:
    """Open a read-only transaction on ``conn`` that sees the exported snapshot."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))


def _batch(changes: Sequence[Change]) -> Batch:
    return Batch(
        changes=tuple(changes),
        durable_lsn=None,
        transaction_count=0,
        last_commit_time=None,
    )


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    type_oid: int
    type_name: str
    """``format_type``'s SQL spelling, with the type modifier."""
    dropped: bool


@dataclass(frozen=True, slots=True)
class _TableShape:
    """What one view of the catalog says of a table."""

    name: tuple[str, str]
    kind: str
    files: frozenset[tuple[int, int]]
    """(oid, relfilenode) of the table and, when partitioned, of its partitions."""
    columns: Mapping[int, _Column]
    """By attnum; dropped columns too."""


def _table_shape(conn: Conn, oid: int) -> _TableShape | None:
    """The table as ``conn`` sees the catalog (the snapshot's, or now in autocommit);
    None when it does not exist there."""
    row = conn.execute(
        "SELECT n.nspname, c.relname, c.relkind FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
        (oid,),
    ).fetchone()
    if row is None:
        return None
    kind = str(row[2])
    files = conn.execute(
        """
        WITH RECURSIVE tree(oid) AS (
            SELECT %s::oid
            UNION ALL
            SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid
            WHERE %s = 'p'
        )
        SELECT c.oid, c.relfilenode FROM tree JOIN pg_class c ON c.oid = tree.oid
        """,
        (oid, kind),
    ).fetchall()
    columns = conn.execute(
        "SELECT attnum, attname, atttypid, format_type(atttypid, atttypmod), attisdropped "
        "FROM pg_attribute WHERE attrelid = %s AND attnum > 0",
        (oid,),
    ).fetchall()
    return _TableShape(
        name=(str(row[0]), str(row[1])),
        kind=kind,
        files=frozenset((int(str(o)), int(str(f))) for o, f in files),
        columns={
            int(str(n)): _Column(str(a), int(str(t)), str(f), bool(d)) for n, a, t, f, d in columns
        },
    )


def _changes(
    relation: Relation, then: _TableShape, now: _TableShape
) -> tuple[list[str], dict[str, str]]:
    """What changed from the snapshot's view of the table (``then``) to the locked table
    (``now``): the changes that leave its rows unreadable, and the published columns
    dropped (their type names), which the copy reads as NULL."""
    problems: list[str] = []
    if now.name != then.name:
        problems.append(f"it was renamed to {'.'.join(now.name)}")
    if {o for o, _ in now.files} != {o for o, _ in then.files}:
        problems.append("partitions were attached or detached")
    identity_keys = {c.name for c in relation.columns if c.is_key}
    keys = set() if relation.replica_identity == "f" else identity_keys
    attnums = {c.name: n for n, c in then.columns.items() if not c.dropped}
    nulls: dict[str, str] = {}
    for column in relation.columns:
        attnum = attnums[column.name]
        was, is_ = then.columns[attnum], now.columns.get(attnum)
        if is_ is None or is_.dropped:
            if column.name in keys:
                problems.append(f"its key column {column.name!r} was dropped")
            else:
                nulls[column.name] = was.type_name
        elif is_.name != was.name:
            problems.append(f"column {was.name!r} was renamed to {is_.name!r}")
        elif is_.type_oid != was.type_oid:
            problems.append(
                f"column {was.name!r} changed its type from {was.type_name} to {is_.type_name}"
            )
    added = [n for n, c in now.columns.items() if not c.dropped and n not in then.columns]
    if added and now.files != then.files:
        # An ADD COLUMN with a volatile default writes every row anew, in its own
        # transaction: the older snapshot sees the table empty.
        problems.append("it was rewritten by ALTER TABLE (a column added to every row)")
    return problems, nulls
