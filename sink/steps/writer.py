"""One table of a batch written: the table made ready, each step handed to its executor.

Theory of operation
-------------------
``DeltaSink`` orders a batch; for each of its tables it calls ``TableWriter.write`` (from
up to ``sink.concurrency`` threads, never two for one table). The writer:

1. makes the table ready (``prepare``): created with its first relation's columns and the
   metadata columns, or given missing ones, through the lake port (``lake/tables.py``). A
   new table whose first step appends (none of its changes can be in the lake) is made by
   that append, in the same engine call and Delta commit as its rows; made empty at once
   if that step writes no row, or before anything else touches it (decision 0130);
2. hands each step, in order, to the executor of its kind (``executor.py``'s contract):
   ``step_truncate``; after the table follows the step's relation (``follow.py``: added,
   reset and renamed columns, type changes refused before any row of the new shape is
   written) ``step_keyless``, ``step_append`` (keys that cannot be in the table,
   ``appends``) or ``step_keyed`` (MERGE);
3. appends the table's change history (``step_history.py``: a ``HistoryStep``, through
   the same executor contract).

The bulk path of the initial snapshot and of online copies prepares its tables here too
(``prepare``, ``truncate``, ``follow``), so an appended table is exactly the table the MERGE
path's first batch would make.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from decoder import Relation, ValueDecoder
from sink.base import SinkDataError
from sink.engine.arrow import ArrowColumn, metadata_columns, plan_column
from sink.lake.layout import table_properties
from sink.lake.tables import LakeTables
from sink.planning.evolution import SourceCatalog
from sink.planning.plan import HistoryStep, KeylessStep, MergePlan, MergeStep, Step, TruncateStep
from sink.records.bookkeeping import Bookkeeping
from sink.settings import SinkSettings
from sink.steps.executor import NOTHING_WRITTEN, StepOutcome, TableTarget, WriteKind
from sink.steps.follow import RelationFollower
from sink.steps.step_append import KeyedAppendExecutor, appends
from sink.steps.step_history import HistoryExecutor
from sink.steps.step_keyed import KeyedMergeExecutor, KeyedSources
from sink.steps.step_keyless import KeylessMergeExecutor
from sink.steps.step_truncate import TruncateExecutor
from sink.values.naming import table_path
from sink.values.typemap import BIGINT

log = structlog.get_logger("wal2delta.sink")


@dataclass(frozen=True, slots=True)
class TableOutcome:
    """What writing one table of a batch did."""

    anomalies: int
    """Unchanged-TOAST rows found missing in the target."""
    history: str | None
    """The location of the change history it appended to, if any."""
    seconds: float
    """Wall time of its steps and history."""
    writes: Counter[WriteKind]
    """The Delta writes its steps made, by kind (``executor.WriteKind``)."""


class TableWriter:
    """Writes the plan of one table (the module docstring); safe from several threads for
    different tables."""

    def __init__(
        self,
        lake: LakeTables,
        settings: SinkSettings,
        *,
        bookkeeping: Bookkeeping,
        history: HistoryExecutor,
        catalog: SourceCatalog | None,
        decoder: ValueDecoder,
    ) -> None:
        self._lake = lake
        self._settings = settings
        self._meta = settings.metadata
        self._history = history
        self._paths: dict[str, str] = {}
        """Each table's location (``naming.table_path``), worked out once."""
        self._truncates = TruncateExecutor(lake, self._meta)
        sources = KeyedSources(lake, self._meta, settings.key_buckets)
        self._keyed = KeyedMergeExecutor(lake, self._meta, sources)
        self._appends = KeyedAppendExecutor(lake, self._meta, sources)
        self._keyless = KeylessMergeExecutor(lake, self._meta, settings.key_buckets)
        self._follower = RelationFollower(
            lake, bookkeeping=bookkeeping, settings=settings, catalog=catalog, decoder=decoder
        )

    def write(self, plan: MergePlan, new_table: bool) -> TableOutcome:
        """Apply the table's steps in order, then its change history. ``new_table``: the
        lake cannot hold any of its changes in the batch yet (``planning/replays.py``)."""
        started = time.monotonic()
        target = self.prepare(plan, new_table=new_table)
        writes: Counter[WriteKind] = Counter()
        anomalies = 0
        try:
            messages = plan.relations or (None,) * len(plan.steps)
            for step, message in zip(plan.steps, messages, strict=True):
                outcome = self._apply_step(plan, target, step, message, new_table)
                writes[outcome.write] += 1
                anomalies += outcome.toast_anomalies
                if target.state.creation is not None:
                    # The first step was to make the table with its rows, and wrote none
                    # (each was deleted within it): the table is made empty.
                    self._lake.create(target.state)
        except BaseException:
            # A failed schema change may or may not have committed: read the schema again
            # before the batch is replayed.
            self._lake.failed(target.state)
            raise
        if plan.skipped:
            log.warning(
                "changes without identity skipped",
                table=plan.qualified_name,
                change_count=plan.skipped,
                reason="on_missing_key is skip",
            )
        history = None
        if plan.changes:
            changes = HistoryStep(plan.schema, plan.table, plan.changes)
            history = self._history.apply(target, changes).location
        return TableOutcome(anomalies, history, time.monotonic() - started, writes)

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
        self.follow(plan, target, step, message)
        if isinstance(step, KeylessStep):
            return self._keyless.apply(target, step)
        if appends(plan, step, self._meta, new_table=new_table):
            return self._appends.apply(target, step)
        return self._keyed.apply(target, step)

    def expect(self, plans: Sequence[MergePlan]) -> None:
        """Tell the writer the tables of the batch about to be written: those whose
        relation this process has not followed yet get their catalog entries in one
        request (``follow.py``); an empty ``plans`` after the batch drops what is left."""
        names = []
        for plan in plans:
            state = self._lake.states.get(self._path(plan))
            if state is None or state.relation is None:
                names.append((plan.schema, plan.table))
        self._follower.expect(names)

    def truncate(self, target: TableTarget, step: TruncateStep) -> StepOutcome:
        """Apply a TRUNCATE step (the bulk path's truncate at its consistent point)."""
        return self._truncates.apply(target, step)

    def follow(
        self,
        plan: MergePlan,
        target: TableTarget,
        step: MergeStep | KeylessStep,
        message: Relation | None,
    ) -> None:
        """Make the table follow ``step``'s relation (``follow.py``)."""
        self._follower.follow(plan, target.path, target.state, step, message)

    def prepare(
        self, plan: MergePlan, staging: str | None = None, *, new_table: bool = False
    ) -> TableTarget:
        """The table (``staging`` for an online copy's staging table), created (and given
        missing columns) when new. With ``new_table`` (``write``'s) a new table whose first
        step appends rows is made by that append, in its engine call and Delta commit
        (``LakeTables.load``)."""
        path = staging or self._path(plan)
        state = self._lake.states.get(path)
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
                made_by_first_append=new_table and self._appends_first(plan),
            )
            self._lake.followed(state, relation, None)
            try:
                self._lake.check_partitioning(plan.qualified_name, state, spec)
            except SinkDataError:
                self._lake.forget(path)  # checked again, never skipped, on the next batch
                raise
            # A table written before soft deletes were switched on lacks their flag.
            missing = [c for c in wanted if c.name not in state.columns and c not in data]
            self._lake.add_columns(path, plan.qualified_name, state, missing)
        return TableTarget(plan.qualified_name, path, state, state.reference)

    def _appends_first(self, plan: MergePlan) -> bool:
        """Whether ``plan``'s first step appends rows (``step_append.appends``), for a
        table none of whose changes in the batch the lake can hold."""
        first = plan.steps[0] if plan.steps else None
        return (
            isinstance(first, MergeStep)
            and first.row_count > 0
            and appends(plan, first, self._meta, new_table=True)
        )

    def _path(self, plan: MergePlan) -> str:
        """The location of ``plan``'s table, worked out once per process."""
        path = self._paths.get(plan.qualified_name)
        if path is None:
            path = self._paths[plan.qualified_name] = table_path(
                self._settings.path, plan.schema, plan.table
            )
        return path

    def clear(self) -> None:
        """Forget the change histories' floors (the process closes its sink)."""
        self._history.clear()
