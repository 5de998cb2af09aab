"""The append step: a keyed step whose rows cannot be in the table, written without a MERGE.

Theory of operation
-------------------
A MERGE reads the key of every target row (or of its key-range partitions) to find the
rows it changes; an append reads none, and costs the engine a fifth of a small MERGE
(docs/performance.md). Most change traffic is inserts of new keys, so a step is appended
when none of its rows can be in the table:

* the step's identity is a key PostgreSQL keeps unique - the primary key or the replica
  identity index - and every identity's first change in the step is an INSERT
  (``MergeStep.only_new_keys``, found by the fold). Such a key had no row at the source
  just before its INSERT and, with no earlier change in the step, none when the step
  starts;
* the table equals the source as of the step's start: none of the table's changes in the
  batch can have been applied before - not a batch replayed after a crash, a failed
  attempt or a rewind (``replays.ReplayHorizon``). The changes of a table being copied
  are not applied at all (``copies.py``);
* no value of the batch's rows of the table is stored under a convention
  (``MergePlan.rejects``): two source keys could then meet in one Delta value;
* the table has no soft deletes: a deleted key's tombstone is a row with that key.

Anything else - a key from ``sink.keys``, a step with an update or delete of a key it did
not insert, a replay - goes through the MERGE (``step_keyed.py``), which is exact in every
case. A step with both new and old keys is one MERGE: the MERGE's price is its scan of
the target, which the old keys need anyway, and one commit is cheaper than two (decision
0122).

The rows are those the MERGE would insert (the same source, the columns of
``sql.new_row_columns``, the same stamps), handed to the engine as a DataFrame, inline
when small (``LakeTables.append_rows``); a row inserted and deleted within the step was
never in the table and is not written. One append is one Delta commit, as one MERGE is, so a crash
between the append and the batch's commit-log record leaves the batch's intent, and the
replay MERGEs (invariants 1 and 2).
"""

from __future__ import annotations

import pyarrow.compute as pc

from sink.engine.spark import engine_errors
from sink.engine.sql import DELETE_FLAG, MetadataColumns, new_row_columns
from sink.lake.tables import LakeTables
from sink.planning.plan import MergePlan, MergeStep
from sink.steps.executor import NOTHING_WRITTEN, StepOutcome, TableTarget
from sink.steps.step_keyed import KeyedSources


def appends(plan: MergePlan, step: MergeStep, meta: MetadataColumns, *, new_table: bool) -> bool:
    """Whether ``step`` of ``plan`` is appended rather than merged (the module docstring).

    Args:
        plan: the table's plan.
        step: one of its merge steps.
        meta: the metadata columns and the delete mode.
        new_table: none of the table's changes in the batch can have been applied before
            (``replays.ReplayHorizon.new_tables``).
    """
    return (
        new_table
        and step.only_new_keys
        and not meta.soft_delete
        and not plan.rejects
        and not step.kept_indexes
    )


class KeyedAppendExecutor:
    """Appends the rows of steps whose keys cannot be in their table."""

    def __init__(self, lake: LakeTables, meta: MetadataColumns, sources: KeyedSources) -> None:
        self._lake = lake
        self._meta = meta
        self._sources = sources

    def apply(self, target: TableTarget, step: MergeStep) -> StepOutcome:
        """Append the step's rows that are not deleted, in one commit (none when every row
        was deleted). No row keeps a column, so none can be a TOAST anomaly."""
        # Rows inserted here have no keyless identity (``step_keyless.py`` backfills one);
        # only a table that had keyless steps has them all.
        if target.state.row_ids_complete:
            self._lake.rows_without_row_ids(target.state)
        # ``appends`` admits neither: a tombstone is a row, a kept column reads the target.
        assert not self._meta.soft_delete, "soft deletes keep tombstones: such steps MERGE"
        assert not step.kept_indexes, "a row keeping a column reads the target: such steps MERGE"
        source = self._sources.build(target.name, target.reference, step, target.state)
        rows = source.rows.filter(pc.invert(source.rows.column(DELETE_FLAG)))
        if not rows.num_rows:
            return NOTHING_WRITTEN
        names = new_row_columns(step, self._meta, source.buckets)
        partitions = () if source.buckets is None else (source.buckets.column,)
        with engine_errors(f"appending to {target.name}"):
            self._lake.append_rows(
                target.path, rows, source.columns, names=names, partitions=partitions
            )
        return StepOutcome("append")
