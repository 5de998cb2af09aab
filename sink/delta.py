"""``DeltaSink``: executes batch plans against Delta tables through a Spark session.

Theory of operation
-------------------
``apply`` plans the batch (``plan.py``, pure), then for every table, in the order the batch
first touches them:

1. Makes sure the table exists. A table is created at ``<path>/<schema>/<table>``
   (``naming.table_path``: characters engines would re-encode are escaped) from
   the columns of its first relation in the batch (a merge step's, or a TRUNCATE's when
   the batch only truncates it) plus the metadata columns by writing an empty DataFrame
   with save mode ``ignore`` (a no-op when the table exists). Sail (0.7) rejects
   ``CREATE TABLE delta.`path``` and ``ALTER TABLE ... ADD COLUMNS``, so this and the
   column additions below are plain DataFrame-writer calls that Sail and Spark+Delta
   both accept. The table's columns and types are cached after the first look, so steady
   state costs nothing.
2. Runs the plan's steps in order: a TRUNCATE becomes a DELETE (or, with soft deletes, a
   flagging MERGE) of rows at or below its LSN; a merge step ships its rows to Spark as
   one Arrow table with an explicit schema (``createDataFrame``), registers it as a
   temporary view and runs the step's MERGE. Target columns the step's relation does not
   have (dropped in PostgreSQL, or left out of a column list) stay in Delta: the rows it
   updates keep their value there, the rows it inserts hold NULL.
   When rows keep unchanged-TOAST columns, a count query first finds those whose value
   exists nowhere in the target; they are not inserted (the MERGE excludes them), but
   counted and logged.

Before a merge step whose relation differs from the last one applied to the table, the
table follows the relation (``evolution.evolve``; renames and type changes stop here,
before any row of the new shape is written). New columns without a fast default are
appended with ``mergeSchema`` and an empty DataFrame (a metadata-only commit). New
columns with one - the value PostgreSQL shows in every row that existed before, read from
the source catalog - are added by overwriting the table with itself plus the filled
columns (``sql.render_added_columns_select``): one commit adds and backfills, so a crash
cannot separate them, and after a restart the column is simply there. A dropped column
whose name came back is reset in the rows written before the step.

Tables whose relation gives no key (REPLICA IDENTITY FULL, NOTHING) are matched on the
configured key, else on the primary key the source catalog reports (looked up once per
Relation message), else on every column (FULL) or the insert's position (NOTHING).

Every statement is one Delta commit. ``apply`` returns after the last one, so the whole
batch is durable (invariant 1). A failure part-way leaves earlier commits in place; the
batch is replayed after a restart and the LSN guard makes that harmless (invariant 2).

Errors from the engine are translated at this boundary (``spark.engine_errors``).

Snapshot markers: ``DeltaSink`` also records, per replication slot, whether the initial
snapshot of the tables finished (``capture.snapshot.SnapshotMarkerStore``), in a small Delta
table ``<path>/_wal2delta_snapshots`` next to the data it describes, so a lake copied or
restored elsewhere carries its own snapshot state.

Where the parts live: Arrow sources in ``arrow.py``; table creation, the schema cache and
partition checks in ``tables.py``; the bookkeeping tables (snapshot markers, column
origins, messages) in ``bookkeeping.py``; schema-change execution in ``follow.py``; this
module runs the plan's steps.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pyarrow as pa
import structlog

from decoder import (
    Change,
    ColumnKind,
    ColumnValue,
    Lsn,
    PgTimestamp,
    Relation,
    RowChange,
    TruncateChange,
    TupleData,
    TypeDescription,
    ValueDecoder,
    pg_timestamp_to_datetime,
)
from sink.arrow import (
    ArrowColumn,
    arrow_table,
    ddl,
    keyless_source_table,
    keyless_touch_table,
    metadata_columns,
    plan_column,
    source_table,
)
from sink.base import Batch, BatchResult, SinkDataError, SinkError
from sink.bookkeeping import Bookkeeping, SnapshotMarkerLike, SnapshotRecord
from sink.bulk import BulkTarget, bulk_table, frame_columns
from sink.commits import CommitLog, commits_path
from sink.compaction import Compactor
from sink.constants import REJECTS_TABLE
from sink.convert import column_converter
from sink.deltars import DeltaRsAppender
from sink.evolution import (
    SourceCatalog,
)
from sink.follow import RelationFollower
from sink.history import HistoryWriter, history_name
from sink.keyless import (
    NO_POSITION,
    Candidate,
    FoldedStep,
    KeylessStep,
    Position,
    assign_takes,
    fold,
)
from sink.naming import table_path
from sink.partitioning import BucketFilter, bucket_filter, bucket_of, bucket_values, bucketed_column
from sink.plan import MergePlan, MergeStep, TruncateStep, plan_batch
from sink.rejects import RejectsLog, TableReject
from sink.settings import KeyBuckets, SinkSettings
from sink.sources import SourceFiles
from sink.spark import engine_errors, is_embedded
from sink.sql import (
    ANOMALY_COUNT,
    KEYLESS_KIND,
    WANTED_COUNT,
    WANTED_VALUE,
    MetadataColumns,
    delta_table,
    quote,
    render_keyless_candidates,
    render_keyless_merge,
    render_merge,
    render_missing_row_ids_count,
    render_row_id_backfill,
    render_toast_anomaly_count,
    render_truncate,
    truncate_columns,
)
from sink.tables import LakeTables, TableState
from sink.typemap import BIGINT, BOOLEAN, TIMESTAMP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("wal2delta.sink")


class DeltaSink:
    """Applies batches to Delta tables at ``settings.path`` through ``spark``.

    The session belongs to the caller (``create_spark_session``); ``close`` does not stop
    it. One sink instance is used by one thread at a time (the sink worker).

    ``catalog`` (optional) reads the source catalog: fast defaults of added columns, the
    evidence that tells a renamed last column from a dropped one, primary keys for
    REPLICA IDENTITY FULL and NOTHING tables, and the layout of user-defined column types
    sent in binary. Without it, added columns are NULL in existing rows, only renames of a
    column that is not the last are detected, such tables match on every column (FULL) or
    on the insert's position (NOTHING) unless ``settings.keys`` names a key, and a binary
    value of a user-defined type is a ``SinkDataError``. The catalog is the caller's to
    close.
    """

    def __init__(
        self, spark: SparkSession, settings: SinkSettings, catalog: SourceCatalog | None = None
    ) -> None:
        self._spark = spark
        self._settings = settings
        self._catalog = catalog
        self._meta = MetadataColumns.from_settings(settings)
        # User types in binary mode are described from the catalog (decoder.usertypes), on
        # the first relation that has one.
        self._decoder = ValueDecoder(self._describe_type if catalog is not None else None)
        self._primary_keys: dict[Relation, tuple[str, ...]] = {}
        # The embedded engine reads MERGE sources from local files (sources.py).
        files = SourceFiles() if is_embedded(spark) and not settings.inline_sources else None
        self._lake = LakeTables(spark, self._meta, files)
        self._bookkeeping = Bookkeeping(spark, self._lake, settings.path, self._meta)
        self._history = HistoryWriter(spark, self._lake, settings.path, self._meta)
        self._rejects = RejectsLog(spark, self._lake, settings.path, self._meta)
        self._rejects_lock = threading.Lock()
        self._commits = CommitLog(spark, self._lake, settings.path)
        self._appender = DeltaRsAppender(settings.bulk_writer)
        self._engine_appends: dict[str, threading.Lock] = {}
        self._engine_appends_guard = threading.Lock()
        self._compactor = Compactor(settings.compact_after_writes)
        self._follower = RelationFollower(
            spark,
            self._lake,
            bookkeeping=self._bookkeeping,
            settings=settings,
            catalog=catalog,
            decoder=self._decoder,
        )

    # --- Sink protocol ---------------------------------------------------------------------

    def apply(self, batch: Batch) -> BatchResult:
        """Apply every change of ``batch``; return once all of it is committed in Delta.

        Raises:
            SinkDataError: a change cannot be written (type, identity, column name).
            SinkRetryableError: the engine was unreachable or a concurrent commit
                conflicted; replaying the batch is safe.
            SinkError: any other engine failure.
        """
        started = time.monotonic()
        self._compactor.compact_due()  # a caller that never calls after_apply still compacts
        plan = plan_batch(
            batch,
            keys=self._settings.keys,
            reserved_columns=self._meta.reserved,
            decoder=self._decoder,
            primary_key=self._primary_key if self._catalog is not None else None,
            on_missing_key=self._settings.on_missing_key,
            column_names=self._settings.column_names,
            history=self._settings.history,
            columnar=True,
            column_types=self._settings.column_types,
            on_unrepresentable=self._settings.unrepresentable_policy,
        )
        self._commits.begin(batch)
        anomalies = 0
        written: dict[str, str] = {}
        seconds: dict[str, float] = {}
        anomalies_by_table: dict[str, int] = {}
        for table in plan.tables:
            table_started = time.monotonic()
            table_anomalies = self._apply_table(table)
            written[table.qualified_name] = table_path(
                self._settings.path, table.schema, table.table
            )
            if (history := self._history.write(table)) is not None:
                written[history_name(table.qualified_name)] = history
            seconds[table.qualified_name] = time.monotonic() - table_started
            if table_anomalies:
                anomalies_by_table[table.qualified_name] = table_anomalies
            anomalies += table_anomalies
        if plan.messages and self._settings.messages_table:
            self._bookkeeping.write_messages(plan.messages)
        rejects = [TableReject(t.qualified_name, r) for t in plan.tables for r in t.rejects]
        if self._rejects.append(rejects):
            written[REJECTS_TABLE] = self._rejects.path
        self._commits.record(batch, written)
        if written:
            self._compactor.wrote([*written.values(), commits_path(self._settings.path)])
        return BatchResult(
            rows_by_table={table.qualified_name: dict(table.counts) for table in plan.tables},
            toast_anomalies=anomalies,
            duration_seconds=time.monotonic() - started,
            seconds_by_table=seconds,
            toast_anomalies_by_table=anomalies_by_table,
            unrepresentable=dict(
                Counter((r.table, r.reject.column, r.reject.reason.value) for r in rejects)
            ),
        )

    def after_apply(self) -> None:
        """Compact the tables due after the batch just applied (``sink/compaction.py``).

        Called by the sink worker once the batch is reported durable (``DeferringSink``);
        ``apply`` does it first otherwise. A failure only logs a warning.
        """
        self._compactor.compact_due()

    def settle(self) -> None:
        """Do what ``apply`` deferred: compactions still due, and the records waiting for
        the next batch's intent.

        Called by the sink worker once it has been idle for a moment (``DeferringSink``). A
        failure only logs a warning: the records wait for the next append.
        """
        self._compactor.compact_due()
        self._write_deferred_records()

    def _write_deferred_records(self) -> None:
        try:
            self._commits.flush()
        except SinkError as exc:
            log.warning("writing the commit log failed; it is tried again", error=str(exc))

    def close(self) -> None:
        """Write the deferred records, then forget cached table schemas (and remove the
        directory of MERGE source files, ``sources.py``).

        No compaction: a worker that outlived its stop may still be applying a batch, and
        a compaction due waits for the next process. The Spark session and the catalog
        stay open.
        """
        self._write_deferred_records()
        self._lake.clear()
        self._primary_keys.clear()
        self._bookkeeping.clear()
        self._history.clear()
        self._rejects.clear()
        self._commits.clear()
        self._compactor.clear()

    def _describe_type(self, type_oid: int) -> TypeDescription | None:
        """A user type's description from the catalog (``ValueDecoder`` caches it per OID)."""
        assert self._catalog is not None
        return self._catalog.describe_type(type_oid)

    def _primary_key(self, relation: Relation) -> tuple[str, ...]:
        """The table's primary key from the catalog, once per Relation message."""
        key = self._primary_keys.get(relation)
        if key is None:
            assert self._catalog is not None
            described = self._catalog.table(relation.schema_name, relation.relation_name)
            key = self._primary_keys[relation] = described.primary_key if described else ()
        return key

    # --- snapshot markers (capture.snapshot.SnapshotMarkerStore) ---------------------------

    def load_snapshot_marker(self, slot: str) -> SnapshotRecord | None:
        """The recorded snapshot state of ``slot``, or None (``bookkeeping.py``).

        Raises:
            SinkError: the markers table could not be read.
        """
        return self._bookkeeping.load_snapshot_marker(slot)

    def save_snapshot_marker(self, marker: SnapshotMarkerLike) -> None:
        """Record the snapshot state of ``marker.slot``, replacing any earlier record.

        Raises:
            SinkError: the marker could not be written.
        """
        self._bookkeeping.save_snapshot_marker(marker)

    # --- initial snapshot: bulk appends (bulk.py) ------------------------------------------

    def begin_bulk(
        self, relation: Relation, lsn: Lsn, commit_time: PgTimestamp
    ) -> BulkTarget | None:
        """Prepare ``relation``'s table for the snapshot's appends; None when it cannot take them.

        The table is created, truncated at ``lsn`` and made to follow the relation exactly
        as the MERGE path's first snapshot batch does. None - copy through ``apply`` - when
        an append could differ from a MERGE of the same rows: the table still holds rows
        (soft deletes keep truncated rows), its key is a configured one (nothing makes it
        unique), or it has columns the relation lacks.

        Raises:
            SinkDataError, SinkRetryableError, SinkError: as ``apply``.
        """
        name = relation.qualified_name
        flagged = any(c.is_key for c in relation.columns)
        if (relation.replica_identity == "f" or not flagged) and self._settings.keys.get(name):
            return None
        history = self._settings.history
        if history is True or (not isinstance(history, bool) and name in history):
            return None  # its change history records the copied rows as inserts
        null = ColumnValue(ColumnKind.NULL)
        changes: tuple[Change, ...] = (
            TruncateChange(
                relations=(relation,),
                cascade=False,
                restart_identity=False,
                commit_lsn=lsn,
                commit_time=commit_time,
                ordinal=0,
            ),
            RowChange(
                op="insert",
                relation=relation,
                new=TupleData((null,) * len(relation.columns)),
                old=None,
                old_kind=None,
                commit_lsn=lsn,
                commit_time=commit_time,
                ordinal=1,
            ),
        )
        plan = plan_batch(
            Batch(changes, durable_lsn=None, transaction_count=0, last_commit_time=None),
            keys=self._settings.keys,
            reserved_columns=self._meta.reserved,
            decoder=self._decoder,
            primary_key=self._primary_key if self._catalog is not None else None,
            on_missing_key=self._settings.on_missing_key,
            column_names=self._settings.column_names,
            column_types=self._settings.column_types,
        ).tables[0]
        truncate, step = plan.steps
        assert isinstance(truncate, TruncateStep)
        assert not isinstance(step, TruncateStep)
        spec = self._settings.key_buckets.get(name)
        if spec is not None and isinstance(step, KeylessStep):
            return None  # the MERGE path raises the error that names the fix
        path, state = self._prepare_table(plan)
        target = delta_table(path)
        try:
            # A table without rows (one created just now) has nothing to truncate.
            held_rows = self._holds_rows(name, target)
            if held_rows:
                self._truncate(name, target, truncate, state)
            self._follower.follow(plan, path, state, step, plan.relations[1])
        except BaseException:
            state.stale = True
            raise
        # Appended rows have no keyless floor or row-identity check behind them yet.
        state.row_ids_complete = False
        state.keyless_floor = None
        meta = self._meta
        row_ids = step.identity == "row"
        metadata = metadata_columns(meta, row_ids=row_ids)
        bucket: tuple[str, int, int] | None = None
        if spec is not None and state.partition_column is not None:
            assert isinstance(step, MergeStep)
            bucket = (state.partition_column, bucketed_column(name, step, spec), spec.width)
            metadata.append(ArrowColumn(state.partition_column, BIGINT.spark_sql, BIGINT.arrow))
        frame = frame_columns(step.columns, metadata)
        if set(state.columns) != {c.name for c in frame}:
            return None
        if held_rows and self._holds_rows(name, target):
            return None
        return BulkTarget(
            table=name,
            path=path,
            columns=step.columns,
            converters=tuple(
                column_converter(c, ColumnKind.TEXT, self._decoder) for c in step.columns
            ),
            frame=frame,
            lsn=lsn,
            commit_time=pg_timestamp_to_datetime(commit_time),
            lsn_column=meta.lsn,
            commit_time_column=meta.commit_time,
            ordinal=meta.ordinal,
            deleted=meta.deleted if meta.soft_delete else None,
            row_ids=(meta.row_lsn, meta.row_ordinal) if row_ids else None,
            bucket=bucket,
            key_indexes=step.match_indexes
            if isinstance(step, MergeStep) and step.identity == "key"
            else None,
            on_unrepresentable=self._settings.unrepresentable_policy(name),
            decoder=self._decoder,
        )

    def _holds_rows(self, table: str, target: str) -> bool:
        """Whether the Delta table ``target`` has any row (soft-deleted ones too)."""
        with engine_errors(f"reading {table}"):
            return bool(self._spark.sql(f"SELECT 1 AS one FROM {target} LIMIT 1").collect())

    def finish_bulk(self, targets: Sequence[BulkTarget]) -> None:
        """Record the appended tables' Delta versions in the commit log, as ``apply`` does.

        Raises:
            SinkRetryableError, SinkError: as ``apply``.
        """
        if targets:
            done = Batch((), durable_lsn=None, transaction_count=0, last_commit_time=None)
            self._commits.record(done, {t.table: t.path for t in targets})

    def append_bulk(
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
        if self._appender.append(target.path, arrow, partitions, action):
            return rows
        with self._engine_append_lock(target.path), engine_errors(action):
            frame = self._spark.createDataFrame(arrow, schema=ddl(target.frame))
            writer = frame.write.format("delta").mode("append")
            if target.bucket is not None:
                writer = writer.partitionBy(target.bucket[0])
            writer.save(target.path)
        return rows

    def _engine_append_lock(self, path: str) -> threading.Lock:
        """The lock that serialises the engine's appends to the table at ``path``."""
        with self._engine_appends_guard:
            return self._engine_appends.setdefault(path, threading.Lock())

    # --- tables ----------------------------------------------------------------------------

    def _apply_table(self, plan: MergePlan) -> int:
        path, state = self._prepare_table(plan)
        target = delta_table(path)
        anomalies = 0
        try:
            messages = plan.relations or (None,) * len(plan.steps)
            for step, message in zip(plan.steps, messages, strict=True):
                if isinstance(step, TruncateStep):
                    self._truncate(plan.qualified_name, target, step, state)
                elif isinstance(step, KeylessStep):
                    self._follower.follow(plan, path, state, step, message)
                    self._merge_keyless(plan.qualified_name, path, step, state)
                elif step.row_count:
                    state.row_ids_complete = False
                    self._follower.follow(plan, path, state, step, message)
                    anomalies += self._merge(plan.qualified_name, path, step, state)
        except BaseException:
            # A failed schema change may or may not have committed: read the schema again
            # before the batch is replayed.
            state.stale = True
            raise
        if plan.skipped:
            log.warning(
                "changes without identity skipped",
                table=plan.qualified_name,
                change_count=plan.skipped,
                reason="on_missing_key is skip",
            )
        return anomalies

    def _prepare_table(self, plan: MergePlan) -> tuple[str, TableState]:
        """The table's location and state; created (and given missing columns) when new."""
        path = table_path(self._settings.path, plan.schema, plan.table)
        state = self._lake.state(path)
        if state is None or state.stale:
            # A new table gets the columns of its first relation, also when the batch only
            # truncates it (the TRUNCATE's relation is then in ``plan.columns``).
            first = next((s for s in plan.steps if not isinstance(s, TruncateStep)), None)
            data = [plan_column(c) for c in (first.columns if first is not None else plan.columns)]
            wanted = data + metadata_columns(self._meta, row_ids=plan.uses_row_ids)
            spec = self._settings.key_buckets.get(plan.qualified_name)
            partition = self._meta.key_bucket if spec is not None else None
            if partition is not None:
                wanted.append(ArrowColumn(partition, BIGINT.spark_sql, BIGINT.arrow))
            relation = state.relation if state is not None else None
            state = self._lake.load(
                path, plan.qualified_name, wanted, data=True, partition=partition
            )
            state.relation = relation
            try:
                self._lake.check_partitioning(plan.qualified_name, state, spec)
            except SinkDataError:
                self._lake.forget(path)  # checked again, never skipped, on the next batch
                raise
            # A table written before soft deletes were switched on lacks their flag.
            missing = [c for c in wanted if c.name not in state.columns and c not in data]
            self._lake.add_columns(path, plan.qualified_name, state, missing)
        return path, state

    # --- steps -----------------------------------------------------------------------------

    def _truncate(self, table: str, target: str, step: TruncateStep, state: TableState) -> None:
        with engine_errors(f"truncating {table}"):
            if not self._meta.soft_delete:
                self._lake.sql(render_truncate(step.lsn, self._meta, target=target, view=""))
                return
            lsn_name, time_name = truncate_columns(self._meta)
            columns = [
                ArrowColumn(lsn_name, BIGINT.spark_sql, BIGINT.arrow),
                ArrowColumn(time_name, TIMESTAMP.spark_sql, TIMESTAMP.arrow),
            ]
            arrow = pa.table(
                {
                    lsn_name: pa.array([step.lsn], BIGINT.arrow),
                    time_name: pa.array([step.commit_time], TIMESTAMP.arrow),
                }
            )
            ordinal = step.ordinal if self._meta.ordinal in state.columns else None
            with self._lake.view(arrow, columns) as view:
                self._lake.sql(
                    render_truncate(step.lsn, self._meta, target=target, view=view, ordinal=ordinal)
                )

    def _merge(self, table: str, path: str, step: MergeStep, state: TableState) -> int:
        target = delta_table(path)
        columns, arrow = self._source_table(table, step)
        buckets: BucketFilter | None = None
        spec = self._settings.key_buckets.get(table)
        if spec is not None and state.partition_column is not None:
            index = bucketed_column(table, step, spec)
            if not state.buckets_checked:
                self._check_bucket_width(table, target, step.columns[index].name, spec)
                state.buckets_checked = True
            values = bucket_values(step, index, spec.width)
            partition = ArrowColumn(state.partition_column, BIGINT.spark_sql, BIGINT.arrow)
            arrow = arrow.append_column(partition.name, values)
            columns = [*columns, partition]
            buckets = bucket_filter(partition.name, values)
        anomalies = 0
        with engine_errors(f"merging into {table}"), self._lake.view(arrow, columns) as view:
            count_query = render_toast_anomaly_count(
                step, self._meta, target=target, view=view, buckets=buckets
            )
            if count_query is not None:
                anomalies = self._lake.count(count_query, ANOMALY_COUNT)
            merge = render_merge(
                step,
                self._meta,
                target=target,
                view=view,
                buckets=buckets,
            )
            self._lake.sql(merge)
        if anomalies:
            log.warning(
                "toast value missing in target",
                table=table,
                key_columns=[c.name for c in step.match_columns],
                row_count=anomalies,
            )
        return anomalies

    # --- tables without a key (keyless.py) -------------------------------------------------

    def _merge_keyless(self, table: str, path: str, step: KeylessStep, state: TableState) -> None:
        """Apply a keyless step: fold it after the table's floor, assign its takes, MERGE."""
        if table in self._settings.key_buckets:
            raise SinkDataError(
                f"sink.partition_by_key lists {table}, but it has no key (REPLICA IDENTITY "
                "FULL without a primary key or configured key); partition only tables with "
                "a primary key, replica identity index or configured key"
            )
        target = delta_table(path)
        if not state.row_ids_complete:
            self._complete_row_ids(table, path, state)
        if state.keyless_floor is None:
            state.keyless_floor = self._newest_stamp(table, target)
        folded = fold(step, state.keyless_floor)
        if folded.takes or folded.touches:
            self._merge_folded(table, target, folded)
        elif folded.new_rows:
            self._append_new_rows(table, path, folded)
        state.keyless_floor = max(state.keyless_floor, step.last_position)

    def _append_new_rows(self, table: str, path: str, folded: FoldedStep) -> None:
        """Insert-only after the floor: no new row's identity can be in the table yet.

        A row inserted after the floor and still there would carry a stamp newer than the
        floor; so a plain append (one commit, no join with the table) is exact here.
        """
        columns, arrow = keyless_source_table(table, folded, [], self._meta)
        columns, arrow = columns[:-1], arrow.drop_columns([KEYLESS_KIND])
        if self._meta.soft_delete:
            columns.append(ArrowColumn(self._meta.deleted, BOOLEAN.spark_sql, BOOLEAN.arrow))
            arrow = arrow.append_column(
                self._meta.deleted, pa.array([False] * arrow.num_rows, BOOLEAN.arrow)
            )
        with engine_errors(f"appending to {table}"):
            frame = self._spark.createDataFrame(arrow, schema=ddl(columns))
            frame.write.format("delta").mode("append").save(path)

    def _merge_folded(self, table: str, target: str, folded: FoldedStep) -> None:
        assigned = self._assign_takes(table, target, folded) if folded.takes else []
        columns, arrow = keyless_source_table(table, folded, assigned, self._meta)
        with ExitStack() as views:
            views.enter_context(engine_errors(f"merging into {table}"))
            view = views.enter_context(self._lake.view(arrow, columns))
            touch_view: str | None = None
            if folded.touches:
                touch_columns, touches = keyless_touch_table(table, folded, self._meta)
                touch_view = views.enter_context(self._lake.view(touches, touch_columns))
            self._lake.sql(
                render_keyless_merge(
                    folded, self._meta, target=target, view=view, touch_view=touch_view
                )
            )
        missing = assigned.count(None)
        if missing:
            # What PostgreSQL's apply worker logs as "did not find row": a row Delta never
            # held (replays end at the floor and never get here).
            log.warning(
                "keyless change found no equal row",
                table=table,
                change_count=missing,
                consequence="the change was skipped, as PostgreSQL's subscriber skips it",
            )

    def _newest_stamp(self, table: str, target: str) -> Position:
        """The newest (LSN, ordinal) stamp in the table: where replayed changes end."""
        meta = self._meta
        query = (
            f"SELECT {quote(meta.lsn)} AS l, {quote(meta.ordinal)} AS o FROM {target} "
            f"ORDER BY l DESC, o DESC LIMIT 1"
        )
        with engine_errors(f"reading the newest change applied to {table}"):
            rows = self._spark.sql(query).collect()
        if not rows:
            return NO_POSITION
        return (int(rows[0]["l"]), int(rows[0]["o"]))

    def _assign_takes(self, table: str, target: str, step: FoldedStep) -> list[Candidate | None]:
        """Read the candidate rows of the step's takes and assign one to each take."""
        wanted = step.taken_values()
        specs = [
            ArrowColumn(WANTED_VALUE, BIGINT.spark_sql, BIGINT.arrow),
            *(plan_column(c) for c in step.columns),
            ArrowColumn(WANTED_COUNT, BIGINT.spark_sql, BIGINT.arrow),
        ]
        arrays: list[list[object]] = [list(range(len(wanted)))]
        arrays += [[value[i] for value, _ in wanted] for i in range(len(step.columns))]
        arrays.append([count for _, count in wanted])
        arrow = arrow_table(table, specs, arrays)
        meta = self._meta
        with (
            engine_errors(f"finding the rows of {table} its changes take"),
            self._lake.view(arrow, specs) as view,
        ):
            rows = self._spark.sql(
                render_keyless_candidates(step, meta, target=target, view=view)
            ).collect()
        candidates: list[list[Candidate]] = [[] for _ in wanted]
        for row in rows:
            candidates[int(row[WANTED_VALUE])].append(
                Candidate(
                    int(row[meta.row_lsn]),
                    int(row[meta.row_ordinal]),
                    int(row[meta.lsn]),
                    int(row[meta.ordinal]),
                )
            )
        return assign_takes(step.takes, candidates)

    def _complete_row_ids(self, table: str, path: str, state: TableState) -> None:
        """Give rows written without a keyless identity one, in one commit (see sql.py)."""
        target = delta_table(path)
        with engine_errors(f"checking the row identities of {table}"):
            missing = self._lake.count(
                render_missing_row_ids_count(self._meta, target=target), ANOMALY_COUNT
            )
        if missing:
            with engine_errors(f"giving the rows of {table} an identity"):
                query = render_row_id_backfill(list(state.columns), self._meta, target=target)
                self._spark.sql(query).write.format("delta").mode("overwrite").save(path)
            log.info("keyless row identities filled", table=table, row_count=missing)
        state.row_ids_complete = True

    def _check_bucket_width(self, table: str, target: str, key: str, spec: KeyBuckets) -> None:
        """Compare one stored row's bucket with the configured width (once per process).

        Rows bucketed with another width sit in partitions a MERGE would not look in, and
        would be duplicated instead of updated.
        """
        bucket = quote(self._meta.key_bucket)
        query = (
            f"SELECT {quote(key)} AS k, {bucket} AS b FROM {target} "
            f"WHERE {bucket} IS NOT NULL LIMIT 1"
        )
        with engine_errors(f"reading a key bucket of {table}"):
            rows = self._spark.sql(query).collect()
        if rows and bucket_of(int(rows[0]["k"]), spec.width) != int(rows[0]["b"]):
            raise SinkDataError(
                f"the Delta table of {table} is partitioned by key ranges of another width "
                f"than sink.partition_by_key.{table}.width ({spec.width}): key "
                f"{rows[0]['k']} is in bucket {rows[0]['b']}; restore the width the table "
                "was written with"
            )

    def _source_table(self, table: str, step: MergeStep) -> tuple[list[ArrowColumn], pa.Table]:
        """Build the MERGE source of ``step`` as Arrow, in ``source_columns`` order."""
        return source_table(table, step, self._meta)

    # --- messages --------------------------------------------------------------------------
