"""The keyless step: changes of a table without any key, applied as PostgreSQL applies them.

``keyless.py`` folds a step's changes after the table's floor - its newest stamp, read once
per process; older changes are replays - into rows to insert and takes of existing rows
equal to an old row (an UPDATE or DELETE changes exactly one of them, NULLs matching
NULLs). This executor reads the candidate rows of the takes (``sql.render_keyless_candidates``),
assigns one to each take (``keyless.assign_takes``), and runs one MERGE
(``sql.render_keyless_merge``) - or, when the step only inserts, one append, which is exact
because no row inserted after the floor can exist yet. Rows written without a hidden row
identity (by a keyed step, or before the table lost its key) get one first, in one commit.
A take that finds no equal row is skipped and logged, as PostgreSQL's subscriber does.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack

import pyarrow as pa
import structlog

from sink.base import SinkDataError
from sink.engine.arrow import (
    ArrowColumn,
    arrow_table,
    keyless_source_table,
    keyless_touch_table,
    plan_column,
)
from sink.engine.spark import engine_errors
from sink.engine.sql import (
    ANOMALY_COUNT,
    KEYLESS_KIND,
    WANTED_COUNT,
    WANTED_VALUE,
    MetadataColumns,
    delta_table,
    render_keyless_candidates,
    render_keyless_merge,
    render_missing_row_ids_count,
    render_row_id_backfill,
)
from sink.lake.tables import LakeTables, TableState
from sink.planning.keyless import Candidate, FoldedStep, assign_takes, fold
from sink.planning.plan import KeylessStep, Position
from sink.steps.executor import StepOutcome, TableTarget
from sink.values.typemap import BIGINT, BOOLEAN

log = structlog.get_logger("wal2delta.sink")


class KeylessMergeExecutor:
    """Applies keyless steps through the lake port."""

    def __init__(
        self, lake: LakeTables, meta: MetadataColumns, key_buckets: Mapping[str, object]
    ) -> None:
        self._lake = lake
        self._meta = meta
        self._key_buckets = key_buckets

    def apply(self, target: TableTarget, step: KeylessStep) -> StepOutcome:
        """Apply a keyless step: fold it after the table's floor, assign its takes, MERGE."""
        table, path, state = target.name, target.path, target.state
        if table in self._key_buckets:
            raise SinkDataError(
                f"sink.partition_by_key lists {table}, but it has no key (REPLICA IDENTITY "
                "FULL without a primary key or configured key); partition only tables with "
                "a primary key, replica identity index or configured key"
            )
        if not state.row_ids_complete:
            self._complete_row_ids(table, path, state)
        if state.keyless_floor is None:
            self._lake.keyless_floor(state, self._newest_stamp(table, target.reference))
        assert state.keyless_floor is not None, "read just now"
        folded = fold(step, state.keyless_floor)
        outcome = StepOutcome("none")
        if folded.takes or folded.touches:
            self._merge_folded(table, target.reference, folded)
            outcome = StepOutcome("merge")
        elif folded.new_rows:
            self._append_new_rows(table, path, folded)
            outcome = StepOutcome("append")
        self._lake.keyless_floor(state, max(state.keyless_floor, step.last_position))
        return outcome

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
            self._lake.append(path, arrow, columns)

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
        with engine_errors(f"reading the newest change applied to {table}"):
            return self._lake.newest_position(target)

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
            rows = self._lake.rows(render_keyless_candidates(step, meta, target=target, view=view))
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
                self._lake.overwrite(path, query)
            log.info("keyless row identities filled", table=table, row_count=missing)
        self._lake.row_ids_completed(state)
