"""Fold a ``Batch`` into per-table plans (``plan.py``): pure, no Spark, no I/O.

Theory of operation
-------------------
Changes are read in batch order, which is commit order and then ordinal order inside each
transaction. Each change goes to the plan of its table (``schema.table``), and inside that
plan to the current *step*. A step is either a ``TruncateStep`` or a ``MergeStep`` whose
rows all share one relation *shape*: the same columns (names, types) and the same
identity. A relation whose shape differs from the previous change's (a column added, a
type or the replica identity changed) closes the current merge step and starts a new one,
so the executor applies steps strictly in order and every MERGE sees the effect of the
ones before it (docs/architecture.md, invariant 3). A new Relation message equal to the last
one does not: the server re-sends the Relation in every streamed transaction, and a step per
message would cost a MERGE per streamed transaction. Each step keeps the Relation message
of its first change (``MergePlan.relations``); the executor asks the catalog about a step
whose message is new (``evolution.py``), which is how ``DROP b, ADD b`` - no name or type
changed - is noticed, at the first step of the batch that carries the new message.

A TRUNCATE is a barrier: it replaces every step planned before it for its tables, because
it removes every row at or below its commit LSN, and everything planned earlier in the
batch is at or below it. The executor then deletes (or flags) those rows and applies the
changes after the barrier. Dropping the earlier steps also keeps a replayed batch from
counting TOAST anomalies for rows its own TRUNCATE already removed.

Inside a merge step the changes fold into at most one row per identity value, the last
change winning - a MERGE whose source matches one target row twice is an error in Delta
(delta#338, delta#180):

* INSERT puts the new row.
* UPDATE puts the new row under its new identity. When the old tuple's identity differs
  (a key-changing update, and every update under REPLICA IDENTITY FULL without a
  configured key), the old identity becomes a delete.
* DELETE puts a delete under the old tuple's identity.

Unchanged TOAST columns (``'u'``) carry no value. They are filled, in this order, from the
old tuple when it holds every column (FULL), then from an earlier change of the same row
in this step; what is left stays *kept*: the row's ``keep`` set names the columns the
MERGE must leave as they are in the target (invariant 7). When a row with kept columns
moved to a new identity, ``moved_from`` names the target row that holds their values,
because the row under the new identity does not exist yet. An update whose kept values
exist nowhere in the target is a TOAST anomaly that the executor counts; it never writes a
placeholder.

Identity (``Identity``):

* ``key``: the columns the relation flags as key (REPLICA IDENTITY DEFAULT / INDEX). When
  the relation flags none - or is REPLICA IDENTITY FULL, where pgoutput flags *every*
  column, so the flags say nothing - the configured key (``SinkSettings.keys``) is used,
  else the table's primary key as the source catalog reports it (``primary_key``), when
  the relation publishes all of its columns.
* ``row``: REPLICA IDENTITY FULL without a configured key or primary key. Such a table
  may hold identical rows, and must keep them: these changes plan a ``KeylessStep``
  instead (``keyless.py`` explains its folding), whose rows carry a hidden row identity.
* ``ordinal``: no key at all (REPLICA IDENTITY NOTHING, or DEFAULT on a table without
  primary key) and none configured. PostgreSQL only publishes inserts for such tables
  (it refuses UPDATE and DELETE on a table that publishes them without an identity); each
  insert is identified by its commit LSN and its ordinal in the transaction, which makes a
  replayed insert recognisable. An UPDATE or DELETE there is an error, or is dropped and
  counted when ``on_missing_key`` is ``skip``.

Every planned row carries the commit LSN and commit time of its last change; the MERGE
compares them with the target's to make replays harmless (invariant 2). Every merge step
also records the commit LSN of its first change (``first_lsn``): the rows the table held
before that change were written under earlier relations, which is what schema evolution
(``evolution.py``) needs to know to backfill a column added with a default.

Change history (``history``): for the tables it names, the plan also keeps every change
unfolded, in batch order (``MergePlan.changes``, one ``ChangeRecord`` each), with its
values decoded as the MERGE's and its unchanged TOAST values filled as far as the batch
itself can fill them (``steps/step_history.py`` writes them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from decoder import (
    UNCHANGED_TOAST,
    Change,
    Lsn,
    MessageChange,
    PgTimestamp,
    Relation,
    RowChange,
    TruncateChange,
    ValueDecoder,
    fast_constructor,
    format_lsn,
    pg_timestamp_to_datetime,
)
from sink.base import Batch, SinkDataError
from sink.planning.columnar import column_arrays, columnar_rows
from sink.planning.kernel import columnar_meta, fold_text_rows, pick_text_values
from sink.planning.plan import (
    BatchPlan,
    ChangeRecord,
    ColumnarRows,
    KeylessChange,
    KeylessStep,
    MergePlan,
    MergeStep,
    MovedFrom,
    PlannedRow,
    PlanOptions,
    Reject,
    Step,
    TruncateStep,
)
from sink.planning.shape import (
    IDENTITY_NAMES,
    PLAIN_HASHABLE,
    PLAIN_HASHABLE_TYPES,
    Shape,
    TupleReader,
    build_shape,
    identity_key,
    required,
    without_unchanged,
)
from sink.values.typemap import PlanColumn


def copy_truncate(relation: Relation, lsn: Lsn, commit_time: PgTimestamp) -> TruncateChange:
    """The change that opens a table's copy at the snapshot's consistent point ``lsn``: it
    removes whatever an interrupted earlier copy left (rows at or below ``lsn``). The MERGE
    path of the snapshot applies it first; ``plan_copy`` plans it for the bulk path."""
    return TruncateChange(
        relations=(relation,),
        cascade=False,
        restart_identity=False,
        commit_lsn=lsn,
        commit_time=commit_time,
        ordinal=0,
    )


def plan_copy(
    relation: Relation,
    options: PlanOptions,
    decoder: ValueDecoder,
    lsn: Lsn,
    commit_time: PgTimestamp,
) -> MergePlan:
    """The plan that prepares ``relation``'s table for a bulk copy: ``copy_truncate``, then
    an empty merge step of the relation's shape (its columns, its identity - ``row`` for a
    table without a key), which the executor follows as it would the first rows' step.

    Raises:
        SinkDataError: as ``shape.build_shape``.
    """
    shape = build_shape(relation, options, decoder)
    truncate = TruncateStep(lsn, pg_timestamp_to_datetime(commit_time), 0)
    step = MergeStep(shape.columns, shape.identity, shape.match_indexes, (), lsn)
    return MergePlan(
        schema=relation.schema_name,
        table=relation.relation_name,
        columns=shape.columns,
        steps=(truncate, step),
        counts={"insert": 0, "update": 0, "delete": 0},
        uses_row_ids=shape.identity == "row",
        relations=(None, relation),
    )


def plan_batch(
    batch: Batch,
    options: PlanOptions | None = None,
    *,
    decoder: ValueDecoder | None = None,
    **overrides: Any,
) -> BatchPlan:
    """Plan a batch.

    Args:
        batch: the changes, in commit then ordinal order.
        options: how to plan (``PlanOptions``); the defaults when None.
        decoder: the value decoder to reuse (one per sink keeps its loader cache warm).
        overrides: fields of ``options`` to replace for this call (tests, benchmarks).

    Returns:
        One ``MergePlan`` per table in order of first appearance, and the messages.

    Raises:
        SinkDataError: a change cannot be applied as the table's identity stands (update
            or delete without identity and ``on_missing_key`` is ``error``, a configured
            key column missing), a column name collides with a metadata column, or a
            value cannot be stored in its Delta type.
    """
    chosen = options or PlanOptions()
    if overrides:
        chosen = replace(chosen, **overrides)
    reader = decoder or ValueDecoder()

    def plan(with_columns: bool) -> BatchPlan:
        planner = _Planner(chosen, reader, columnar=with_columns)
        messages: list[MessageChange] = []
        planner.add_changes(batch.changes, messages)
        return BatchPlan(tables=planner.plans(), messages=tuple(messages))

    if chosen.columnar:
        try:
            return plan(with_columns=True)
        except SinkDataError:
            # The row path plans the same batch value by value: it finds the same plan, or
            # raises the exact error - the first in batch order - a row-path plan raises.
            pass
    return plan(with_columns=False)


_NOTHING_KEPT: Final[frozenset[int]] = frozenset()


@dataclass(slots=True)
class _Row:
    """A row the row path folded, values converted; a columnar row is an index instead
    (``_OpenStep.rows``)."""

    delete: bool
    values: list[object]
    moved_from: MovedFrom | None
    lsn: Lsn
    commit_time: datetime
    ordinal: int

    def freeze(self) -> PlannedRow:
        values = self.values
        # ``in`` tests identity first, and the marker equals nothing but itself.
        if UNCHANGED_TOAST in values:
            keep = frozenset(i for i, v in enumerate(values) if v is UNCHANGED_TOAST)
            frozen = tuple(None if v is UNCHANGED_TOAST else v for v in values)
        else:
            keep, frozen = _NOTHING_KEPT, tuple(values)
        return _new_planned_row(
            self.delete,
            frozen,
            keep,
            self.moved_from if keep else None,
            self.lsn,
            self.commit_time,
            self.ordinal,
        )


_new_planned_row: Final[
    Callable[
        [bool, tuple[object, ...], frozenset[int], MovedFrom | None, Lsn, datetime, int],
        PlannedRow,
    ]
] = fast_constructor(PlannedRow)
"""``PlannedRow(...)`` without its constructor: ``freeze`` makes one per planned row."""


@dataclass(slots=True)
class _OpenStep:
    shape: Shape
    first_lsn: Lsn
    rows: dict[tuple[object, ...], _Row | int] = field(default_factory=dict)
    """Identity -> the row's last change: a ``_Row``, or for a columnar row its index in
    ``columnar_changes`` (no object per row: the columns are read when the step freezes)."""
    relation: Relation | None = None
    columnar_changes: list[RowChange] = field(default_factory=list)
    """Every change the columnar path folded, in batch order, the replaced ones too: their
    values are converted like any other change's, so a value that cannot be stored is an
    error whether or not a later change replaced its row in the batch."""
    columnar_parts: list[tuple[bytes, int]] = field(default_factory=list)
    """The bytes (``TupleData.wire``) of each of ``columnar_changes``' tuple: the new one,
    a delete's old one."""
    columnar_deletes: list[bool] = field(default_factory=list)
    """Whether each of ``columnar_changes`` is a delete."""
    columnar_misses: int = 0
    """Rows the columnar path declined while it had taken none (binary mode declines all)."""
    old_keys: bool = False
    """Some identity's first change in the step is an UPDATE or DELETE: the row may be in
    the table (``MergeStep.only_new_keys``)."""

    def freeze(
        self, columnar: ColumnarRows | None = None, others: list[object] | None = None
    ) -> MergeStep:
        """The step; ``columnar`` holds its columnar rows (the indexes in ``rows``), and
        ``others``, when given, the rest of ``rows``' entries (``columnar_meta`` read them)."""
        if others is None:
            rows = [row for row in self.rows.values() if type(row) is _Row]
        else:
            rows = [row for row in others if type(row) is _Row]
            assert len(rows) == len(others), "a step's rows are _Row objects or indexes"
        assert columnar is not None or len(rows) == len(self.rows), "columnar rows left out"
        return MergeStep(
            columns=self.shape.columns,
            identity=self.shape.identity,
            match_indexes=self.shape.match_indexes,
            rows=tuple([row.freeze() for row in rows]),
            first_lsn=self.first_lsn,
            columnar=columnar,
            only_new_keys=self.shape.unique_key and not self.old_keys,
        )


@dataclass(slots=True)
class _OpenKeylessStep:
    shape: Shape
    changes: list[KeylessChange] = field(default_factory=list)
    relation: Relation | None = None

    def freeze(self) -> KeylessStep:
        return KeylessStep(self.shape.columns, tuple(self.changes))


@dataclass(slots=True)
class _TablePlan:
    schema: str
    table: str
    steps: list[Step | _OpenStep | _OpenKeylessStep] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"insert": 0, "update": 0, "delete": 0})
    skipped: int = 0
    truncated_columns: tuple[PlanColumn, ...] = ()
    """The columns of the relation of the table's last TRUNCATE in the batch."""
    changes: list[ChangeRecord] | None = None
    """Every change, unfolded, when the table keeps a change history."""
    rejects: list[Reject] = field(default_factory=list)
    """The new rows' values stored under a convention, in batch order."""

    # A step keeps the Relation message of its first change: the executor looks at the
    # catalog when that message is new (``MergePlan.relations``). Equal messages re-sent
    # later (one per streamed transaction) share the step.

    def open_step(self, shape: Shape, lsn: Lsn, relation: Relation) -> _OpenStep:
        last = self.steps[-1] if self.steps else None
        if isinstance(last, _OpenStep) and (last.shape is shape or last.shape == shape):
            return last
        step = _OpenStep(shape, lsn, relation=relation)
        self.steps.append(step)
        return step

    def open_keyless_step(self, shape: Shape, relation: Relation) -> list[KeylessChange]:
        last = self.steps[-1] if self.steps else None
        if isinstance(last, _OpenKeylessStep) and (last.shape is shape or last.shape == shape):
            return last.changes
        step = _OpenKeylessStep(shape, relation=relation)
        self.steps.append(step)
        return step.changes

    def freeze(self, freeze_step: Callable[[_OpenStep], MergeStep]) -> MergePlan:
        steps = tuple(
            freeze_step(s)
            if isinstance(s, _OpenStep)
            else s.freeze()
            if isinstance(s, _OpenKeylessStep)
            else s
            for s in self.steps
        )
        # A table whose batch only truncates it is still created with its columns.
        columns: dict[str, PlanColumn] = {c.name: c for c in self.truncated_columns}
        for step in steps:
            if isinstance(step, MergeStep | KeylessStep):
                for column in step.columns:
                    columns[column.name] = column
        return MergePlan(
            schema=self.schema,
            table=self.table,
            columns=tuple(columns.values()),
            steps=steps,
            counts=dict(self.counts),
            skipped=self.skipped,
            uses_row_ids=any(isinstance(s, KeylessStep) for s in steps),
            relations=tuple(
                s.relation if isinstance(s, _OpenStep | _OpenKeylessStep) else None
                for s in self.steps
            ),
            changes=tuple(self.changes) if self.changes is not None else (),
            rejects=tuple(self.rejects),
        )


class _Planner:
    def __init__(self, options: PlanOptions, decoder: ValueDecoder, *, columnar: bool) -> None:
        self._options = options
        self._history = options.history
        self._decoder = decoder
        self._reader = TupleReader(
            decoder, options.on_unrepresentable, generic_values=options.generic_values
        )
        self._decode = self._reader.decode
        self._columnar = columnar and not options.generic_values
        self._skip_keyless = options.on_missing_key == "skip"
        self._tables: dict[tuple[str, str], _TablePlan] = {}
        self._shapes: dict[Relation, Shape] = {}
        self._last_relation: Relation | None = None
        self._last_shape: Shape | None = None
        self._last_target: tuple[Relation, _TablePlan, Shape] | None = None
        self._last_timestamp: int | None = None
        self._last_commit_time = pg_timestamp_to_datetime(0)

    def plans(self) -> tuple[MergePlan, ...]:
        return tuple(table.freeze(self._freeze_step) for table in self._tables.values())

    def _freeze_step(self, step: _OpenStep) -> MergeStep:
        """Freeze ``step``, its columnar rows converted column by column (``columnar.py``)."""
        folded = step.columnar_changes
        if not folded:
            return step.freeze()
        shape = step.shape
        arrays = column_arrays([c.delta for c in shape.columns], shape.text, step.columnar_parts)
        if arrays is None:
            return self._freeze_by_rows(step)
        meta = columnar_meta(step.rows.values(), folded, step.columnar_deletes)
        assert meta is not None, "column_arrays answers None without the kernel"
        # Later changes may have replaced some: the others stay, in the order they were folded.
        columnar = columnar_rows(arrays, meta)
        return step.freeze(columnar if len(columnar) else None, meta.others)

    def _freeze_by_rows(self, step: _OpenStep) -> MergeStep:
        """Freeze ``step`` converting its columnar rows one by one, as the row path would
        have: some value did not convert column by column (one the converter refuses, or a
        legal value its Delta type cannot hold, stored under its convention and rejected).
        Every folded change is read, the replaced ones too, in fold order - as the row path
        reads them - so the errors and rejects are the row path's; only this step pays."""
        shape, table = step.shape, self._table_of(step)
        rows: list[_Row] = []
        for index, change in enumerate(step.columnar_changes):
            delete = step.columnar_deletes[index]
            data = change.old if delete else change.new
            values = self._decode(change, shape, required(data, change, "old" if delete else "new"))
            commit_time = self._commit_time(change.commit_time)
            if not delete:
                self._reader.take_rejects(table.rejects, change, shape, values, commit_time)
            rows.append(
                _Row(
                    delete,
                    without_unchanged(values) if delete else values,
                    None,
                    change.commit_lsn,
                    commit_time,
                    change.ordinal,
                )
            )
        for identity, entry in step.rows.items():
            if type(entry) is int:
                step.rows[identity] = rows[entry]
        step.columnar_changes.clear()
        step.columnar_parts.clear()
        step.columnar_deletes.clear()
        return step.freeze()

    def _table_of(self, step: _OpenStep) -> _TablePlan:
        """The table plan holding ``step``."""
        relation = step.relation
        assert relation is not None, "an open merge step keeps its first relation"
        return self._table(relation)

    def _prior_values(self, prior: _Row | int, step: _OpenStep) -> list[object]:
        """The values of the row ``prior`` in ``step`` (a columnar row's converted now)."""
        if type(prior) is _Row:
            return prior.values
        assert type(prior) is int, "a step's rows are _Row objects or columnar indexes"
        change = step.columnar_changes[prior]
        return self._decode(change, step.shape, required(change.new, change, "new"))

    def _table(self, relation: Relation) -> _TablePlan:
        name = (relation.schema_name, relation.relation_name)
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = _TablePlan(*name)
            scope = self._history
            if scope is True or (scope and relation.qualified_name in scope):
                table.changes = []
        return table

    def _row_target(self, relation: Relation) -> tuple[_TablePlan, Shape]:
        """The table plan and shape of a row change's relation (the last pair cached)."""
        last = self._last_target
        if last is not None and last[0] is relation:
            return last[1], last[2]
        table, shape = self._table(relation), self._shape(relation)
        self._last_target = (relation, table, shape)
        return table, shape

    def add_other(self, change: Change, messages: list[MessageChange]) -> None:
        """A message or a truncate; ``plan_batch`` hands row changes to ``add_row``."""
        match change:
            case MessageChange():
                messages.append(change)
            case TruncateChange():
                step = TruncateStep(
                    change.commit_lsn,
                    pg_timestamp_to_datetime(change.commit_time),
                    change.ordinal,
                )
                for relation in change.relations:
                    # Everything planned so far for the table is at or below the
                    # truncate's LSN, so the truncate removes it anyway.
                    table = self._table(relation)
                    for dropped in table.steps:
                        if type(dropped) is _OpenStep and dropped.columnar_changes:
                            # The row path converted these values as they came, and a value
                            # it cannot store is an error even in a row the truncate drops.
                            self._freeze_step(dropped)
                    table.steps[:] = [step]
                    table.truncated_columns = self._shape(relation).columns
                    if table.changes is not None:
                        table.changes.append(
                            ChangeRecord(
                                "truncate",
                                step.lsn,
                                step.ordinal,
                                step.commit_time,
                                table.truncated_columns,
                                None,
                                None,
                                None,
                                change.xid,
                            )
                        )

    # --- shapes ----------------------------------------------------------------------------

    def _shape(self, relation: Relation) -> Shape:
        # Consecutive changes usually share one Relation object; hashing it is not free.
        if relation is self._last_relation and self._last_shape is not None:
            return self._last_shape
        shape = self._shapes.get(relation)
        if shape is None:
            shape = self._shapes[relation] = build_shape(relation, self._options, self._decoder)
        self._last_relation, self._last_shape = relation, shape
        return shape

    # --- folding ---------------------------------------------------------------------------

    def add_changes(self, changes: Sequence[Change], messages: list[MessageChange]) -> None:
        """Plan ``changes`` in order: ``add_row`` for row changes, ``add_other`` for the rest.

        The bulk of a text stream - an insert, an update without an old tuple or a delete,
        of the relation of the change before, with the same commit time, into the step
        that change went to - is folded by ``kernel.fold_text_rows``, in C, as
        ``_add_columnar_row`` folds an insert or update one change at a time (planning
        with the Arrow sources fell from 1.35 to 0.8 µs per change, docs/performance-log.md;
        a delete is planned the row path's way when it starts a run). The loop hands
        it the changes after each one ``add_row`` planned into a columnar-capable step;
        the change that ends its run goes to ``add_row`` untouched, which decides it from
        scratch.
        """
        add_row, add_other = self.add_row, self.add_other
        position, end = 0, len(changes)
        while position < end:
            change = changes[position]
            position += 1
            if type(change) is not RowChange:
                add_other(change, messages)
                continue
            add_row(change)
            target = self._columnar_step()
            if target is None:
                continue
            table, step = target
            stop, inserts, updates, deletes, first_touches = fold_text_rows(
                changes,
                position,
                change.relation,
                change.commit_time,
                step.shape.match_indexes,
                step.shape.text,
                PLAIN_HASHABLE_TYPES,
                step.rows,
                step.columnar_changes,
                step.columnar_parts,
                step.columnar_deletes,
            )
            if first_touches:
                step.old_keys = True
            if stop > position:
                counts = table.counts
                counts["insert"] += inserts
                counts["update"] += updates
                counts["delete"] += deletes
                position = stop

    def _columnar_step(self) -> tuple[_TablePlan, _OpenStep] | None:
        """The table and step the last ``add_row`` planned into, when the next change of its
        relation may take the columnar path there (``_folds_columnar``)."""
        target = self._last_target
        if target is None:
            return None
        _, table, shape = target
        step = table.steps[-1] if table.steps else None
        if (
            type(step) is not _OpenStep
            or not (step.shape is shape or step.shape == shape)
            or not self._folds_columnar(table, shape, step)
        ):
            return None
        return table, step

    def _folds_columnar(self, table: _TablePlan, shape: Shape, step: _OpenStep) -> bool:
        """Whether a plain insert or update into ``step`` may take the columnar path."""
        return (
            self._columnar
            and shape.identity == "key"
            and table.changes is None
            and step.columnar_misses < _COLUMNAR_TRIES
        )

    def add_row(self, change: RowChange) -> None:
        relation = change.relation
        table, shape = self._row_target(relation)
        if change.op != "insert" and shape.identity == "ordinal" and self._skip_keyless:
            table.skipped += 1
            return
        table.counts[change.op] += 1
        commit_time = (
            self._last_commit_time
            if change.commit_time == self._last_timestamp
            else self._commit_time(change.commit_time)
        )
        if shape.identity == "row":
            self._add_keyless_row(change, table, shape, commit_time)
            return
        step = table.open_step(shape, change.commit_lsn, relation)
        if (
            change.old is None
            and change.op != "delete"
            and self._folds_columnar(table, shape, step)
            and self._add_columnar_row(change, step)
        ):
            return
        if change.op == "insert":
            new = self._decode(change, shape, required(change.new, change, "new"))
            self._reader.take_rejects(table.rejects, change, shape, new, commit_time)
            identity = identity_key(change, shape, new)
            step.rows[identity] = _Row(
                False, new, None, change.commit_lsn, commit_time, change.ordinal
            )
            if table.changes is not None:
                _record(table.changes, change, commit_time, shape, new, None)
            return
        if shape.identity == "ordinal":
            named = IDENTITY_NAMES.get(relation.replica_identity, relation.replica_identity)
            raise SinkDataError(
                f"{change.op.upper()} on {relation.qualified_name}, which has no replica "
                f"identity key (REPLICA IDENTITY {named}, commit "
                f"{format_lsn(change.commit_lsn)}): configure its key in sink.keys, "
                "give the table a primary key or REPLICA IDENTITY FULL, or set "
                "source.on_missing_key: skip to drop such changes"
            )
        old = self._decode(change, shape, change.old) if change.old is not None else None
        if change.op == "delete":
            old = required(old, change, "old")
            identity = identity_key(change, shape, old)
            if identity not in step.rows:
                step.old_keys = True
            step.rows[identity] = _Row(
                True, without_unchanged(old), None, change.commit_lsn, commit_time, change.ordinal
            )
            if table.changes is not None:
                _record(table.changes, change, commit_time, shape, None, old)
            return
        new = self._decode(change, shape, required(change.new, change, "new"))
        self._reader.take_rejects(table.rejects, change, shape, new, commit_time)
        if old is not None:
            full_old = change.old_kind == "O"
            for i in range(len(new)):
                if new[i] is UNCHANGED_TOAST and (full_old or i in shape.match_indexes):
                    new[i] = old[i]
        old_identity = identity_key(change, shape, old if old is not None else new)
        new_identity = identity_key(change, shape, new)
        prior = step.rows.get(old_identity)
        if prior is None or (old_identity != new_identity and new_identity not in step.rows):
            step.old_keys = True
        moved_from: MovedFrom | None = None
        if prior is not None and (
            not step.columnar_deletes[prior] if isinstance(prior, int) else not prior.delete
        ):
            # An earlier change of this row in the step fills what this one did not send.
            if UNCHANGED_TOAST in new:
                prior_values = self._prior_values(prior, step)
                for i, value in enumerate(new):
                    if value is UNCHANGED_TOAST:
                        new[i] = prior_values[i]
            if type(prior) is _Row:  # a columnar row never moved (it keeps no column)
                moved_from = prior.moved_from
        if table.changes is not None:
            _record(table.changes, change, commit_time, shape, new, old)
        if old_identity != new_identity:
            if moved_from is None and any(v is UNCHANGED_TOAST for v in new):
                assert old is not None
                moved_from = MovedFrom(
                    tuple(old[i] for i in shape.match_indexes), change.commit_lsn, change.ordinal
                )
            step.rows[old_identity] = _Row(
                True,
                without_unchanged(old if old is not None else new),
                None,
                change.commit_lsn,
                commit_time,
                change.ordinal,
            )
        step.rows.pop(new_identity, None)
        step.rows[new_identity] = _Row(
            False, new, moved_from, change.commit_lsn, commit_time, change.ordinal
        )

    def _add_columnar_row(self, change: RowChange, step: _OpenStep) -> bool:
        """Fold an insert, or an update that keeps its identity, without its values.

        Only the identity is converted; the row's values stay in its message until the
        step freezes (``_freeze_step``). False, having done nothing, when the new tuple is
        not all text values and NULLs (unchanged TOAST must be filled or kept, binary
        values take the row path) or its identity is not of a plainly hashable type.
        """
        new = change.new
        wire = None if new is None else new.wire
        if wire is None:
            return False
        shape = step.shape
        identity = pick_text_values(wire[0], wire[1], shape.match_indexes, shape.text)
        if identity is None:
            if not step.columnar_changes:
                step.columnar_misses += 1
            return False
        if len(identity) == 1:
            if type(identity[0]) not in PLAIN_HASHABLE:
                return False
        elif any(type(value) not in PLAIN_HASHABLE for value in identity):
            return False
        # As the row path: an insert takes the identity's place, an update moves it last;
        # no value is unchanged TOAST, so nothing is kept and nothing moves.
        if change.op != "insert" and step.rows.pop(identity, None) is None:
            step.old_keys = True
        step.rows[identity] = len(step.columnar_changes)
        step.columnar_changes.append(change)
        step.columnar_parts.append(wire)
        step.columnar_deletes.append(False)
        return True

    def _add_keyless_row(
        self, change: RowChange, table: _TablePlan, shape: Shape, commit_time: datetime
    ) -> None:
        """Decode a change of a table without any key; the executor folds (``keyless.py``)."""
        changes = table.open_keyless_step(shape, change.relation)
        lsn, ordinal = change.commit_lsn, change.ordinal
        old: tuple[object, ...] | None = None
        new: tuple[object, ...] | None = None
        if change.op != "insert":
            old = tuple(self._decode(change, shape, required(change.old, change, "old")))
            if UNCHANGED_TOAST in old:
                raise SinkDataError(
                    f"{change.op.upper()} on {change.relation.qualified_name} sent an old "
                    "row with an unchanged TOAST value; a table without a key is matched on "
                    f"the whole old row (commit {format_lsn(lsn)}), so the change cannot be "
                    "applied"
                )
        if change.op != "delete":
            values = self._decode(change, shape, required(change.new, change, "new"))
            self._reader.take_rejects(table.rejects, change, shape, values, commit_time)
            # REPLICA IDENTITY FULL sends the whole old row: it holds what 'u' did not resend.
            new = tuple(
                old[i] if v is UNCHANGED_TOAST and old is not None else v
                for i, v in enumerate(values)
            )
        changes.append(KeylessChange(old, new, lsn, ordinal, commit_time))
        if table.changes is not None:
            _record(table.changes, change, commit_time, shape, new, old)

    def _commit_time(self, timestamp: int) -> datetime:
        """Convert a commit time, once per transaction rather than once per change."""
        if timestamp != self._last_timestamp:
            self._last_timestamp = timestamp
            self._last_commit_time = pg_timestamp_to_datetime(timestamp)
        return self._last_commit_time


_COLUMNAR_TRIES: Final = 64
"""A step whose first 64 candidate rows all declined the columnar path stops trying it: a
binary-mode stream, whose values the kernel does not gather, would pay for the attempt."""


def _record(  # noqa: PLR0917 - positional on purpose: one call per recorded change
    changes: list[ChangeRecord],
    change: RowChange,
    commit_time: datetime,
    shape: Shape,
    new: Sequence[object] | None,
    old: Sequence[object] | None,
) -> None:
    """Keep ``change`` for the change history (its values as decoded and filled so far)."""
    changes.append(
        ChangeRecord(
            change.op,
            change.commit_lsn,
            change.ordinal,
            commit_time,
            shape.columns,
            tuple(new) if new is not None else None,
            tuple(old) if old is not None else None,
            None if old is None else ("row" if change.old_kind == "O" else "key"),
            change.xid,
        )
    )
