"""The keyed MERGE step: a merge step's rows, one per identity value, into the table.

The step's rows ship as one Arrow table (``KeyedSources``: ``arrow.source_table``, the
row path's objects and the columnar rows) to the lake port, which stages them for the
engine and runs the one MERGE (``sql.render_merge``, ``LakeTables.merge``) that applies
them: the replay guard makes a row change only for a change at or after the one stored
in it (docs/architecture.md, invariant 2), kept columns stay as they are (invariant 7),
deletes remove or flag. When rows keep unchanged-TOAST columns, a count query first finds
those whose value exists nowhere in the target; they are not inserted (the MERGE
excludes them), but counted and logged. A table partitioned
by key range (``partitioning.py``) gets the rows' buckets, and the MERGE reads only those
partitions; the first write of a process compares a stored row's bucket with the
configured width. A step whose keys cannot be in the table is appended instead
(``step_append.py``), from the same source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import structlog

from sink.base import SinkDataError
from sink.engine.arrow import ArrowColumn, source_table
from sink.engine.spark import engine_errors
from sink.engine.sql import (
    SOURCE_MARK,
    MetadataColumns,
    render_bucket_sample,
    render_merge,
    render_toast_anomaly_count,
)
from sink.lake.tables import LakeTables, TableState
from sink.planning.partitioning import (
    BucketFilter,
    bucket_filter,
    bucket_of,
    bucket_values,
    bucketed_column,
)
from sink.planning.plan import MergeStep
from sink.settings import KeyBuckets
from sink.steps.executor import StepOutcome, TableTarget
from sink.values.typemap import BIGINT

log = structlog.get_logger("wal2delta.sink")


@dataclass(frozen=True, slots=True)
class KeyedSource:
    """The rows of a keyed step as the engine reads them.

    Attributes:
        columns: the source's columns (``sql.source_columns``, then the partition column).
        rows: the rows, as Arrow.
        buckets: the step's key-range partitions; None for a table without them.
    """

    columns: list[ArrowColumn]
    rows: pa.Table
    buckets: BucketFilter | None


class KeyedSources:
    """Builds the source of a keyed step, for the MERGE and the append alike."""

    def __init__(
        self, lake: LakeTables, meta: MetadataColumns, key_buckets: Mapping[str, KeyBuckets]
    ) -> None:
        self._lake = lake
        self._meta = meta
        self._key_buckets = key_buckets

    def build(self, table: str, target: str, step: MergeStep, state: TableState) -> KeyedSource:
        """The step's rows with their key-range partitions (when the table has them); the
        first call of a process for a partitioned table compares a stored row's bucket
        with the configured width.

        Raises:
            SinkDataError: a value does not fit its column, or the table was partitioned
                with another width.
        """
        columns, arrow = source_table(table, step, self._meta)
        spec = self._key_buckets.get(table)
        if spec is None or state.partition_column is None:
            return KeyedSource(columns, arrow, None)
        index = bucketed_column(table, step, spec)
        if not state.buckets_checked:
            self._check_bucket_width(table, target, step.columns[index].name, spec)
            self._lake.buckets_checked(state)
        values = bucket_values(step, index, spec.width)
        partition = ArrowColumn(state.partition_column, BIGINT.spark_sql, BIGINT.arrow)
        return KeyedSource(
            [*columns, partition],
            arrow.append_column(partition.name, values),
            bucket_filter(partition.name, values),
        )

    def _check_bucket_width(self, table: str, target: str, key: str, spec: KeyBuckets) -> None:
        """Compare one stored row's bucket with the configured width (once per process).

        Rows bucketed with another width sit in partitions a MERGE would not look in, and
        would be duplicated instead of updated.
        """
        with engine_errors(f"reading a key bucket of {table}"):
            rows = self._lake.rows(render_bucket_sample(self._meta, key, target=target))
        if rows and bucket_of(int(rows[0]["k"]), spec.width) != int(rows[0]["b"]):
            raise SinkDataError(
                f"the Delta table of {table} is partitioned by key ranges of another width "
                f"than sink.partition_by_key.{table}.width ({spec.width}): key "
                f"{rows[0]['k']} is in bucket {rows[0]['b']}; restore the width the table "
                "was written with"
            )


class KeyedMergeExecutor:
    """Applies merge steps of tables with a key through the lake port."""

    def __init__(self, lake: LakeTables, meta: MetadataColumns, sources: KeyedSources) -> None:
        self._lake = lake
        self._meta = meta
        self._sources = sources

    def apply(self, target: TableTarget, step: MergeStep) -> StepOutcome:
        """MERGE the step's rows into the table; count the TOAST anomalies it finds."""
        table = target.name
        # Rows inserted here have no keyless identity (``step_keyless.py`` backfills one);
        # only a table that had keyless steps has them all.
        if target.state.row_ids_complete:
            self._lake.rows_without_row_ids(target.state)
        source = self._sources.build(table, target.reference, step, target.state)
        # Rendered before the rows are staged (``sql.SOURCE_MARK``): the lake port runs
        # both over its source, so the write goes executor -> renderer -> lake port once.
        anomaly_count = render_toast_anomaly_count(
            step, self._meta, target=target.reference, view=SOURCE_MARK, buckets=source.buckets
        )
        merge = render_merge(
            step, self._meta, target=target.reference, view=SOURCE_MARK, buckets=source.buckets
        )
        with engine_errors(f"merging into {table}"):
            anomalies = self._lake.merge(source.rows, source.columns, merge, anomaly_count)
        if anomalies:
            log.warning(
                "toast value missing in target",
                table=table,
                key_columns=[c.name for c in step.match_columns],
                row_count=anomalies,
            )
        return StepOutcome("merge", anomalies)
