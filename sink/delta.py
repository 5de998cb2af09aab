"""``DeltaSink``: orders the work of a batch; the rules live in the modules it calls.

Theory of operation
-------------------
``apply`` is the sink's ``apply_dispatch`` (docs/architecture.md, The sink's shape):

0. Gives back the changes held from earlier batches and holds back those of tables that
   change a little (``holdback.py``, only with ``sink.table_min_rows``).
1. Plans the batch (``fold.plan_batch``, pure: ``plan.py`` the plan's types, ``shape.py``
   each relation's columns and identity, ``fold.py`` the fold), with the one
   ``PlanOptions`` built from the settings when the sink is made.
2. Opens the commit log's intent (``commits.py``).
3. For every table - up to ``sink.concurrency`` tables at once, each table's work on one
   thread (``_apply_tables``) - makes sure the table exists
   with its relation's columns and the metadata columns (``_prepare_table``, through the
   lake port ``tables.LakeTables``), then hands each step, in order, to the executor of its
   kind - ``step_truncate``, ``step_keyed`` (MERGE), ``step_keyless`` - after the table
   follows the step's relation (``follow.py``: added, reset and renamed columns, type
   changes refused before any row of the new shape is written); then the table's change
   history (``history.py``).
4. Writes the logical decoding messages (``bookkeeping.py``) and the values stored under a
   convention (``rejects.py``), records the batch in the commit log, and tells the
   compactor which tables it wrote (``compaction.py``).

Every engine call goes through the lake port, and every statement is one Delta commit.
``apply`` returns after the last one of every table, so the whole batch is durable
(invariant 1). A failure part-way leaves other commits in place (the other tables of the
batch finish theirs); the batch is replayed after a restart and the
LSN guard makes that harmless (invariant 2). Engine errors are translated at the port's
callers (``spark.engine_errors``).

The initial snapshot's bulk path: ``begin_bulk`` prepares a table exactly as the MERGE
path's first batch would (``fold.plan_copy``: the copy's TRUNCATE and the relation's
shape), and ``append_bulk`` hands copied rows to ``step_bulk``. Snapshot markers - per slot,
whether the snapshot finished - are kept in ``<path>/_wal2delta_snapshots`` next to the
data they describe (``bookkeeping.py``), so a lake copied or restored elsewhere carries its
own snapshot state.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import structlog

from decoder import (
    ColumnKind,
    Lsn,
    PgTimestamp,
    Relation,
    TypeDescription,
    ValueDecoder,
    pg_timestamp_to_datetime,
)
from sink.base import (
    Batch,
    BatchResult,
    CopyTarget,
    SinkDataError,
    SinkError,
    SnapshotMarker,
    WrittenTimeline,
)
from sink.constants import REJECTS_TABLE
from sink.copies.bulk import BulkTarget, frame_columns
from sink.copies.copies import TableCopies
from sink.copies.step_bulk import BulkAppendExecutor
from sink.engine.arrow import (
    ArrowColumn,
    metadata_columns,
    plan_column,
)
from sink.engine.deadline import engine_call
from sink.engine.sources import SourceFiles
from sink.engine.spark import engine_errors, is_embedded
from sink.engine.sql import delta_table, render_select_all
from sink.lake.adoption import StagedFileAdopter, remove_directory, remove_stale_staging
from sink.lake.deltars import DeltaRsAppender, is_delta_table
from sink.lake.layout import table_properties
from sink.lake.tables import LakeTables, TableState
from sink.planning.evolution import (
    SourceCatalog,
)
from sink.planning.fold import plan_batch, plan_copy
from sink.planning.holdback import HeldChanges
from sink.planning.partitioning import bucketed_column
from sink.planning.plan import (
    KeylessStep,
    MergePlan,
    MergeStep,
    PlanOptions,
    Step,
    TruncateStep,
)
from sink.planning.replays import ReplayHorizon
from sink.records.bookkeeping import Bookkeeping
from sink.records.commits import CommitLog, commits_path
from sink.records.history import HistoryWriter, history_name
from sink.records.rejects import RejectsLog, TableReject
from sink.settings import SinkSettings
from sink.steps.executor import NOTHING_WRITTEN, WRITE_KINDS, StepOutcome, TableTarget, WriteKind
from sink.steps.follow import RelationFollower
from sink.steps.step_append import KeyedAppendExecutor, appends
from sink.steps.step_keyed import KeyedMergeExecutor, KeyedSources
from sink.steps.step_keyless import KeylessMergeExecutor
from sink.steps.step_truncate import TruncateExecutor
from sink.upkeep.compaction import UPKEEP_BUDGET_SECONDS, Compactor
from sink.values.convert import column_converter
from sink.values.naming import staging_path, table_path
from sink.values.typemap import BIGINT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("wal2delta.sink")


@dataclass(frozen=True, slots=True)
class _TableOutcome:
    """What applying one table of a batch did."""

    anomalies: int
    """Unchanged-TOAST rows found missing in the target."""
    history: str | None
    """The location of the change history it appended to, if any."""
    seconds: float
    """Wall time of its steps and history."""
    writes: Counter[WriteKind]
    """The Delta writes its steps made, by kind (``executor.WriteKind``)."""


class DeltaSink:
    """Applies batches to Delta tables at ``settings.path`` through ``spark``.

    The session belongs to the caller (``create_spark_session``); ``close`` does not stop
    it. The sink worker applies batches and runs upkeep; the online copier's thread copies
    tables at the same time (``start_copies``, ``begin_copy``, ``append_bulk``,
    ``finish_copy``). What writes the tables themselves - a batch, upkeep, a copy that
    starts or replaces its table - takes turns (``_table_writes``).

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
        self._settings = settings
        self._catalog = catalog
        self._meta = settings.metadata
        # User types in binary mode are described from the catalog (decoder.usertypes), on
        # the first relation that has one.
        self._decoder = ValueDecoder(self._describe_type if catalog is not None else None)
        self._primary_keys: dict[Relation, tuple[str, ...]] = {}
        self._plan_options = PlanOptions(
            keys=settings.keys,
            reserved_columns=self._meta.reserved,
            primary_key=self._primary_key if catalog is not None else None,
            on_missing_key=settings.on_missing_key,
            column_names=settings.column_names,
            history=settings.history,
            columnar=True,
            column_types=settings.column_types,
            on_unrepresentable=settings.unrepresentable_policy,
        )
        # The embedded engine reads MERGE sources from local files (sources.py).
        files = SourceFiles() if is_embedded(spark) and not settings.inline_sources else None
        self._lake = LakeTables(spark, self._meta, files)
        self._bookkeeping = Bookkeeping(self._lake, settings.path, self._meta)
        self._history = HistoryWriter(self._lake, settings.path, self._meta)
        self._rejects = RejectsLog(self._lake, settings.path, self._meta)
        self._commits = CommitLog(self._lake, settings.path)
        self._truncates = TruncateExecutor(self._lake, self._meta)
        sources = KeyedSources(self._lake, self._meta, settings.key_buckets)
        self._keyed = KeyedMergeExecutor(self._lake, self._meta, sources)
        self._appends = KeyedAppendExecutor(self._lake, self._meta, sources)
        self._replays = ReplayHorizon(self._commits.newest_high_lsn)
        self._keyless = KeylessMergeExecutor(self._lake, self._meta, settings.key_buckets)
        self._bulk = BulkAppendExecutor(
            self._lake, self._rejects, DeltaRsAppender(settings.bulk_writer)
        )
        self._compactor = Compactor.for_settings(settings, self._lake)
        self._held = HeldChanges(settings.table_min_rows, settings.table_max_age)
        self._copies = TableCopies(self._lake, settings.path)
        self._adopter = StagedFileAdopter() if settings.bulk_writer != "spark" else None
        self._table_writes = threading.RLock()
        """Held by ``apply``, the upkeep, ``start_copies``, ``begin_copy`` and
        ``finish_copy``. A copy that starts waits for the batch in flight: the batch was
        screened before the copy started, and its MERGE - reading the table before the
        copy's commit, committing after it - would fail on the conflict (Sail merges
        without retries). A table is never compacted while its copy replaces it, and the
        relation follower's pending records are never flushed or forgotten by the other
        thread. The rows of a copy are appended to its staging table outside it, so a copy
        runs while batches are applied."""
        self._pool: ThreadPoolExecutor | None = None
        """Threads that apply several tables of a batch at once; made on first need."""
        self._follower = RelationFollower(
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
        with self._table_writes:
            return self._apply(batch)

    def _apply(self, batch: Batch) -> BatchResult:
        started = time.monotonic()
        # A caller that never calls after_apply still compacts.
        self._compactor.compact_due(UPKEEP_BUDGET_SECONDS)
        # Small tables' changes may wait for a later batch (holdback.py); ``batch`` is
        # then what is applied now, without a durable_lsn while changes stay held.
        batch = self._held.admit(self._screened(batch), started)
        plan = plan_batch(batch, self._plan_options, decoder=self._decoder)
        new_tables = self._replays.new_tables(plan.tables)
        self._replays.attempted(plan.tables, self._commits.begin(batch))
        anomalies = 0
        written: dict[str, str] = {}
        seconds: dict[str, float] = {}
        anomalies_by_table: dict[str, int] = {}
        table_writes: Counter[WriteKind] = Counter()
        try:
            outcomes = self._apply_tables(plan.tables, new_tables)
            origins = self._bookkeeping.flush_column_origins()
        except BaseException:
            self._bookkeeping.forget_unwritten_origins()
            raise
        for table, outcome in zip(plan.tables, outcomes, strict=True):
            written[table.qualified_name] = table_path(
                self._settings.path, table.schema, table.table
            )
            if outcome.history is not None:
                written[history_name(table.qualified_name)] = outcome.history
            seconds[table.qualified_name] = outcome.seconds
            if outcome.anomalies:
                anomalies_by_table[table.qualified_name] = outcome.anomalies
            anomalies += outcome.anomalies
            table_writes.update(outcome.writes)
        if plan.messages and self._settings.messages_table:
            self._bookkeeping.write_messages(plan.messages)
        rejects = [TableReject(t.qualified_name, r) for t in plan.tables for r in t.rejects]
        if self._rejects.append(rejects):
            written[REJECTS_TABLE] = self._rejects.path
        self._commits.record(batch, written)
        if written:
            self._compactor.wrote([*written.values(), commits_path(self._settings.path)])
        if origins is not None:
            self._compactor.wrote([origins])  # one small file per batch that adds columns
        return BatchResult(
            rows_by_table={table.qualified_name: dict(table.counts) for table in plan.tables},
            toast_anomalies=anomalies,
            duration_seconds=time.monotonic() - started,
            seconds_by_table=seconds,
            toast_anomalies_by_table=anomalies_by_table,
            unrepresentable=dict(
                Counter((r.table, r.reject.column, r.reject.reason.value) for r in rejects)
            ),
            held_lsn=_earliest(self._held.low_lsn, self._copies.held_lsn),
            held_changes=self._held.count,
            table_writes={kind: table_writes[kind] for kind in WRITE_KINDS if table_writes[kind]},
        )

    def after_apply(self) -> None:
        """Compact the tables due after the batch just applied (``sink/upkeep/compaction.py``),
        for at most ``UPKEEP_BUDGET_SECONDS``; the rest waits for the next batch or
        ``settle``.

        Called by the sink worker once the batch is reported durable (``DeferringSink``);
        ``apply`` does it first otherwise. A failure only logs a warning.
        """
        with self._table_writes:
            self._compactor.compact_due(UPKEEP_BUDGET_SECONDS)

    def settle(self) -> bool:
        """Do what ``apply`` deferred: the records waiting for the next batch's intent,
        then the compactions and vacuums still due, for at most ``UPKEEP_BUDGET_SECONDS``;
        return whether some are still due (the worker settles again while it stays idle).

        Called by the sink worker once it has been idle for a moment (``DeferringSink``). A
        failure only logs a warning: the records wait for the next append.
        """
        with self._table_writes:
            self._write_deferred_records()
            return self._compactor.compact_due(UPKEEP_BUDGET_SECONDS)

    def _screened(self, batch: Batch) -> Batch:
        """``batch`` without the changes of tables being copied while streaming, or those a
        finished copy holds (``copies.py``); no cut while changes are dropped."""
        changes = self._copies.screen(batch.changes)
        if len(changes) == len(batch.changes) and self._copies.held_lsn is None:
            return batch
        return replace(
            batch,
            changes=tuple(changes),
            durable_lsn=batch.durable_lsn if self._copies.held_lsn is None else None,
        )

    def held_deadline(self) -> float | None:
        """When the changes held back for later batches must be applied (``holdback.py``);
        None when none is held."""
        return self._held.deadline

    def discard_held(self) -> None:
        """Forget the changes held back; the server sends them again (never acknowledged).

        Called when a new session starts from the acknowledged position: copies that
        landed take effect now (``copies.py``).
        """
        self._held.discard()
        self._copies.rewound()

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
        self._held.discard()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._lake.clear()
        self._primary_keys.clear()
        self._bookkeeping.clear()
        self._history.clear()
        self._rejects.clear()
        self._commits.clear()
        self._replays.forget()
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

    # --- snapshot markers (base.SnapshotMarkerStore) ---------------------------

    def load_snapshot_marker(self, slot: str) -> SnapshotMarker | None:
        """The recorded snapshot state of ``slot``, or None (``bookkeeping.py``).

        Raises:
            SinkError: the markers table could not be read.
        """
        return self._bookkeeping.load_snapshot_marker(slot)

    def save_snapshot_marker(self, marker: SnapshotMarker) -> None:
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
        return self._bulk_target(relation, lsn, commit_time, None)

    def _bulk_target(
        self, relation: Relation, lsn: Lsn, commit_time: PgTimestamp, staging: str | None
    ) -> BulkTarget | None:
        """Prepare the table (or the ``staging`` table of an online copy) for appends."""
        name = relation.qualified_name
        plan = plan_copy(relation, self._plan_options, self._decoder, lsn, commit_time)
        truncate, step = plan.steps
        assert isinstance(truncate, TruncateStep)
        assert isinstance(step, MergeStep)
        spec = self._settings.key_buckets.get(name)
        if spec is not None and step.identity == "row":
            return None  # the MERGE path raises the error that names the fix
        path, state = self._prepare_table(plan, staging)
        target = delta_table(path)
        try:
            # A table without rows (one created just now) has nothing to truncate.
            held_rows = self._holds_rows(name, target)
            if held_rows:
                self._truncates.apply(TableTarget(name, path, state), truncate)
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

    # --- timelines (base.TimelineStore) ----------------------------------------------------

    def written_timeline(self) -> WrittenTimeline | None:
        """The newest server timeline the lake's batches were streamed on, and the newest
        commit LSN they may have written (``CommitLog.written_timeline``)."""
        with self._table_writes:
            return self._commits.written_timeline()

    def accept_timeline(self, timeline: int) -> None:
        """Record that the lake follows ``timeline`` from now on (``CommitLog``)."""
        with self._table_writes:
            self._commits.accept_timeline(timeline)

    # --- online copies (copies.py, base.OnlineCopySink) -----------------------------------

    def request_copies(self, tables: Sequence[str], reason: str) -> None:
        """Record that ``tables`` are to be copied while streaming (``copies.py``)."""
        self._copies.request(tables, reason)

    def copy_requests(self) -> list[tuple[str, str]]:
        """``(table, reason)`` of every copy requested or interrupted part-way."""
        return [(r.table, r.reason) for r in self._copies.to_copy()]

    def start_copies(self, tables: Sequence[str], reason: str) -> None:
        """Drop the changes of ``tables`` from now on: their copies begin. Waits for the
        batch being applied, if any (``_table_writes``)."""
        with self._table_writes:
            self._copies.start(tables, reason)

    def finish_empty_copy(self, table: str, lsn: Lsn, reason: str) -> None:
        """A requested table is not published at ``lsn``: nothing to copy; done."""
        self._copies.finish(table, lsn, reason)

    def copy_new_tables(self) -> None:
        """From now on, the first change of a table with neither a Delta table nor a copy
        record starts its copy (``copies.py``): called once the initial snapshot is done,
        with ``snapshot.mode: initial``."""
        self._copies.copy_new_tables(self._has_delta_table)

    def _has_delta_table(self, schema: str, table: str) -> bool:
        """Whether ``schema.table`` has a Delta table (this process wrote or read it, or
        its log exists)."""
        path = table_path(self._settings.path, schema, table)
        if self._lake.state(path) is not None:
            return True
        return is_delta_table(path)

    def knows_table(self, schema: str, table: str) -> bool:
        """Whether ``schema.table`` has a Delta table or a copy record."""
        if any(r.table == f"{schema}.{table}" for r in self._copies.records()):
            return True
        return self._has_delta_table(schema, table)

    def abandon_copy(self, table: str, reason: str) -> None:
        """A copy failed: apply the table's changes again until it is retried."""
        self._copies.abandon(table, reason)

    def copy_rewind_due(self) -> bool:
        """A copy landed: the stream must restart from the acknowledged position."""
        return self._copies.rewind_due

    def tables_copying(self) -> list[str]:
        """Tables whose changes are dropped now (copy running or landed, not rewound)."""
        return self._copies.copying()

    def begin_copy(self, relation: Relation, lsn: Lsn, commit_time: PgTimestamp) -> BulkTarget:
        """A fresh staging table for ``relation``'s copy at ``lsn``, for ``append_bulk``.

        Raises:
            SinkDataError: the table cannot be copied by appends (a key-range partitioned
                table without a key).
            SinkRetryableError, SinkError: as ``apply``.
        """
        staging = staging_path(
            self._settings.path, relation.schema_name, relation.relation_name, lsn
        )
        with self._table_writes:  # the relation follower's records are the batches' too
            remove_stale_staging(
                table_path(self._settings.path, relation.schema_name, relation.relation_name)
            )
            target = self._bulk_target(relation, lsn, commit_time, staging)
        if target is None:
            raise SinkDataError(
                f"{relation.qualified_name} cannot be copied while streaming: its rows "
                "cannot be appended as they are (a key-range partitioned table needs a key)"
            )
        return target

    def finish_copy(self, relation: Relation, target: CopyTarget, lsn: Lsn, reason: str) -> None:
        """Replace the table by its copy in one commit; from the stream's next rewind on,
        its changes before ``lsn`` are skipped and the rest applied (``copies.py``).

        The table adopts the staging table's files (``adoption.py``); where delta-rs cannot
        commit them, the engine overwrites the table from the staging table.

        Raises:
            SinkRetryableError, SinkError: the table could not be replaced (it still holds
                its old content).
        """
        assert isinstance(target, BulkTarget), "a target begin_copy handed out"
        with self._table_writes:
            self._replace_by_copy(relation, target, lsn, reason)

    def _replace_by_copy(
        self, relation: Relation, target: BulkTarget, lsn: Lsn, reason: str
    ) -> None:
        self._bookkeeping.flush_column_origins()
        name = relation.qualified_name
        path = table_path(self._settings.path, relation.schema_name, relation.relation_name)
        action = f"replacing {name} by its copy"
        try:
            with engine_call(action):
                adopted = self._adopter is not None and self._adopter.adopt(
                    path, target.path, action
                )
            if not adopted:
                spec = self._settings.key_buckets.get(name)
                partitions = (self._meta.key_bucket,) if spec is not None else ()
                with engine_errors(action):
                    self._lake.overwrite(
                        path,
                        render_select_all(target=delta_table(target.path)),
                        merge_schema=True,
                        partitions=partitions,
                    )
        finally:
            # Also after a failure: an engine error may come after the commit it reports.
            self._lake.forget(path)
            self._lake.forget(target.path)
        self._copies.finish(name, lsn, reason)
        if not adopted:
            remove_directory(target.path, "a staging table the engine copied from")

    def _holds_rows(self, table: str, target: str) -> bool:
        """Whether the Delta table ``target`` has any row (soft-deleted ones too)."""
        with engine_errors(f"reading {table}"):
            return self._lake.holds_rows(target)

    def finish_bulk(self, targets: Sequence[CopyTarget]) -> None:
        """Record the appended tables' Delta versions in the commit log, as ``apply`` does.

        Raises:
            SinkRetryableError, SinkError: as ``apply``.
        """
        self._bookkeeping.flush_column_origins()
        if targets:
            done = Batch((), durable_lsn=None, transaction_count=0, last_commit_time=None)
            prepared = [t for t in targets if isinstance(t, BulkTarget)]
            self._commits.record(done, {t.table: t.path for t in prepared})

    def append_bulk(
        self, target: CopyTarget, strings: pa.RecordBatch | pa.Table, first_ordinal: int
    ) -> int:
        """Append copied rows (text forms, COPY order) to a table ``begin_bulk`` prepared
        (``step_bulk.py``); safe from several threads at once. Returns the rows appended.

        Raises:
            SinkDataError: a value cannot be stored in its Delta type.
            SinkRetryableError, SinkError: as ``apply``.
        """
        assert isinstance(target, BulkTarget), "a target begin_bulk handed out"
        return self._bulk.append(target, strings, first_ordinal)

    # --- tables ----------------------------------------------------------------------------

    def _apply_tables(
        self, tables: Sequence[MergePlan], new_tables: frozenset[str]
    ) -> list[_TableOutcome]:
        """Apply each table's steps and history; up to ``settings.concurrency`` tables at once.

        Tables are independent: each one's steps run in order on one thread, and no two
        threads write the same Delta table (the bookkeeping tables they share serialise
        themselves). When a table fails, the others still finish - a MERGE cannot be
        interrupted, and what they committed is replayed harmlessly (invariant 2) - and the
        first failure, in the batch's table order, is raised: the batch is not durable, so
        nothing of it is acknowledged (invariant 1).
        """
        if len(tables) <= 1 or self._settings.concurrency <= 1:
            return [self._apply_one(table, new_tables) for table in tables]
        pool = self._pool
        if pool is None:
            pool = self._pool = ThreadPoolExecutor(
                max_workers=self._settings.concurrency, thread_name_prefix="wal2delta-table"
            )
        futures = [pool.submit(self._apply_one, table, new_tables) for table in tables]
        wait(futures)
        failures = [(t, f.exception()) for t, f in zip(tables, futures, strict=True)]
        failed = [(t, e) for t, e in failures if e is not None]
        for table, error in failed[1:]:
            log.warning(
                "another table of the failed batch failed too",
                table=table.qualified_name,
                error=f"{type(error).__name__}: {error}",
            )
        if failed:
            raise failed[0][1]
        return [f.result() for f in futures]

    def _apply_one(self, table: MergePlan, new_tables: frozenset[str]) -> _TableOutcome:
        """One table's steps, then its change history."""
        started = time.monotonic()
        writes, anomalies = self._apply_table(table, table.qualified_name in new_tables)
        history = self._history.write(table)
        return _TableOutcome(anomalies, history, time.monotonic() - started, writes)

    def _apply_table(self, plan: MergePlan, new_table: bool) -> tuple[Counter[WriteKind], int]:
        """Apply the table's steps in order, each by the executor of its kind; return the
        writes they made and the TOAST anomalies they found. ``new_table``: the lake cannot
        hold any of its changes in the batch yet (``replays.py``)."""
        path, state = self._prepare_table(plan)
        target = TableTarget(plan.qualified_name, path, state)
        writes: Counter[WriteKind] = Counter()
        anomalies = 0
        try:
            messages = plan.relations or (None,) * len(plan.steps)
            for step, message in zip(plan.steps, messages, strict=True):
                outcome = self._apply_step(plan, target, step, message, new_table)
                writes[outcome.write] += 1
                anomalies += outcome.toast_anomalies
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
        return writes, anomalies

    def _apply_step(
        self,
        plan: MergePlan,
        target: TableTarget,
        step: Step,
        message: Relation | None,
        new_table: bool,
    ) -> StepOutcome:
        """Hand ``step`` to the executor of its kind, after the table follows the step's
        relation (``follow.py``)."""
        if isinstance(step, TruncateStep):
            return self._truncates.apply(target, step)
        if isinstance(step, MergeStep) and not step.row_count:
            return NOTHING_WRITTEN
        self._follower.follow(plan, target.path, target.state, step, message)
        if isinstance(step, KeylessStep):
            return self._keyless.apply(target, step)
        if appends(plan, step, self._meta, new_table=new_table):
            return self._appends.apply(target, step)
        return self._keyed.apply(target, step)

    def _prepare_table(self, plan: MergePlan, staging: str | None = None) -> tuple[str, TableState]:
        """The table's location (``staging`` for an online copy's staging table) and state;
        created (and given missing columns) when new."""
        path = staging or table_path(self._settings.path, plan.schema, plan.table)
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
                path,
                plan.qualified_name,
                wanted,
                data=True,
                partition=partition,
                properties=table_properties(self._settings, plan.qualified_name),
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


def _earliest(*lsns: Lsn | None) -> Lsn | None:
    """The smallest of the LSNs given, None when none is."""
    return min((lsn for lsn in lsns if lsn is not None), default=None)
