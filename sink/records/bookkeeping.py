"""The lake's bookkeeping tables, next to the data they describe.

- ``<path>/_wal2delta_snapshots``: per replication slot, whether the initial snapshot of
  the tables finished (``capture.snapshot.SnapshotMarkerStore``), so a lake copied or
  restored elsewhere carries its own snapshot state.
- ``<path>/_wal2delta_columns``: which source attribute (``attnum``) each Delta column
  came from (``evolution.ColumnOrigin``), so renames are told from drops.
- ``<path>/_wal2delta_messages``: logical decoding messages, with ``sink.messages: table``.

The names are ``constants.SNAPSHOTS_TABLE``, ``COLUMNS_TABLE`` and ``MESSAGES_TABLE``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime

import pyarrow as pa

from decoder import Lsn, MessageChange, pg_timestamp_to_datetime
from sink.base import SinkError, SnapshotMarker, SnapshotStatus
from sink.constants import COLUMNS_TABLE, MESSAGES_TABLE, SNAPSHOTS_TABLE
from sink.engine.arrow import ArrowColumn, arrow_table, typed_columns
from sink.engine.spark import engine_errors
from sink.engine.sql import (
    COLUMN_ORIGIN_COLUMNS,
    MESSAGE_COLUMNS,
    SNAPSHOT_COLUMNS,
    MetadataColumns,
    delta_table,
    render_column_origins_merge,
    render_messages_merge,
    render_snapshot_marker_merge,
)
from sink.lake.tables import LakeTables
from sink.planning.evolution import ColumnOrigin
from sink.values.typemap import BIGINT, BINARY, BOOLEAN, STRING, TIMESTAMP


class Bookkeeping:
    """Reads and writes the bookkeeping tables under the lake's root ``root``."""

    def __init__(self, lake: LakeTables, root: str, meta: MetadataColumns) -> None:
        self._lake = lake
        self._root = root.rstrip("/")
        self._meta = meta
        self._origins: dict[tuple[str, str], dict[str, ColumnOrigin]] | None = None
        self._stored_origins: set[tuple[str, str, str]] = set()
        """The (schema, table, column) rows the record holds: read with ``_origins``, and
        extended by every flush since."""
        self._origins_lock = threading.RLock()
        self._pending_origins: dict[tuple[str, str], dict[str, ColumnOrigin]] = {}
        """Origins recorded and not yet written (``flush_column_origins``)."""

    def clear(self) -> None:
        """Forget the column origins read so far; the next look reads them again."""
        self._origins = None

    def _table(self, name: str, columns: list[ArrowColumn]) -> tuple[str, list[ArrowColumn]]:
        """The path of the bookkeeping table ``name``, made to hold ``columns``."""
        path = f"{self._root}/{name}"
        self._lake.ensure_columns(path, name, columns)
        return path, columns

    # --- snapshot markers (capture.snapshot.SnapshotMarkerStore) ---------------------------

    def _snapshots(self) -> tuple[str, list[ArrowColumn]]:
        types = (STRING, STRING, BIGINT, TIMESTAMP)
        return self._table(SNAPSHOTS_TABLE, typed_columns(SNAPSHOT_COLUMNS, types))

    def load_snapshot_marker(self, slot: str) -> SnapshotMarker | None:
        """The recorded snapshot state of ``slot``, or None when nothing is recorded.

        Raises:
            SinkError: the markers table could not be read.
        """
        path, _ = self._snapshots()
        with engine_errors("reading snapshot markers"):
            # One row per slot: reading the whole table is cheaper than a filtered plan.
            rows = self._lake.read(path)
        name, status, point, _ = SNAPSHOT_COLUMNS
        for row in rows:
            if row[name] == slot:
                return SnapshotMarker(slot, _status(row[status]), Lsn(int(row[point])))
        return None

    def save_snapshot_marker(self, marker: SnapshotMarker) -> None:
        """Record the snapshot state of ``marker.slot``, replacing any earlier record.

        Raises:
            SinkError: the marker could not be written.
        """
        path, columns = self._snapshots()
        name, status, point, updated = SNAPSHOT_COLUMNS
        arrow = pa.table(
            {
                name: pa.array([marker.slot], STRING.arrow),
                status: pa.array([marker.status], STRING.arrow),
                point: pa.array([int(marker.consistent_point)], BIGINT.arrow),
                updated: pa.array([datetime.now(UTC)], TIMESTAMP.arrow),
            }
        )
        with engine_errors("writing a snapshot marker"), self._lake.view(arrow, columns) as view:
            self._lake.sql(render_snapshot_marker_merge(target=delta_table(path), view=view))

    # --- column origins (evolution.ColumnOrigin) -------------------------------------------

    def _origins_table(self) -> tuple[str, list[ArrowColumn]]:
        # schema, table, column, attnum, table oid, since LSN, updated
        types = (STRING, STRING, STRING, BIGINT, BIGINT, BIGINT, TIMESTAMP)
        return self._table(COLUMNS_TABLE, typed_columns(COLUMN_ORIGIN_COLUMNS, types))

    def column_origins(self, schema: str, table: str) -> dict[str, ColumnOrigin]:
        """The recorded origins of the Delta columns of ``schema.table``, by Delta name.

        The whole record is read once per sink: it holds a row per Delta column. Safe from
        the threads that apply several tables at once (``sink.concurrency``).
        """
        with self._origins_lock:
            return self._column_origins(schema, table)

    def _column_origins(self, schema: str, table: str) -> dict[str, ColumnOrigin]:
        if self._origins is None:
            path, _ = self._origins_table()
            with engine_errors("reading the column origins"):
                rows = self._lake.read(path)
            names = COLUMN_ORIGIN_COLUMNS
            origins: dict[tuple[str, str], dict[str, ColumnOrigin]] = {}
            for row in rows:
                since = row[names[5]]
                origins.setdefault((str(row[names[0]]), str(row[names[1]])), {})[
                    str(row[names[2]])
                ] = ColumnOrigin(
                    int(row[names[3]]), int(row[names[4]]), None if since is None else int(since)
                )
            self._origins = origins
            self._stored_origins = {
                (schema, table, name)
                for (schema, table), entries in origins.items()
                for name in entries
            }
        return self._origins.get((schema, table), {})

    def record_column_origins(
        self, schema: str, table: str, entries: Sequence[tuple[str, ColumnOrigin]]
    ) -> None:
        """Record (replace) the origins of some Delta columns of ``schema.table``.

        Kept until ``flush_column_origins``, which writes every table's records of a batch
        in one commit: every table's origins are rows of one Delta table, and a MERGE per
        table would read all of its files each time - with 1,000 new tables a million file
        reads (issue 31). The cache answers ``column_origins`` with them at once.
        """
        with self._origins_lock:
            self._column_origins(schema, table)  # the record is read before it is extended
            key = (schema, table)
            pending = self._pending_origins.setdefault(key, {})
            pending.update(entries)
            assert self._origins is not None
            self._origins.setdefault(key, {}).update(entries)

    def flush_column_origins(self) -> str | None:
        """Write the origins recorded since the last flush in one commit; return the
        record's location when it was written (for the compactor), else None.

        Rows the record cannot hold yet (none of their columns was read from it or written
        to it since: the new tables of a batch) are appended; otherwise one MERGE replaces
        the rows it holds. Rows a failed flush tried to write count as held from then on, as
        it may have committed them: their next flush merges
        (``docs/decisions/0133-the-origins-of-new-columns-are-appended.md``).

        Raises:
            SinkError: they could not be written (they stay pending).
        """
        with self._origins_lock:
            if not self._pending_origins:
                return None
            path, columns = self._origins_table()
            now = datetime.now(UTC)
            keys: list[tuple[str, str, str]] = []
            arrays: list[list[object]] = [[] for _ in columns]
            for (schema, table), entries in self._pending_origins.items():
                for name, origin in entries.items():
                    keys.append((schema, table, name))
                    row = (
                        schema,
                        table,
                        name,
                        origin.attnum,
                        origin.table_oid,
                        origin.since_lsn,
                        now,
                    )
                    for values, value in zip(arrays, row, strict=True):
                        values.append(value)
            arrow = arrow_table(COLUMNS_TABLE, columns, arrays)
            new_rows = self._stored_origins.isdisjoint(keys)
            self._stored_origins.update(keys)  # a write that failed may have committed
            with engine_errors("recording the column origins"):
                if new_rows:
                    self._lake.append(path, arrow, columns)
                else:
                    with self._lake.view(arrow, columns) as view:
                        target = delta_table(path)
                        self._lake.sql(render_column_origins_merge(target=target, view=view))
            self._pending_origins.clear()
            return path

    def forget_unwritten_origins(self) -> None:
        """A batch failed before its origins were written: forget them, and read the record
        again next time (the replayed batch records them again)."""
        with self._origins_lock:
            if self._pending_origins:
                self._pending_origins.clear()
                self._origins = None

    # --- logical decoding messages (sink.messages: table) -----------------------------------

    def write_messages(self, messages: Sequence[MessageChange]) -> None:
        """Merge ``messages`` into the messages table (a replay rewrites the same rows)."""
        meta = self._meta
        name_lsn, name_prefix, name_content, name_transactional = MESSAGE_COLUMNS
        path, columns = self._table(
            MESSAGES_TABLE,
            typed_columns(
                (*MESSAGE_COLUMNS, meta.lsn, meta.commit_time),
                (BIGINT, STRING, BINARY, BOOLEAN, BIGINT, TIMESTAMP),
            ),
        )
        arrow = pa.table(
            {
                name_lsn: pa.array([m.lsn for m in messages], BIGINT.arrow),
                name_prefix: pa.array([m.prefix for m in messages], STRING.arrow),
                name_content: pa.array([bytes(m.content) for m in messages], BINARY.arrow),
                name_transactional: pa.array([m.transactional for m in messages], BOOLEAN.arrow),
                # A non-transactional message has no commit; its own LSN orders it.
                meta.lsn: pa.array(
                    [m.lsn if m.commit_lsn is None else m.commit_lsn for m in messages],
                    BIGINT.arrow,
                ),
                meta.commit_time: pa.array(
                    [
                        None if m.commit_time is None else pg_timestamp_to_datetime(m.commit_time)
                        for m in messages
                    ],
                    TIMESTAMP.arrow,
                ),
            }
        )
        with (
            engine_errors("writing logical decoding messages"),
            self._lake.view(arrow, columns) as view,
        ):
            self._lake.sql(render_messages_merge(meta, target=delta_table(path), view=view))


def _status(stored: object) -> SnapshotStatus:
    """A stored marker status, checked: the table is ours, but a hand edit is possible."""
    if stored == "complete":
        return "complete"
    if stored == "in_progress":
        return "in_progress"
    raise SinkError(f"{SNAPSHOTS_TABLE} holds an unknown snapshot status {stored!r}")
