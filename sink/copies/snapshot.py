"""The initial snapshot's bulk path: copied rows appended, no MERGE (``BulkSnapshotSink``).

``begin_bulk`` prepares a table exactly as the MERGE path's first batch would
(``planning/fold.plan_copy``: the copy's TRUNCATE and the relation's shape, carried out by
``steps/writer.TableWriter``), ``append_bulk`` hands copied rows to ``step_bulk``, and
``finish_bulk`` records the appended tables in the commit log as a batch is recorded.
Online copies (``online.py``) prepare their staging tables through ``prepare`` too.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from decoder import ColumnKind, Lsn, PgTimestamp, Relation, ValueDecoder, pg_timestamp_to_datetime
from sink.base import Batch, CopyTarget
from sink.copies.bulk import BulkTarget, frame_columns
from sink.copies.step_bulk import BulkAppendExecutor
from sink.engine.arrow import ArrowColumn, metadata_columns
from sink.engine.spark import engine_errors
from sink.lake.tables import LakeTables
from sink.planning.fold import plan_copy
from sink.planning.partitioning import bucketed_column
from sink.planning.plan import MergeStep, PlanOptions, TruncateStep
from sink.records.bookkeeping import Bookkeeping
from sink.records.commits import CommitLog
from sink.settings import SinkSettings
from sink.steps.writer import TableWriter
from sink.values.convert import column_converter
from sink.values.typemap import BIGINT


class BulkLoader:
    """Takes the initial snapshot's copied rows as bulk appends (the module docstring)."""

    def __init__(
        self,
        lake: LakeTables,
        settings: SinkSettings,
        *,
        writer: TableWriter,
        appender: BulkAppendExecutor,
        bookkeeping: Bookkeeping,
        commits: CommitLog,
        plan_options: PlanOptions,
        decoder: ValueDecoder,
    ) -> None:
        self._lake = lake
        self._settings = settings
        self._writer = writer
        self._appender = appender
        self._bookkeeping = bookkeeping
        self._commits = commits
        self._plan_options = plan_options
        self._decoder = decoder

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
            SinkDataError, SinkRetryableError, SinkError: as ``DeltaSink.apply``.
        """
        name = relation.qualified_name
        flagged = any(c.is_key for c in relation.columns)
        if (relation.replica_identity == "f" or not flagged) and self._settings.keys.get(name):
            return None
        history = self._settings.history
        if history is True or (not isinstance(history, bool) and name in history):
            return None  # its change history records the copied rows as inserts
        return self.prepare(relation, lsn, commit_time, None)

    def prepare(
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
        target = self._writer.prepare(plan, staging)
        state = target.state
        try:
            # A table without rows (one created just now) has nothing to truncate.
            held_rows = self._holds_rows(name, target.reference)
            if held_rows:
                self._writer.truncate(target, truncate)
            self._writer.follow(plan, target, step, plan.relations[1])
        except BaseException:
            self._lake.failed(state)
            raise
        # Appended rows have no keyless floor or row-identity check behind them yet.
        self._lake.rows_without_row_ids(state)
        self._lake.keyless_floor(state, None)
        meta = self._settings.metadata
        row_ids = step.identity == "row"
        metadata = metadata_columns(meta, row_ids=row_ids)
        bucket: tuple[str, int, int] | None = None
        if spec is not None and state.partition_column is not None:
            bucket = (state.partition_column, bucketed_column(name, step, spec), spec.width)
            metadata.append(ArrowColumn(state.partition_column, BIGINT.spark_sql, BIGINT.arrow))
        frame = frame_columns(step.columns, metadata)
        if set(state.columns) != {c.name for c in frame}:
            return None
        if held_rows and self._holds_rows(name, target.reference):
            return None
        return BulkTarget(
            table=name,
            path=target.path,
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
            key_indexes=step.match_indexes if step.identity == "key" else None,
            on_unrepresentable=self._settings.unrepresentable_policy(name),
            decoder=self._decoder,
        )

    def _holds_rows(self, table: str, reference: str) -> bool:
        """Whether the Delta table SQL names ``reference`` has any row (soft-deleted ones
        too)."""
        with engine_errors(f"reading {table}"):
            return self._lake.holds_rows(reference)

    def append_bulk(
        self, target: CopyTarget, strings: pa.RecordBatch | pa.Table, first_ordinal: int
    ) -> int:
        """Append copied rows (text forms, COPY order) to a table ``begin_bulk`` prepared
        (``step_bulk.py``); safe from several threads at once. Returns the rows appended.

        Raises:
            SinkDataError: a value cannot be stored in its Delta type.
            SinkRetryableError, SinkError: as ``DeltaSink.apply``.
        """
        assert isinstance(target, BulkTarget), "a target begin_bulk handed out"
        return self._appender.append(target, strings, first_ordinal)

    def finish_bulk(self, targets: Sequence[CopyTarget]) -> None:
        """Record the appended tables' Delta versions in the commit log, as ``apply`` does.

        Raises:
            SinkRetryableError, SinkError: as ``DeltaSink.apply``.
        """
        self._bookkeeping.flush_column_origins()
        if targets:
            done = Batch((), durable_lsn=None, transaction_count=0, last_commit_time=None)
            prepared = [t for t in targets if isinstance(t, BulkTarget)]
            self._commits.record(done, {t.table: t.path for t in prepared})
