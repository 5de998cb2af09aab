"""The change history of a table: every change, appended next to the merged table.

Theory of operation
-------------------
With ``sink.history``, the plan keeps the changes of the tables it names unfolded
(``plan.ChangeRecord``). After a table's MERGE steps of a batch, ``HistoryExecutor``
appends them to ``<path>/<schema>/<table>__changes``: one row per change with its
operation, commit LSN, ordinal, commit time and transaction id (``_wal2delta_xid``), the
new row in the table's own columns (typed as in the merged table), the old key or old row
in ``_wal2delta_old_<column>`` when the server sent one, and which kind it was.

Exactly once across crashes: changes reach the sink in (commit LSN, ordinal) order, and a
table's changes of a batch are appended in one commit after the commits of every earlier
batch. So the history's newest (LSN, ordinal) - its *floor*, read from the table once per
process and then carried along - separates what it holds from what it does not: a
replayed batch, however it is cut, appends only its changes after the floor. A crash
between the MERGE and the append loses nothing either: the replay's MERGE is a no-op and
its append finds the floor below the batch.

Unchanged TOAST values (``'u'``) are filled from the old row (REPLICA IDENTITY FULL) or an
earlier change of the row in the same batch; a value still unknown is NULL and its column
is named in ``_wal2delta_unchanged_toast`` (the value is that of the row's previous
change). The history follows the table's columns: a new column is added with
``mergeSchema`` on the append; columns a change does not have are NULL in its row.

Column names
------------
A history holds three kinds of columns in one namespace, compared without case as Spark
does: its own (``_wal2delta_op``, ``_wal2delta_xid``, ``_wal2delta_old_kind``,
``_wal2delta_unchanged_toast`` and the LSN, ordinal and commit time columns), the new
value of each table column, and its old value. ``new_value_column`` and
``old_value_column`` name the last two from the column's name alone (so a column keeps
its history columns whatever other columns the table gains), and no two names they and
the own columns give are ever equal:

* the new value of ``c`` is ``c``; when ``c`` is one of the history's own names or starts
  with ``_wal2delta_old_`` or ``_wal2delta_new_``, it is ``_wal2delta_new_<c>`` instead;
* the old value of ``c`` is ``_wal2delta_old_<c>``; when ``c`` is ``kind`` after any
  number of ``_`` (``kind``, ``_kind``, ...), one more ``_`` goes before it
  (``_wal2delta_old__kind``), since ``_wal2delta_old_kind`` is the history's own.

Plain new names neither start with a prefix nor are own names; escaped new names all start
with ``_wal2delta_new_``, which no own name does; old names all start with
``_wal2delta_old_``, and the extra underscore keeps distinct names distinct (``_^n kind``
becomes ``_^(n+1) kind``) while no old name is ``_wal2delta_old_kind`` any more. Every
name written before keeps its place except the old value of ``_kind``-like columns and
the new value of columns named ``_wal2delta_old_*`` or ``_wal2delta_new_*``
(docs/decisions/0094-a-change-history-names-a-columns-values.md); a column ``kind`` or
named like an own column never had a history.
The LSN, ordinal and commit time names come from the configuration: no source column may
take them (the planner refuses it), and one that starts with a prefix above or repeats an
own name is refused at the table's first history write (``history_columns``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pyarrow as pa
import structlog

from decoder import UNCHANGED_TOAST
from sink.base import SinkDataError
from sink.constants import (
    HISTORY_NEW_PREFIX,
    HISTORY_OLD_KIND_COLUMN,
    HISTORY_OLD_PREFIX,
    HISTORY_OPERATION_COLUMN,
    HISTORY_UNCHANGED_COLUMN,
    HISTORY_XID_COLUMN,
)
from sink.engine.arrow import ArrowColumn, arrow_table
from sink.engine.spark import engine_errors
from sink.engine.sql import MetadataColumns, delta_table
from sink.lake.tables import LakeTables
from sink.planning.plan import ChangeRecord, HistoryStep, Position
from sink.steps.executor import StepOutcome, TableTarget
from sink.values.naming import history_name, history_path
from sink.values.typemap import BIGINT, STRING, TIMESTAMP, PlanColumn

log = structlog.get_logger("wal2delta.sink")

_UNCHANGED = ArrowColumn(HISTORY_UNCHANGED_COLUMN, "ARRAY<STRING>", pa.list_(pa.string()))

OWN_COLUMNS: Final = (
    HISTORY_OPERATION_COLUMN,
    HISTORY_XID_COLUMN,
    HISTORY_OLD_KIND_COLUMN,
    HISTORY_UNCHANGED_COLUMN,
)
"""The history's own columns whose names are fixed (the LSN, ordinal and commit time
columns are named by the configuration)."""
_OWN_FOLDED: Final = frozenset(name.lower() for name in OWN_COLUMNS)
_VALUE_PREFIXES: Final = (HISTORY_OLD_PREFIX.lower(), HISTORY_NEW_PREFIX.lower())
_OWN_OLD_SUFFIXES: Final = frozenset(
    name[len(HISTORY_OLD_PREFIX) :]
    for name in _OWN_FOLDED
    if name.startswith(HISTORY_OLD_PREFIX.lower())
)
"""What follows the old-value prefix in the own names that have it: ``kind`` (none starts
with ``_``, which ``old_value_column``'s extra underscore relies on)."""


def new_value_column(name: str) -> str:
    """The history column of the new value of the table column ``name``.

    ``name`` itself, or ``_wal2delta_new_<name>`` when ``name`` is one of the history's own
    names or starts with the old- or new-value prefix (case ignored; module doc).
    """
    folded = name.lower()
    if folded in _OWN_FOLDED or folded.startswith(_VALUE_PREFIXES):
        return HISTORY_NEW_PREFIX + name
    return name


def old_value_column(name: str) -> str:
    """The history column of the old value of the table column ``name``.

    ``_wal2delta_old_<name>``, with one more ``_`` before ``name`` when ``name`` is ``kind``
    after any number of ``_`` (case ignored): ``_wal2delta_old_kind`` is the history's own.
    """
    if name.lower().lstrip("_") in _OWN_OLD_SUFFIXES:
        return HISTORY_OLD_PREFIX + "_" + name
    return HISTORY_OLD_PREFIX + name


def history_columns(
    name: str, meta: MetadataColumns, data: Sequence[PlanColumn]
) -> list[ArrowColumn]:
    """The columns of the history ``name`` of a table with the columns ``data``, in order:
    the own columns, the new values, the old values.

    Raises:
        SinkDataError: a configured metadata column name (``sink.metadata``) clashes with
            another column of the history; no table column name can (module doc).
    """
    columns = [
        ArrowColumn(HISTORY_OPERATION_COLUMN, STRING.spark_sql, STRING.arrow),
        ArrowColumn(meta.lsn, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(meta.ordinal, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(meta.commit_time, TIMESTAMP.spark_sql, TIMESTAMP.arrow),
        ArrowColumn(HISTORY_XID_COLUMN, BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn(HISTORY_OLD_KIND_COLUMN, STRING.spark_sql, STRING.arrow),
        _UNCHANGED,
    ]
    columns += [
        ArrowColumn(new_value_column(c.name), c.delta.spark_sql, c.delta.arrow) for c in data
    ]
    columns += [
        ArrowColumn(old_value_column(c.name), c.delta.spark_sql, c.delta.arrow) for c in data
    ]
    seen: set[str] = set()
    for column in columns:
        folded = column.name.lower()
        if folded in seen:
            configured = (meta.lsn, meta.ordinal, meta.commit_time)
            raise SinkDataError(
                f"the change history {name} would hold two columns named {column.name!r} (case "
                f"ignored); the metadata column names {', '.join(map(repr, configured))} "
                "(sink.metadata) must not start with "
                f"{HISTORY_OLD_PREFIX!r} or {HISTORY_NEW_PREFIX!r} nor repeat "
                f"{', '.join(map(repr, OWN_COLUMNS))}"
            )
        seen.add(folded)
    return columns


class HistoryExecutor:
    """Appends the changes a plan kept to each table's change history: the executor of
    ``HistoryStep`` (``executor.py``'s contract)."""

    def __init__(self, lake: LakeTables, root: str, meta: MetadataColumns) -> None:
        self._lake = lake
        self._root = root
        self._meta = meta
        self._floors: dict[str, Position] = {}

    def clear(self) -> None:
        """Forget the floors; the next write reads them from the tables again."""
        self._floors.clear()

    def apply(self, target: TableTarget, step: HistoryStep) -> StepOutcome:
        """Append the changes of ``step`` after the history's floor; the outcome's
        ``location`` is the history's path (also when every change was a replay).

        Raises:
            SinkDataError: a value does not fit its column, or a configured metadata
                column name clashes with the history's columns (``history_columns``).
            SinkRetryableError, SinkError: the engine failed; replaying is safe.
        """
        path = history_path(self._root, step.schema, step.table)
        name = history_name(target.name)
        data = _data_columns(step.changes)
        columns = history_columns(name, self._meta, data)
        floor = self._floors.get(path)
        if floor is None:
            with engine_errors(f"creating or reading the change history {name}"):
                self._lake.load(path, name, columns, data=True)
            floor = self._floors[path] = self._newest(name, path)
        fresh = [c for c in step.changes if (c.lsn, c.ordinal) > floor]
        if not fresh:
            log.debug("change history replay skipped", table=name, change_count=len(step.changes))
            return StepOutcome("none", location=path)
        arrow = _arrow(name, columns, [c.name for c in data], fresh)
        with engine_errors(f"appending to the change history {name}"):
            self._lake.append(path, arrow, columns, merge_schema=True)
        self._floors[path] = (fresh[-1].lsn, fresh[-1].ordinal)
        return StepOutcome("append", location=path)

    def _newest(self, name: str, path: str) -> Position:
        with engine_errors(f"reading the newest change of {name}"):
            return self._lake.newest_position(delta_table(path))


def _data_columns(changes: Sequence[ChangeRecord]) -> list[PlanColumn]:
    """Every column any change has, by name, the latest type winning."""
    data: dict[str, PlanColumn] = {}
    for change in changes:
        for column in change.columns:
            data[column.name] = column
    return list(data.values())


def _arrow(
    name: str, columns: Sequence[ArrowColumn], names: Sequence[str], changes: Sequence[ChangeRecord]
) -> pa.Table:
    """The history rows of ``changes``: ``columns`` with ``names`` the data columns."""
    arrays: list[list[object]] = [[] for _ in columns]
    for change in changes:
        new: dict[str, object] = {}
        old: dict[str, object] = {}
        unchanged: list[str] = []
        for index, column in enumerate(change.columns):
            if change.new is not None:
                value = change.new[index]
                if value is UNCHANGED_TOAST:
                    unchanged.append(column.name)
                    value = None
                new[column.name] = value
            if change.old is not None:
                value = change.old[index]
                old[column.name] = None if value is UNCHANGED_TOAST else value
        row = [
            change.op,
            change.lsn,
            change.ordinal,
            change.commit_time,
            change.xid,
            change.old_kind,
            unchanged or None,
            *(new.get(n) for n in names),
            *(old.get(n) for n in names),
        ]
        for values, value in zip(arrays, row, strict=True):
            values.append(value)
    return arrow_table(name, columns, arrays)
