"""The rejects table: the exact text of every value stored under a convention.

Theory of operation
-------------------
A legal value its Delta column cannot hold (``unrepresentable.py``) is stored under a
documented convention - a sentinel, NULL, or an array's elements without their lower bound
- and the planner records it (``plan.Reject``). ``RejectsLog`` appends those records to
``<path>/_wal2delta_rejects``, one row per value: the table, the column, the reason, the
value's PostgreSQL text form, the text of what the column holds instead, the row's key
(a JSON object of the key columns' text forms; NULL for a table without a key) and the
change's commit LSN, ordinal and commit time. Users find the originals there, and
``wal2delta verify`` counts a value stored under its convention as equal to its source.

Exactly once across crashes, as the change history (``steps/step_history.py``): changes reach the
sink in (commit LSN, ordinal) order, and a batch's rejects are appended in one commit after
every table of the batch is merged. The table's newest (LSN, ordinal) - its floor, read once
per process - separates what it holds from what it does not, so a replayed batch appends
only what is after it, however it is cut. A crash between the MERGEs and the append loses
nothing: the replayed batch finds the floor below its changes.

An initial snapshot's copy is not ordered that way (ranges are copied in parallel, and a
copy that is restarted writes its rows again), so its rejects are merged instead, on
(table, column, LSN, ordinal): a repeated copy writes nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import structlog

from sink.constants import REJECTS_TABLE
from sink.engine.arrow import ArrowColumn, arrow_table
from sink.engine.spark import engine_errors
from sink.engine.sql import MetadataColumns, delta_table, render_insert_missing
from sink.lake.tables import LakeTables
from sink.planning.plan import Position, Reject
from sink.values.typemap import BIGINT, STRING, TIMESTAMP

log = structlog.get_logger("wal2delta.sink")

TABLE_COLUMN: Final = "table_name"
COLUMN_COLUMN: Final = "column_name"
REASON_COLUMN: Final = "reason"
ORIGINAL_COLUMN: Final = "original"
STORED_COLUMN: Final = "stored"
KEY_COLUMN: Final = "key"


@dataclass(frozen=True, slots=True)
class TableReject:
    """A ``plan.Reject`` with the qualified name of its table."""

    table: str
    reject: Reject


def rejects_path(root: str) -> str:
    """Where the rejects table lives."""
    return f"{root.rstrip('/')}/{REJECTS_TABLE}"


def key_json(key: tuple[tuple[str, str | None], ...] | None) -> str | None:
    """A row's key as the rejects table stores it: a JSON object, key columns in order."""
    return None if key is None else json.dumps(dict(key), ensure_ascii=False)


class RejectsLog:
    """Appends rejected values to ``<path>/_wal2delta_rejects``."""

    def __init__(self, lake: LakeTables, root: str, meta: MetadataColumns) -> None:
        self._lake = lake
        self._path = rejects_path(root)
        self._meta = meta
        self._floor: Position | None = None
        self._loaded = False

    @property
    def path(self) -> str:
        """The rejects table's location."""
        return self._path

    def clear(self) -> None:
        """Forget the floor and the table; the next write reads both again."""
        self._floor = None
        self._loaded = False

    def append(self, rejects: Sequence[TableReject]) -> bool:
        """Append the rejects of one batch, in batch order, after the table's floor.

        Returns:
            Whether the batch had rejects (written now or by an earlier run).

        Raises:
            SinkRetryableError, SinkError: the engine failed; replaying is safe.
        """
        if not rejects:
            return False
        self._load()
        floor = self._floor
        if floor is None:
            floor = self._floor = self._newest()
        # Several tables' rejects in one batch: in position order, so the floor is the last.
        fresh = sorted(
            (r for r in rejects if (r.reject.lsn, r.reject.ordinal) > floor),
            key=lambda r: (r.reject.lsn, r.reject.ordinal),
        )
        if not fresh:
            log.debug("rejects replay skipped", count=len(rejects))
            return True
        arrow = self._arrow(fresh)
        with engine_errors(f"appending to {REJECTS_TABLE}"):
            self._lake.append(self._path, arrow, self._columns())
        last = fresh[-1].reject
        self._floor = (last.lsn, last.ordinal)
        return True

    def merge(self, rejects: Sequence[TableReject]) -> None:
        """Write rejects of an initial snapshot's copy; those already there are skipped.

        Raises:
            SinkRetryableError, SinkError: the engine failed; repeating is safe.
        """
        if not rejects:
            return
        self._load()
        meta = self._meta
        on = (TABLE_COLUMN, COLUMN_COLUMN, meta.lsn, meta.ordinal)
        with (
            engine_errors(f"merging into {REJECTS_TABLE}"),
            self._lake.view(self._arrow(rejects), self._columns()) as view,
        ):
            self._lake.sql(render_insert_missing(on, target=delta_table(self._path), view=view))

    def _load(self) -> None:
        """Create the table unless it exists, once per process (each batch with rejects
        would otherwise pay the engine's create-if-missing and schema read again)."""
        if self._loaded:
            return
        with engine_errors(f"creating or reading {REJECTS_TABLE}"):
            self._lake.load(self._path, REJECTS_TABLE, self._columns())
        self._loaded = True

    def _newest(self) -> Position:
        with engine_errors(f"reading the newest row of {REJECTS_TABLE}"):
            return self._lake.newest_position(delta_table(self._path))

    def _columns(self) -> list[ArrowColumn]:
        meta = self._meta
        text = (STRING.spark_sql, STRING.arrow)
        return [
            ArrowColumn(TABLE_COLUMN, *text),
            ArrowColumn(COLUMN_COLUMN, *text),
            ArrowColumn(REASON_COLUMN, *text),
            ArrowColumn(ORIGINAL_COLUMN, *text),
            ArrowColumn(STORED_COLUMN, *text),
            ArrowColumn(KEY_COLUMN, *text),
            ArrowColumn(meta.lsn, BIGINT.spark_sql, BIGINT.arrow),
            ArrowColumn(meta.ordinal, BIGINT.spark_sql, BIGINT.arrow),
            ArrowColumn(meta.commit_time, TIMESTAMP.spark_sql, TIMESTAMP.arrow),
        ]

    def _arrow(self, rejects: Sequence[TableReject]) -> pa.Table:
        rows = [
            (
                r.table,
                r.reject.column,
                r.reject.reason.value,
                r.reject.original,
                r.reject.stored,
                key_json(r.reject.key),
                int(r.reject.lsn),
                r.reject.ordinal,
                r.reject.commit_time,
            )
            for r in rejects
        ]
        arrays = [list(values) for values in zip(*rows, strict=True)]
        return arrow_table(REJECTS_TABLE, self._columns(), arrays)


__all__ = [
    "COLUMN_COLUMN",
    "KEY_COLUMN",
    "ORIGINAL_COLUMN",
    "REASON_COLUMN",
    "STORED_COLUMN",
    "TABLE_COLUMN",
    "RejectsLog",
    "TableReject",
    "key_json",
    "rejects_path",
]
