"""Turn a ``Batch`` into per-table MERGE plans: pure, no Spark.

Theory of operation
-------------------
Changes are read in batch order, which is commit order and then ordinal order inside each
transaction. Each change goes to the plan of its table (``schema.table``), and inside that
plan to the current *step*. A step is either a ``TruncateStep`` or a ``MergeStep`` whose
rows all share one relation *shape*: the same columns (names, types) and the same
identity. A relation whose shape differs from the previous change's (a column added, a
type or the replica identity changed) closes the current merge step and starts a new one,
so the executor applies steps strictly in order and every MERGE sees the effect of the
ones before it (ARCHITECTURE invariant 3). A new Relation message equal to the last one
does not: the server re-sends the Relation in every streamed transaction, and a step per
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
itself can fill them (``history.py`` writes them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Final, Literal, TypeVar

from decoder import (
    UNCHANGED_TOAST,
    Change,
    ColumnKind,
    ColumnValue,
    Lsn,
    MessageChange,
    Relation,
    RowChange,
    TruncateChange,
    TupleData,
    UnknownBinaryFormatError,
    ValueDecoder,
    cause_line,
    columnar_meta,
    fast_constructor,
    fold_text_rows,
    format_lsn,
    load_tuple_wire,
    pg_timestamp_to_datetime,
    pick_text_values,
)
from sink.base import Batch, SinkDataError
from sink.columnar import ColumnarRows, column_arrays, columnar_rows
from sink.constants import (
    ColumnNamePolicy,
    ColumnTypeOverride,
    MissingKeyPolicy,
    UnrepresentablePolicy,
)
from sink.convert import Converter, column_converter, convert_value, pg_text_form
from sink.keyless import KeylessChange, KeylessStep
from sink.matching import hashable
from sink.naming import delta_can_hold, delta_column_name
from sink.typemap import ColumnTypeError, DeltaType, delta_type
from sink.unrepresentable import Reason, UnrepresentableValueError, original_text, substitute

Identity = Literal["key", "row", "ordinal"]
PrimaryKeyLookup = Callable[[Relation], Sequence[str]]
"""Relation -> its table's primary key columns (empty when none), from the source catalog."""

HELPER_PREFIX: Final = "__w2d_"
"""Prefix of the source-only helper columns of a MERGE; no table column may start with it."""


@dataclass(frozen=True, slots=True)
class PlanColumn:
    """One source column as the plan and the Delta table see it.

    Attributes:
        name: the column's name in Delta: the source name, or its ``naming`` map under
            ``sink.column_names: map``.
        type_oid: the source type.
        type_modifier: the source type modifier.
        delta: the Delta type.
        renamed_from: the source (PostgreSQL) name when ``name`` differs from it.
    """

    name: str
    type_oid: int
    type_modifier: int
    delta: DeltaType
    renamed_from: str | None = None

    @property
    def source_name(self) -> str:
        """The column's name in PostgreSQL (the relation, the catalog, the configuration)."""
        return self.name if self.renamed_from is None else self.renamed_from


@dataclass(frozen=True, slots=True)
class MovedFrom:
    """Where a moved row's kept columns are: the target row it moved from, and when.

    Attributes:
        identity: the identity values of the target row that holds the kept columns.
        lsn: commit LSN of the change that moved the row.
        ordinal: that change's ordinal in its transaction. The kept values are those of
            the origin row before this position: a batch replayed after a crash finds
            the origin as later changes (of the same transaction, too) left it, stamped
            at or after this position, and must not read it.
    """

    identity: tuple[object, ...]
    lsn: Lsn
    ordinal: int


@dataclass(frozen=True, slots=True)
class PlannedRow:
    """The folded outcome for one identity value inside a merge step.

    Attributes:
        delete: the row must not exist after the step (or, with soft deletes, be flagged).
        values: Delta values in step column order; None where ``keep`` names the column.
        keep: indexes of the columns the MERGE leaves as they are in the target.
        moved_from: the target row that holds the kept columns, when the row moved to a
            new identity in this step; None otherwise.
        lsn: commit LSN of the row's last change.
        commit_time: commit time of that change (UTC).
        ordinal: ordinal of that change in its transaction.
    """

    delete: bool
    values: tuple[object, ...]
    keep: frozenset[int]
    moved_from: MovedFrom | None
    lsn: Lsn
    commit_time: datetime
    ordinal: int


@dataclass(frozen=True, slots=True)
class MergeStep:
    """Rows of one relation shape to merge into the table in one MERGE.

    Attributes:
        columns: the relation's columns, in relation order.
        identity: how rows are matched (see the module docstring).
        match_indexes: indexes into ``columns`` of the identity columns (empty for
            ``ordinal``, which matches on the LSN and ordinal metadata columns).
        rows: at most one row per identity value.
        first_lsn: commit LSN of the step's first change. Target rows written before the
            step and under another relation have an LSN at or below it.
        columnar: more rows, held as columns (``columnar.py``): upserts of identities
            ``rows`` does not hold, none keeping a column; None when there are none.
    """

    columns: tuple[PlanColumn, ...]
    identity: Identity
    match_indexes: tuple[int, ...]
    rows: tuple[PlannedRow, ...]
    first_lsn: Lsn
    columnar: ColumnarRows | None = None

    @property
    def row_count(self) -> int:
        """Rows in the step: ``rows`` and the columnar ones."""
        return len(self.rows) + (0 if self.columnar is None else len(self.columnar))

    @property
    def match_columns(self) -> tuple[PlanColumn, ...]:
        """The identity columns."""
        return tuple(self.columns[i] for i in self.match_indexes)

    @property
    def kept_indexes(self) -> tuple[int, ...]:
        """Indexes of the columns that some row keeps, in column order."""
        return tuple(sorted(frozenset().union(*[row.keep for row in self.rows])))

    @property
    def has_moved_keeps(self) -> bool:
        """Whether a row must read kept columns from another target row."""
        moved = [row.moved_from for row in self.rows]
        return moved.count(None) != len(moved)


@dataclass(frozen=True, slots=True)
class TruncateStep:
    """Remove every target row whose LSN is at or below ``lsn``.

    ``ordinal`` is the TRUNCATE's position in its transaction: with soft deletes the
    flagged rows are stamped (``lsn``, ``ordinal``), which tables without a key compare
    with later changes of the same transaction.
    """

    lsn: Lsn
    commit_time: datetime
    ordinal: int = 0


Step = MergeStep | KeylessStep | TruncateStep

HistoryScope = bool | frozenset[str]
"""Tables whose changes the plan keeps unfolded: all (True), none (False), or these
qualified names."""


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """One change as the change history stores it (``MergePlan.changes``).

    Attributes:
        op: ``insert``, ``update``, ``delete`` or ``truncate``.
        lsn: commit LSN of the change's transaction.
        ordinal: the change's position in its transaction.
        commit_time: commit time (UTC).
        columns: the relation's columns, which ``new`` and ``old`` follow.
        new: the new row (insert, update); ``decoder.UNCHANGED_TOAST`` where neither the
            change nor an earlier change of the row in the batch holds the value.
        old: the old key (other columns None) or the old row, when the server sent it.
        old_kind: ``key`` or ``row`` for ``old``; None without it.
        xid: the change's top-level transaction id; None when the stream did not say.
    """

    op: str
    lsn: Lsn
    ordinal: int
    commit_time: datetime
    columns: tuple[PlanColumn, ...]
    new: tuple[object, ...] | None
    old: tuple[object, ...] | None
    old_kind: Literal["key", "row"] | None
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """A value stored under its documented convention (``unrepresentable.py``), kept exactly.

    Attributes:
        column: the column's name in Delta.
        reason: why the value could not be stored as it is.
        original: the value's PostgreSQL text form.
        stored: the text form of what the column holds instead; None for NULL.
        key: the row's key, column name -> text form, in key order; None for a table
            without a key (its row is found by ``lsn`` and ``ordinal``).
        lsn: commit LSN of the change.
        ordinal: the change's position in its transaction.
        commit_time: commit time (UTC).
    """

    column: str
    reason: Reason
    original: str
    stored: str | None
    key: tuple[tuple[str, str | None], ...] | None
    lsn: Lsn
    ordinal: int
    commit_time: datetime


@dataclass(frozen=True, slots=True)
class MergePlan:
    """Everything a batch does to one table, in order.

    Attributes:
        schema: source schema name.
        table: source table name.
        columns: every column any step writes (latest type wins), for creating the table
            and adding columns.
        uses_row_ids: some step is a ``KeylessStep``, whose rows carry a hidden identity
            (and a stamp in the LSN and ordinal columns).
        steps: applied in order.
        counts: row changes of the batch for this table by operation.
        skipped: UPDATE and DELETE changes dropped because the table has no identity and
            ``on_missing_key`` is ``skip``; not in ``counts``.
        relations: for each step, the Relation message object of its first change (None
            for a TRUNCATE); later changes with an equal message share the step.
        changes: every change of the batch to the table, unfolded, when the plan keeps its
            history (``plan_batch``'s ``history``); empty otherwise.
        rejects: the values of the batch's new rows stored under a convention, in batch
            order, with their exact text (``rejects.py`` keeps them).
    """

    schema: str
    table: str
    columns: tuple[PlanColumn, ...]
    steps: tuple[Step, ...]
    counts: Mapping[str, int]
    skipped: int = 0
    uses_row_ids: bool = False
    relations: tuple[Relation | None, ...] = ()
    changes: tuple[ChangeRecord, ...] = ()
    rejects: tuple[Reject, ...] = ()

    @property
    def qualified_name(self) -> str:
        """``schema.table``."""
        return f"{self.schema}.{self.table}"


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The plans of every table a batch touches, plus its logical decoding messages."""

    tables: tuple[MergePlan, ...]
    messages: tuple[MessageChange, ...]


def plan_batch(
    batch: Batch,
    *,
    keys: Mapping[str, Sequence[str]] | None = None,
    reserved_columns: Iterable[str] = (),
    decoder: ValueDecoder | None = None,
    primary_key: PrimaryKeyLookup | None = None,
    on_missing_key: MissingKeyPolicy = "error",
    generic_values: bool = False,
    column_names: ColumnNamePolicy = "error",
    history: HistoryScope = False,
    columnar: bool = False,
    column_types: Mapping[str, Mapping[str, ColumnTypeOverride]] | None = None,
    on_unrepresentable: Callable[[str], UnrepresentablePolicy] | None = None,
) -> BatchPlan:
    """Plan a batch.

    Args:
        batch: the changes, in commit then ordinal order.
        keys: configured identity columns per qualified table name, used when the relation
            flags no key column (or is REPLICA IDENTITY FULL).
        reserved_columns: metadata column names no source column may use.
        decoder: the value decoder to reuse (one per sink keeps its loader cache warm).
        primary_key: looks up a table's primary key in the source catalog; used, once per
            relation, when neither the relation nor ``keys`` give a key.
        on_missing_key: ``skip`` drops (and counts) an UPDATE or DELETE on a table without
            any identity instead of raising.
        generic_values: convert every value through ``convert_value`` instead of the
            converters resolved once per relation (``column_converter``). The plan is the
            same; this is the reference path that tests and ``bench.plan`` compare with.
        column_names: ``map`` gives a column whose name Delta cannot hold its
            ``naming.mapped_column_name`` (``PlanColumn.name``); ``error`` refuses it.
        history: the tables (qualified names, or all) whose changes ``MergePlan.changes``
            keeps unfolded, for the change history.
        columnar: hold inserts and identity-keeping updates of keyed tables as columns
            (``MergeStep.columnar``, ``columnar.py``) instead of ``PlannedRow`` objects.
            The MERGE source is the same; ``rows`` then holds only the other rows.
        column_types: qualified table name -> source column name -> the type it is stored
            as instead of its mapped one (``typemap.delta_type``'s ``override``).
        on_unrepresentable: qualified table name -> what a legal value its Delta column
            cannot hold does: ``keep`` stores it under its convention and records it in
            ``MergePlan.rejects``; ``stop`` raises. Keep for every table when None.

    Returns:
        One ``MergePlan`` per table in order of first appearance, and the messages.

    Raises:
        SinkDataError: a change cannot be applied as the table's identity stands (update
            or delete without identity and ``on_missing_key`` is ``error``, a configured
            key column missing), a column name collides
            with a metadata column, or a value cannot be stored in its Delta type.
    """

    def plan(with_columns: bool) -> BatchPlan:
        planner = _Planner(
            keys=keys or {},
            reserved=frozenset(reserved_columns),
            decoder=decoder or ValueDecoder(),
            primary_key=primary_key,
            on_missing_key=on_missing_key,
            generic_values=generic_values,
            column_names=column_names,
            history=history,
            columnar=with_columns,
            column_types=column_types or {},
            on_unrepresentable=on_unrepresentable or _keep_all,
        )
        messages: list[MessageChange] = []
        planner.add_changes(batch.changes, messages)
        return BatchPlan(tables=planner.plans(), messages=tuple(messages))

    if columnar:
        try:
            return plan(with_columns=True)
        except (SinkDataError, _ColumnarRefusedError):
            # The row path plans the same batch value by value: it finds the same plan, or
            # raises the exact error - the first in batch order - a row-path plan raises.
            pass
    return plan(with_columns=False)


def _keep_all(_table: str) -> UnrepresentablePolicy:
    return "keep"


class _ColumnarRefusedError(Exception):
    """Some value of a columnar row did not convert column by column (``_freeze_step``)."""


# --- folding ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Shape:
    """Columns and identity of a relation, plus each column's text and binary converter.

    Two shapes are equal when their columns and identity are, whatever their converters
    (which follow from the columns anyway).
    """

    columns: tuple[PlanColumn, ...]
    identity: Identity
    match_indexes: tuple[int, ...]
    text: tuple[Converter, ...] = field(default=(), compare=False, repr=False)
    binary: tuple[Converter, ...] = field(default=(), compare=False, repr=False)


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
    shape: _Shape
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
        )


@dataclass(slots=True)
class _OpenKeylessStep:
    shape: _Shape
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

    def open_step(self, shape: _Shape, lsn: Lsn, relation: Relation) -> _OpenStep:
        last = self.steps[-1] if self.steps else None
        if isinstance(last, _OpenStep) and (last.shape is shape or last.shape == shape):
            return last
        step = _OpenStep(shape, lsn, relation=relation)
        self.steps.append(step)
        return step

    def open_keyless_step(self, shape: _Shape, relation: Relation) -> list[KeylessChange]:
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
    def __init__(
        self,
        *,
        keys: Mapping[str, Sequence[str]],
        reserved: frozenset[str],
        decoder: ValueDecoder,
        primary_key: PrimaryKeyLookup | None = None,
        on_missing_key: MissingKeyPolicy = "error",
        generic_values: bool = False,
        column_names: ColumnNamePolicy = "error",
        history: HistoryScope = False,
        columnar: bool = False,
        column_types: Mapping[str, Mapping[str, ColumnTypeOverride]] | None = None,
        on_unrepresentable: Callable[[str], UnrepresentablePolicy] = _keep_all,
    ) -> None:
        self._history = history
        self._column_types = column_types or {}
        self._on_unrepresentable = on_unrepresentable
        self._pending: list[_Pending] = []
        self._columnar = columnar and not generic_values
        self._keys = keys
        self._column_names: ColumnNamePolicy = column_names
        self._reserved = reserved
        self._decoder = decoder
        self._primary_key = primary_key
        self._skip_keyless = on_missing_key == "skip"
        self._generic_values = generic_values
        self._tables: dict[tuple[str, str], _TablePlan] = {}
        self._shapes: dict[Relation, _Shape] = {}
        self._last_relation: Relation | None = None
        self._last_shape: _Shape | None = None
        self._last_target: tuple[Relation, _TablePlan, _Shape] | None = None
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
            raise _ColumnarRefusedError
        meta = columnar_meta(step.rows.values(), folded, step.columnar_deletes)
        assert meta is not None, "column_arrays answers None without the kernel"
        # Later changes may have replaced some: the others stay, in the order they were folded.
        columnar = columnar_rows(arrays, meta)
        return step.freeze(columnar if len(columnar) else None, meta.others)

    def _prior_values(self, prior: _Row | int, step: _OpenStep) -> list[object]:
        """The values of the row ``prior`` in ``step`` (a columnar row's converted now)."""
        if type(prior) is _Row:
            return prior.values
        assert type(prior) is int, "a step's rows are _Row objects or columnar indexes"
        change = step.columnar_changes[prior]
        return self._decode(change, step.shape, _required(change.new, change, "new"))

    def _table(self, relation: Relation) -> _TablePlan:
        name = (relation.schema_name, relation.relation_name)
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = _TablePlan(*name)
            scope = self._history
            if scope is True or (scope and relation.qualified_name in scope):
                table.changes = []
        return table

    def _row_target(self, relation: Relation) -> tuple[_TablePlan, _Shape]:
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

    def _shape(self, relation: Relation) -> _Shape:
        # Consecutive changes usually share one Relation object; hashing it is not free.
        if relation is self._last_relation and self._last_shape is not None:
            return self._last_shape
        shape = self._shapes.get(relation)
        if shape is None:
            shape = self._shapes[relation] = self._build_shape(relation)
        self._last_relation, self._last_shape = relation, shape
        return shape

    def _build_shape(self, relation: Relation) -> _Shape:
        names = [column.name for column in relation.columns]
        delta_names = _delta_column_names(
            relation.qualified_name, names, self._reserved, self._column_names
        )
        overrides = self._column_types.get(relation.qualified_name, {})
        try:
            columns = tuple(
                PlanColumn(
                    delta_name,
                    c.type_oid,
                    c.type_modifier,
                    delta_type(c.type_oid, c.type_modifier, overrides.get(c.name)),
                    None if delta_name == c.name else c.name,
                )
                for c, delta_name in zip(relation.columns, delta_names, strict=True)
            )
        except ColumnTypeError as exc:
            raise SinkDataError(
                f"sink.column_types of {relation.qualified_name}: {exc}; fix the entry"
            ) from exc
        configured = self._keys.get(relation.qualified_name)
        flagged = [i for i, c in enumerate(relation.columns) if c.is_key]
        identity: Identity
        if relation.replica_identity == "f" or not flagged:
            # pgoutput flags every column under FULL, so a flag says nothing there.
            if configured:
                missing = [name for name in configured if name not in names]
                if missing:
                    raise SinkDataError(
                        f"configured key of {relation.qualified_name} names columns the "
                        f"table does not publish: {', '.join(missing)}; fix sink.keys"
                    )
                identity, match = "key", tuple(names.index(name) for name in configured)
            elif (primary := self._catalog_key(relation, names)) is not None:
                identity, match = "key", primary
            elif relation.replica_identity == "f":
                identity, match = "row", tuple(range(len(columns)))
            else:
                identity, match = "ordinal", ()
        else:
            identity, match = "key", tuple(flagged)
        decoder = self._decoder
        return _Shape(
            columns,
            identity,
            match,
            text=tuple(column_converter(c, ColumnKind.TEXT, decoder) for c in columns),
            binary=tuple(column_converter(c, ColumnKind.BINARY, decoder) for c in columns),
        )

    def _catalog_key(self, relation: Relation, names: Sequence[str]) -> tuple[int, ...] | None:
        """Indexes of the table's primary key columns, when the relation publishes them all."""
        if self._primary_key is None:
            return None
        primary = self._primary_key(relation)
        if not primary or any(name not in names for name in primary):
            # A column list that leaves out part of the primary key cannot match on it.
            return None
        return tuple(names.index(name) for name in primary)

    # --- values ----------------------------------------------------------------------------

    def _decode(self, change: RowChange, shape: _Shape, data: TupleData) -> list[object]:
        """The tuple's Delta values; values stored under a convention wait in ``_pending``
        until ``_take_rejects`` (a new tuple) or the next ``_decode`` (any other)."""
        if self._pending:
            self._pending.clear()
        if self._generic_values:
            return self._decode_generic(change, shape, data)
        wire = data.wire
        if wire is None:
            return self._decode_columns(change, shape, data.values)
        try:
            return load_tuple_wire(*wire, shape.text, shape.binary)
        except Exception:
            # A value that does not convert, a column count that does not match or damaged
            # bytes: the split path raises exactly what the generic path raises for them.
            return self._decode_columns(change, shape, data.values)

    def _decode_columns(
        self, change: RowChange, shape: _Shape, values: tuple[ColumnValue, ...]
    ) -> list[object]:
        """``_decode`` of a tuple already split into columns."""
        self._check_count(change, shape, len(values))
        out: list[object] = []
        append = out.append
        for index, value in enumerate(values):
            kind = value.kind
            data = value.data
            if kind is ColumnKind.NULL:
                append(None)
            elif kind is ColumnKind.UNCHANGED_TOAST:
                append(UNCHANGED_TOAST)
            elif data is None:
                append(self._convert(change, shape.columns[index], kind, data))
            else:
                convert = shape.text[index] if kind is ColumnKind.TEXT else shape.binary[index]
                try:
                    append(convert(data))
                except Exception as exc:
                    append(self._substitute(change, shape.columns[index], kind, data, exc))
        return out

    def _decode_generic(self, change: RowChange, shape: _Shape, data: TupleData) -> list[object]:
        """``_decode`` through ``convert_value`` for every value (``generic_values``)."""
        self._check_count(change, shape, len(data.values))
        out: list[object] = []
        for column, value in zip(shape.columns, data.values, strict=True):
            kind = value.kind
            if kind is ColumnKind.NULL:
                out.append(None)
            elif kind is ColumnKind.UNCHANGED_TOAST:
                out.append(UNCHANGED_TOAST)
            else:
                out.append(self._convert(change, column, kind, value.data))
        return out

    @staticmethod
    def _check_count(change: RowChange, shape: _Shape, count: int) -> None:
        if count != len(shape.columns):
            raise SinkDataError(
                f"a tuple of {change.relation.qualified_name} has {count} columns but its "
                f"relation has {len(shape.columns)} (commit {format_lsn(change.commit_lsn)})"
            )

    def _convert(
        self, change: RowChange, column: PlanColumn, kind: ColumnKind, data: bytes | None
    ) -> object:
        try:
            return convert_value(column, kind, data, self._decoder)
        except Exception as exc:
            if data is None:
                raise _value_error(change, column, exc) from exc
            return self._substitute(change, column, kind, data, exc)

    def _substitute(
        self, change: RowChange, column: PlanColumn, kind: ColumnKind, data: bytes, exc: Exception
    ) -> object:
        """What a value that did not convert is stored as (``unrepresentable.py``).

        Raises:
            SinkDataError: the value is not a legal value its type cannot hold (``exc`` is
                the cause), or it is and the table's policy is ``stop``.
        """
        try:
            found = substitute(column.delta, column.type_oid, kind, data, self._decoder)
        except Exception:
            found = None
        if found is None:
            raise _value_error(change, column, exc) from exc
        table = change.relation.qualified_name
        if self._on_unrepresentable(table) == "stop":
            raise SinkDataError(
                f"cannot store a value of {_where(change, column)} in "
                f"{column.delta.spark_sql}: {_REASON_TEXT[found.reason]} "
                "(sink.on_unrepresentable: stop); store the column as string "
                "(sink.column_types) to keep it exactly, or set sink.on_unrepresentable: keep "
                "to store it under its documented convention"
            ) from exc
        self._pending.append(
            _Pending(column, found.reason, original_text(column.type_oid, kind, data), found.value)
        )
        return found.value

    def _take_rejects(
        self,
        table: _TablePlan,
        change: RowChange,
        shape: _Shape,
        values: Sequence[object],
        commit_time: datetime,
    ) -> None:
        """Record the values of the new tuple just decoded that went under a convention.

        Raises:
            SinkDataError: one of them is an identity column stored as NULL, which would
                match no row.
        """
        pending = self._pending
        if not pending:
            return
        key: tuple[tuple[str, str | None], ...] | None = None
        if shape.identity == "key":
            key = tuple(
                (shape.columns[i].source_name, _key_text(values[i])) for i in shape.match_indexes
            )
            key_columns = {shape.columns[i] for i in shape.match_indexes}
            for entry in pending:
                if entry.stored is None and entry.column in key_columns:
                    raise SinkDataError(
                        f"a value of key {_where(change, entry.column)} cannot be "
                        f"stored in {entry.column.delta.spark_sql} "
                        f"({_REASON_TEXT[entry.reason]}) and a NULL key matches no row; "
                        "store the column as string (sink.column_types)"
                    )
        for entry in pending:
            table.rejects.append(
                Reject(
                    entry.column.name,
                    entry.reason,
                    entry.original,
                    None if entry.stored is None else pg_text_form(entry.stored),
                    key,
                    change.commit_lsn,
                    change.ordinal,
                    commit_time,
                )
            )
        pending.clear()

    # --- folding ---------------------------------------------------------------------------

    def add_changes(self, changes: Sequence[Change], messages: list[MessageChange]) -> None:
        """Plan ``changes`` in order: ``add_row`` for row changes, ``add_other`` for the rest.

        The bulk of a text stream - an insert, an update without an old tuple or a delete,
        of the relation of the change before, with the same commit time, into the step
        that change went to - is folded by ``decoder.fold_text_rows``, in C, as
        ``_add_columnar_row`` folds an insert or update one change at a time (planning
        with the Arrow sources fell from 1.35 to 0.8 µs per change, docs/performance.md;
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
            stop, inserts, updates, deletes = fold_text_rows(
                changes,
                position,
                change.relation,
                change.commit_time,
                step.shape.match_indexes,
                step.shape.text,
                _PLAIN_HASHABLE_TYPES,
                step.rows,
                step.columnar_changes,
                step.columnar_parts,
                step.columnar_deletes,
            )
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

    def _folds_columnar(self, table: _TablePlan, shape: _Shape, step: _OpenStep) -> bool:
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
            new = self._decode(change, shape, _required(change.new, change, "new"))
            self._take_rejects(table, change, shape, new, commit_time)
            identity = self._identity(change, shape, new)
            step.rows[identity] = _Row(
                False, new, None, change.commit_lsn, commit_time, change.ordinal
            )
            if table.changes is not None:
                _record(table.changes, change, commit_time, shape, new, None)
            return
        if shape.identity == "ordinal":
            named = _IDENTITY_NAMES.get(relation.replica_identity, relation.replica_identity)
            raise SinkDataError(
                f"{change.op.upper()} on {relation.qualified_name}, which has no replica "
                f"identity key (REPLICA IDENTITY {named}, commit "
                f"{format_lsn(change.commit_lsn)}): configure its key in sink.keys, "
                "give the table a primary key or REPLICA IDENTITY FULL, or set "
                "source.on_missing_key: skip to drop such changes"
            )
        old = self._decode(change, shape, change.old) if change.old is not None else None
        if change.op == "delete":
            old = _required(old, change, "old")
            identity = self._identity(change, shape, old)
            step.rows[identity] = _Row(
                True, _without_unchanged(old), None, change.commit_lsn, commit_time, change.ordinal
            )
            if table.changes is not None:
                _record(table.changes, change, commit_time, shape, None, old)
            return
        new = self._decode(change, shape, _required(change.new, change, "new"))
        self._take_rejects(table, change, shape, new, commit_time)
        if old is not None:
            full_old = change.old_kind == "O"
            for i in range(len(new)):
                if new[i] is UNCHANGED_TOAST and (full_old or i in shape.match_indexes):
                    new[i] = old[i]
        old_identity = self._identity(change, shape, old if old is not None else new)
        new_identity = self._identity(change, shape, new)
        prior = step.rows.get(old_identity)
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
                _without_unchanged(old if old is not None else new),
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
            if type(identity[0]) not in _PLAIN_HASHABLE:
                return False
        elif any(type(value) not in _PLAIN_HASHABLE for value in identity):
            return False
        # As the row path: an insert takes the identity's place, an update moves it last;
        # no value is unchanged TOAST, so nothing is kept and nothing moves.
        if change.op != "insert":
            step.rows.pop(identity, None)
        step.rows[identity] = len(step.columnar_changes)
        step.columnar_changes.append(change)
        step.columnar_parts.append(wire)
        step.columnar_deletes.append(False)
        return True

    def _add_keyless_row(
        self, change: RowChange, table: _TablePlan, shape: _Shape, commit_time: datetime
    ) -> None:
        """Decode a change of a table without any key; the executor folds (``keyless.py``)."""
        changes = table.open_keyless_step(shape, change.relation)
        lsn, ordinal = change.commit_lsn, change.ordinal
        old: tuple[object, ...] | None = None
        new: tuple[object, ...] | None = None
        if change.op != "insert":
            old = tuple(self._decode(change, shape, _required(change.old, change, "old")))
            if UNCHANGED_TOAST in old:
                raise SinkDataError(
                    f"{change.op.upper()} on {change.relation.qualified_name} sent an old "
                    "row with an unchanged TOAST value; a table without a key is matched on "
                    f"the whole old row (commit {format_lsn(lsn)}), so the change cannot be "
                    "applied"
                )
        if change.op != "delete":
            values = self._decode(change, shape, _required(change.new, change, "new"))
            self._take_rejects(table, change, shape, values, commit_time)
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

    def _identity(
        self, change: RowChange, shape: _Shape, values: Sequence[object]
    ) -> tuple[object, ...]:
        """The dictionary key of a row: its identity values, made hashable."""
        if shape.identity == "ordinal":
            return (change.commit_lsn, change.ordinal)
        match = shape.match_indexes
        if len(match) == 1:
            # A one-column key of a plain type, the common case.
            value = values[match[0]]
            if type(value) in _PLAIN_HASHABLE:
                return (value,)
        out: list[object] = []
        for i in match:
            value = values[i]
            if type(value) in _PLAIN_HASHABLE:
                out.append(value)
                continue
            if value is UNCHANGED_TOAST:
                raise SinkDataError(
                    f"identity column {shape.columns[i].name!r} of "
                    f"{change.relation.qualified_name} arrived as unchanged TOAST without an "
                    f"old value (commit {format_lsn(change.commit_lsn)}); the change cannot "
                    "be matched"
                )
            out.append(hashable(value))
        return tuple(out)


_COLUMNAR_TRIES: Final = 64
"""A step whose first 64 candidate rows all declined the columnar path stops trying it: a
binary-mode stream, whose values the kernel does not gather, would pay for the attempt."""

_IDENTITY_NAMES: Final = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}
_PLAIN_HASHABLE_TYPES: Final = (int, str, bytes, bool, Decimal, date, datetime, type(None))
"""Types of Delta values that ``hashable`` returns unchanged (neither lists nor floats)."""
_PLAIN_HASHABLE: Final = frozenset(_PLAIN_HASHABLE_TYPES)


def _record(  # noqa: PLR0917 - positional on purpose: one call per recorded change
    changes: list[ChangeRecord],
    change: RowChange,
    commit_time: datetime,
    shape: _Shape,
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


@dataclass(frozen=True, slots=True)
class _Pending:
    """A value of the tuple being decoded that went under a convention."""

    column: PlanColumn
    reason: Reason
    original: str
    stored: object


_REASON_TEXT: Final = {
    Reason.INFINITY: "an infinite date or timestamp",
    Reason.OUT_OF_RANGE: "a date or timestamp outside years 1-9999",
    Reason.NOT_FINITE: "NaN or an infinity in a constrained numeric",
    Reason.MULTIDIMENSIONAL: "a multi-dimensional array",
    Reason.LOWER_BOUND: "an array whose lower bound is not 1",
}


def _key_text(value: object) -> str | None:
    if value is None or value is UNCHANGED_TOAST:
        return None
    return pg_text_form(value)


def _value_error(change: RowChange, column: PlanColumn, exc: Exception) -> SinkDataError:
    """The error for a value of ``column`` that did not convert, ``exc`` chained by caller."""
    if isinstance(exc, UnrepresentableValueError | UnknownBinaryFormatError):
        return SinkDataError(f"cannot store a value of {_where(change, column)}: {exc}")
    return SinkDataError(
        f"cannot convert a value of {_where(change, column)} to "
        f"{column.delta.spark_sql}: {cause_line(exc)}"
    )


def _delta_column_names(
    table: str, names: Sequence[str], reserved: frozenset[str], policy: ColumnNamePolicy
) -> list[str]:
    """The Delta names of a relation's columns (``naming``), checked before anything is
    written: each one Delta can hold, none clashing with ours or another, case ignored."""
    folded_reserved = {name.lower() for name in reserved}
    seen: dict[str, str] = {}
    delta_names: list[str] = []
    for name in names:
        delta_name = delta_column_name(name, policy)
        shown = repr(name) if delta_name == name else f"{name!r} (Delta {delta_name!r})"
        folded = delta_name.lower()
        # Spark resolves column names case-insensitively, so case does not tell apart.
        if folded in folded_reserved or folded.startswith(HELPER_PREFIX):
            raise SinkDataError(
                f"column {shown} of {table} collides with a wal2delta metadata column; "
                "rename the metadata columns in the sink configuration"
            )
        if not delta_can_hold(delta_name):
            # Delta tables without column mapping reject these characters in Spark.
            raise SinkDataError(
                f"column {name!r} of {table} contains a character Delta does not allow in "
                "column names (space or one of ,;{}()=, tab, newline); rename the column, "
                f"or set sink.column_names: map to store it as {delta_column_name(name, 'map')!r}"
            )
        if folded in seen:
            raise SinkDataError(
                f"columns {seen[folded]} and {shown} of {table} differ only in case, which "
                "Spark cannot tell apart (nor can sink.column_names: map); rename one of them"
            )
        seen[folded] = shown
        delta_names.append(delta_name)
    return delta_names


def _where(change: RowChange, column: PlanColumn) -> str:
    return (
        f"column {column.name!r} of {change.relation.qualified_name} "
        f"(type OID {column.type_oid}, commit {format_lsn(change.commit_lsn)})"
    )


def _without_unchanged(values: Sequence[object]) -> list[object]:
    return [None if v is UNCHANGED_TOAST else v for v in values]


_T = TypeVar("_T")


def _required(value: _T | None, change: RowChange, which: str) -> _T:
    if value is None:
        raise SinkDataError(
            f"{change.op.upper()} on {change.relation.qualified_name} without its {which} "
            f"tuple (commit {format_lsn(change.commit_lsn)}); the change cannot be applied"
        )
    return value
