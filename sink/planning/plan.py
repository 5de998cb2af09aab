"""The plan of a batch: what ``fold.plan_batch`` produces and the executors apply. Pure data.

A ``BatchPlan`` holds one ``MergePlan`` per table a batch touches, in order of first
appearance, and the batch's logical decoding messages. A ``MergePlan`` is a sequence of
steps applied strictly in order (docs/architecture.md, invariant 3): a ``TruncateStep``, a
``MergeStep`` of rows of one relation shape keyed by the table's identity (``PlannedRow``
objects, plus ``ColumnarRows`` held as Arrow columns), or a ``KeylessStep`` of changes to a
table without any key (``keyless.py`` folds them). Besides the steps it keeps what the
executors report or write next to the table: the counts per operation, the skipped changes,
the unfolded changes of a table with a change history (``ChangeRecord``), and the values
stored under a convention (``Reject``).

``PlanOptions`` is the planner's one options object; ``DeltaSink`` builds it once from the
sink settings. How a relation becomes columns and an identity is ``shape.py``; how
changes fold into steps is ``fold.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Final, Literal

import pyarrow as pa

from decoder import Lsn, MessageChange, Relation
from sink.constants import (
    ColumnNamePolicy,
    ColumnTypeOverride,
    MissingKeyPolicy,
    UnrepresentablePolicy,
)
from sink.values.typemap import PlanColumn
from sink.values.unrepresentable import Reason

Identity = Literal["key", "row", "ordinal"]
PrimaryKeyLookup = Callable[[Relation], Sequence[str]]
"""Relation -> its table's primary key columns (empty when none), from the source catalog."""

HELPER_PREFIX: Final = "__w2d_"
"""Prefix of the source-only helper columns of a MERGE; no table column may start with it."""


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
class ColumnarRows:
    """Rows of a merge step held as columns: upserted or deleted, none keeping a column.

    Attributes:
        values: one array per step column, of the column's Delta (Arrow) type; a deleted
            row's are its old tuple's (the key, the other columns NULL unless REPLICA
            IDENTITY FULL sent them), as the row path plans a delete.
        lsns: commit LSN of each row's last change (BIGINT).
        commit_times: commit time of that change (TIMESTAMP, UTC).
        ordinals: ordinal of that change in its transaction (BIGINT).
        deletes: whether that change deleted the row (BOOLEAN).
    """

    values: tuple[pa.Array, ...]
    lsns: pa.Array
    commit_times: pa.Array
    ordinals: pa.Array
    deletes: pa.Array

    def __len__(self) -> int:
        return len(self.lsns)


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
        only_new_keys: the identity is a key the source keeps unique
            (``shape.Shape.unique_key``) and every identity's first change in the step is
            an INSERT: none of the step's rows can be in a table that equals the source as
            of the step's start (``step_append.py`` decides whether that holds).
    """

    columns: tuple[PlanColumn, ...]
    identity: Identity
    match_indexes: tuple[int, ...]
    rows: tuple[PlannedRow, ...]
    first_lsn: Lsn
    columnar: ColumnarRows | None = None
    only_new_keys: bool = False
    row_count: int = field(init=False, repr=False, compare=False)
    """Rows in the step: ``rows`` and the columnar ones."""
    match_columns: tuple[PlanColumn, ...] = field(init=False, repr=False, compare=False)
    """The identity columns."""
    kept_indexes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """Indexes of the columns that some row keeps, in column order."""
    has_moved_keeps: bool = field(init=False, repr=False, compare=False)
    """Whether a row must read kept columns from another target row."""

    def __post_init__(self) -> None:
        # Derived once, when the planner freezes the step: the executors and the SQL
        # renderer read them as plain data.
        rows = self.rows
        derived = {
            "row_count": len(rows) + (0 if self.columnar is None else len(self.columnar)),
            "match_columns": tuple(self.columns[i] for i in self.match_indexes),
            "kept_indexes": tuple(sorted(frozenset().union(*[row.keep for row in rows]))),
            "has_moved_keeps": any(row.moved_from is not None for row in rows),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


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


Position = tuple[int, int]
"""(commit LSN, ordinal): where a change stands in the stream; totally ordered."""

NO_POSITION: Position = (-1, -1)
"""Before every change: the floor of an empty table."""


@dataclass(frozen=True, slots=True)
class KeylessChange:
    """One decoded change of a keyless table.

    Attributes:
        old: the whole old row (UPDATE, DELETE); None for an INSERT.
        new: the new row (INSERT, UPDATE); None for a DELETE.
        lsn: commit LSN of the change's transaction.
        ordinal: the change's position in its transaction.
        commit_time: commit time (UTC).
    """

    old: tuple[object, ...] | None
    new: tuple[object, ...] | None
    lsn: Lsn
    ordinal: int
    commit_time: datetime

    @property
    def position(self) -> Position:
        """Where the change stands."""
        return (self.lsn, self.ordinal)


@dataclass(frozen=True, slots=True)
class KeylessStep:
    """Changes of one keyless relation shape, applied by one MERGE (see the module docstring).

    Attributes:
        columns: the relation's columns, in relation order.
        changes: the decoded changes, in stream order; folded by the executor once it
            knows the table's floor.
    """

    identity: ClassVar[Literal["row"]] = "row"

    columns: tuple[PlanColumn, ...]
    changes: tuple[KeylessChange, ...]

    @property
    def first_lsn(self) -> Lsn:
        """Commit LSN of the step's first change (what schema evolution needs)."""
        return self.changes[0].lsn

    @property
    def last_position(self) -> Position:
        """Where the step's last change stands."""
        return self.changes[-1].position


Step = MergeStep | KeylessStep | TruncateStep


@dataclass(frozen=True, slots=True)
class HistoryStep:
    """The changes of one table a batch keeps for its change history
    (``steps/step_history.py``): every change, unfolded, in commit order.

    Attributes:
        schema: source schema name.
        table: source table name.
        changes: the changes (``MergePlan.changes``).
    """

    schema: str
    table: str
    changes: tuple[ChangeRecord, ...]


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
    qualified_name: str = field(init=False, repr=False, compare=False)
    """``schema.table``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "qualified_name", f"{self.schema}.{self.table}")


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The plans of every table a batch touches, plus its logical decoding messages."""

    tables: tuple[MergePlan, ...]
    messages: tuple[MessageChange, ...]


def _keep_all(_table: str) -> UnrepresentablePolicy:
    return "keep"


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """How ``fold.plan_batch`` plans: the planner's one options object.

    Attributes:
        keys: configured identity columns per qualified table name, used when the relation
            flags no key column (or is REPLICA IDENTITY FULL).
        reserved_columns: metadata column names no source column may use.
        primary_key: looks up a table's primary key in the source catalog; used, once per
            relation, when neither the relation nor ``keys`` give a key.
        on_missing_key: ``skip`` drops (and counts) an UPDATE or DELETE on a table without
            any identity instead of raising.
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
            ``MergePlan.rejects``; ``stop`` raises.
        generic_values: convert every value through ``convert.convert_value`` instead of
            the converters resolved once per relation. The plan is the same; this is the
            reference path that tests and ``bench.plan`` compare with.
    """

    keys: Mapping[str, Sequence[str]] = field(default_factory=dict)
    reserved_columns: Iterable[str] = ()
    primary_key: PrimaryKeyLookup | None = None
    on_missing_key: MissingKeyPolicy = "error"
    column_names: ColumnNamePolicy = "error"
    history: HistoryScope = False
    columnar: bool = False
    column_types: Mapping[str, Mapping[str, ColumnTypeOverride]] = field(default_factory=dict)
    on_unrepresentable: Callable[[str], UnrepresentablePolicy] = _keep_all
    generic_values: bool = False
