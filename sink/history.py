"""The change history of a table: every change, appended next to the merged table.

Theory of operation
-------------------
With ``sink.history``, the plan keeps the changes of the tables it names unfolded
(``plan.ChangeRecord``). After a table's MERGE steps of a batch, ``HistoryWriter``
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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import structlog

from decoder import UNCHANGED_TOAST
from sink.arrow import ArrowColumn, arrow_table, ddl, plan_column
from sink.constants import (
    HISTORY_OLD_KIND_COLUMN,
    HISTORY_OLD_PREFIX,
    HISTORY_OPERATION_COLUMN,
    HISTORY_SUFFIX,
    HISTORY_UNCHANGED_COLUMN,
    HISTORY_XID_COLUMN,
)
from sink.keyless import NO_POSITION, Position
from sink.naming import table_path
from sink.plan import ChangeRecord, MergePlan, PlanColumn
from sink.spark import engine_errors
from sink.sql import MetadataColumns, delta_table, quote
from sink.tables import LakeTables
from sink.typemap import BIGINT, STRING, TIMESTAMP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("wal2delta.sink")

_UNCHANGED = ArrowColumn(HISTORY_UNCHANGED_COLUMN, "ARRAY<STRING>", pa.list_(pa.string()))


def history_path(root: str, schema: str, table: str) -> str:
    """Where the change history of ``schema.table`` lives (``<table>__changes``)."""
    return table_path(root, schema, table + HISTORY_SUFFIX)


def history_name(qualified_name: str) -> str:
    """The name ``wal2delta cut`` and the commit log give a table's history."""
    return qualified_name + HISTORY_SUFFIX


class HistoryWriter:
    """Appends the changes a plan kept to each table's change history."""

    def __init__(
        self, spark: SparkSession, lake: LakeTables, root: str, meta: MetadataColumns
    ) -> None:
        self._spark = spark
        self._lake = lake
        self._root = root
        self._meta = meta
        self._floors: dict[str, Position] = {}

    def clear(self) -> None:
        """Forget the floors; the next write reads them from the tables again."""
        self._floors.clear()

    def write(self, plan: MergePlan) -> str | None:
        """Append the changes of ``plan`` after the history's floor.

        Returns:
            The history's path when the plan kept changes (written or all replays), else
            None.

        Raises:
            SinkDataError: a value does not fit its column.
            SinkRetryableError, SinkError: the engine failed; replaying is safe.
        """
        if not plan.changes:
            return None
        path = history_path(self._root, plan.schema, plan.table)
        name = history_name(plan.qualified_name)
        data = _data_columns(plan.changes)
        columns = self._columns(data)
        floor = self._floors.get(path)
        if floor is None:
            with engine_errors(f"creating or reading the change history {name}"):
                self._lake.load(path, name, columns, data=True)
            floor = self._floors[path] = self._newest(name, path)
        fresh = [c for c in plan.changes if (c.lsn, c.ordinal) > floor]
        if not fresh:
            log.debug("change history replay skipped", table=name, change_count=len(plan.changes))
            return path
        arrow = _arrow(name, columns, [c.name for c in data], fresh)
        with engine_errors(f"appending to the change history {name}"):
            frame = self._spark.createDataFrame(arrow, schema=ddl(columns))
            frame.write.format("delta").mode("append").option("mergeSchema", "true").save(path)
        self._floors[path] = (fresh[-1].lsn, fresh[-1].ordinal)
        return path

    def _newest(self, name: str, path: str) -> Position:
        meta = self._meta
        query = (
            f"SELECT {quote(meta.lsn)} AS l, {quote(meta.ordinal)} AS o FROM "
            f"{delta_table(path)} ORDER BY l DESC, o DESC LIMIT 1"
        )
        with engine_errors(f"reading the newest change of {name}"):
            rows = self._spark.sql(query).collect()
        return (int(rows[0]["l"]), int(rows[0]["o"])) if rows else NO_POSITION

    def _columns(self, data: Sequence[PlanColumn]) -> list[ArrowColumn]:
        """The metadata columns, then the data columns, then the old ones."""
        meta = self._meta
        columns = [
            ArrowColumn(HISTORY_OPERATION_COLUMN, STRING.spark_sql, STRING.arrow),
            ArrowColumn(meta.lsn, BIGINT.spark_sql, BIGINT.arrow),
            ArrowColumn(meta.ordinal, BIGINT.spark_sql, BIGINT.arrow),
            ArrowColumn(meta.commit_time, TIMESTAMP.spark_sql, TIMESTAMP.arrow),
            ArrowColumn(HISTORY_XID_COLUMN, BIGINT.spark_sql, BIGINT.arrow),
            ArrowColumn(HISTORY_OLD_KIND_COLUMN, STRING.spark_sql, STRING.arrow),
            _UNCHANGED,
        ]
        columns += [plan_column(c) for c in data]
        columns += [
            ArrowColumn(HISTORY_OLD_PREFIX + c.name, c.delta.spark_sql, c.delta.arrow) for c in data
        ]
        return columns


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
