"""The TRUNCATE step: every row at or below the TRUNCATE's commit LSN leaves the table.

A TRUNCATE removes everything planned before it in the batch (``fold.py`` drops those
steps), so one DELETE of the rows whose LSN is at or below its own does it, in one commit
(``sql.render_truncate``). With soft deletes the rows are flagged instead, stamped with the
TRUNCATE's LSN, commit time and ordinal, by a MERGE over a one-row view.
"""

from __future__ import annotations

import pyarrow as pa

from sink.engine.arrow import ArrowColumn
from sink.engine.spark import engine_errors
from sink.engine.sql import MetadataColumns, render_truncate, truncate_columns
from sink.lake.tables import LakeTables
from sink.planning.plan import TruncateStep
from sink.steps.executor import StepOutcome, TableTarget
from sink.values.typemap import BIGINT, TIMESTAMP


class TruncateExecutor:
    """Applies TRUNCATE steps through the lake port."""

    def __init__(self, lake: LakeTables, meta: MetadataColumns) -> None:
        self._lake = lake
        self._meta = meta

    def apply(self, target: TableTarget, step: TruncateStep) -> StepOutcome:
        """Remove (or, with soft deletes, flag) every row at or below the TRUNCATE's LSN."""
        table = target.reference
        with engine_errors(f"truncating {target.name}"):
            if not self._meta.soft_delete:
                self._lake.sql(render_truncate(step.lsn, self._meta, target=table, view=""))
                return StepOutcome("delete")
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
            ordinal = step.ordinal if self._meta.ordinal in target.state.columns else None
            with self._lake.view(arrow, columns) as view:
                self._lake.sql(
                    render_truncate(step.lsn, self._meta, target=table, view=view, ordinal=ordinal)
                )
        return StepOutcome("merge")
