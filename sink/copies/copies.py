"""Tables copied while streaming: which are, and what the stream does with their changes.

Theory of operation
-------------------
A table is copied while the stream runs (a table that joined the publications, a
``wal2delta resync`` request, a replaced slot) as PostgreSQL's table sync copies one
(``tablesync.c``): in the snapshot of a temporary slot whose consistent point S splits
its changes in two - those committed before S are in the copy, the others are not. The
copy is written to a staging table and replaces the table in one commit
(``OnlineCopies.finish_copy``), so readers never see it empty or half copied.

What the stream does with a table's changes, by its state here:

* not copied: applied.
* ``copying`` (from the moment the copy is started - before S is even known - until the
  stream has been rewound after the copy landed): **dropped**. The commit LSN of the first
  change dropped holds the acknowledgement (``held_lsn``, the sink's ``BatchResult``), so
  the server sends every dropped change again once the session restarts from the
  acknowledged position.
* ``done`` at S, once the stream was rewound (``rewound``, called when the sink worker is
  replaced for a new session): changes committed before S are **skipped** - the copy holds
  them - and the rest applied, in commit order, as the rewound stream delivers them again.

A copy that lands asks for a rewind (``rewind_due``): the session ends and a new one
starts from the acknowledged position; other tables' changes come again too and are
replayed harmlessly (docs/architecture.md, invariants 2 and 11). Dropping everything
until the rewind - not just the changes before S - keeps each table's changes in commit
order: a change applied early would make the replayed older ones look like replays.

Requests (``wal2delta resync``: a transactional logical decoding message with prefix
``wal2delta.resync`` and a JSON body ``{"tables": ["schema.table", ...]}``, read here in
commit order) and states are kept in ``<path>/_wal2delta_copies``, one row per table,
next to the data: a crash part-way restarts a copy (state ``copying``) or starts a
requested one; ``wal2delta status`` and ``resync --wait`` read it. A request older than the
table's last copy (a message replayed after a crash) is already satisfied and ignored.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

import pyarrow as pa
import structlog

from decoder import Change, Lsn, MessageChange, Relation, RowChange, TruncateChange, cause_line
from sink.base import SinkError
from sink.constants import CONTROL_MESSAGE_PREFIX, COPIES_TABLE
from sink.engine.arrow import ArrowColumn, typed_columns
from sink.engine.spark import engine_errors
from sink.engine.sql import COPY_COLUMNS, delta_table, render_replace_by_key
from sink.lake.deltars import is_delta_table, read_rows
from sink.lake.tables import LakeTables
from sink.values.typemap import BIGINT, STRING, TIMESTAMP

log = structlog.get_logger("wal2delta.sink")

CopyState = Literal["requested", "copying", "done"]
RESYNC_PREFIX: Final = f"{CONTROL_MESSAGE_PREFIX}resync"
"""The logical decoding message prefix of ``wal2delta resync`` requests."""


@dataclass(frozen=True, slots=True)
class TableCopy:
    """The recorded copy state of one table.

    Attributes:
        table: ``schema.table``.
        state: ``requested``, ``copying`` or ``done``.
        consistent_point: for ``done`` the copy's consistent point S; for ``requested``
            the LSN of the request (0 when not from a message); else None.
        reason: why it is copied (``new table``, ``resync``, ``slot lost``...).
    """

    table: str
    state: CopyState
    consistent_point: Lsn | None
    reason: str


def resync_message(tables: Sequence[str]) -> bytes:
    """The body of a ``wal2delta.resync`` message asking to copy ``tables`` again."""
    return json.dumps({"tables": list(tables)}).encode()


class TableCopies:
    """The copy state of every table, shared by the sink worker (``screen``) and the thread
    that copies (``start``, ``finish``); every method is safe from both."""

    def __init__(self, lake: LakeTables, root: str) -> None:
        self._has_table: Callable[[str, str], bool] | None = None
        self._seen_relations: dict[int, Relation] = {}
        """Relation messages whose table was looked at (by id; the objects are kept)."""
        self._known: set[str] = set()
        """Tables found to have a Delta table or a record (looked at once per process)."""
        self._lake = lake
        self._path = f"{root.rstrip('/')}/{COPIES_TABLE}"
        self._lock = threading.RLock()
        self._records: dict[str, TableCopy] | None = None
        self._dropping: dict[str, Lsn | None] = {}
        """Tables whose changes are dropped -> commit LSN of the first one dropped."""
        self._floors: dict[str, Lsn] = {}
        """Tables copied and rewound -> consistent point: older changes are skipped."""
        self._landed: set[str] = set()
        """Tables whose copy landed; dropped until the stream is rewound."""

    @property
    def path(self) -> str:
        """Where the copy states are kept."""
        return self._path

    # --- what the stream does ----------------------------------------------------------

    def screen(self, changes: Sequence[Change]) -> list[Change]:
        """The changes to apply: those of tables being copied dropped, those a finished
        copy already holds skipped, requests in control messages recorded."""
        with self._lock:
            self._load()
            requests = [c for c in changes if _is_request(c)]
            for message in requests:
                assert isinstance(message, MessageChange)
                self._record_request(message)
            if self._has_table is not None:
                self._start_new_tables(changes)
            if not self._dropping and not self._floors:
                return [c for c in changes if not _is_request(c)] if requests else list(changes)
            kept: list[Change] = []
            for change in changes:
                if isinstance(change, RowChange):
                    if self._keeps(change.relation.qualified_name, change.commit_lsn):
                        kept.append(change)
                elif isinstance(change, TruncateChange):
                    relations = tuple(
                        r
                        for r in change.relations
                        if self._keeps(r.qualified_name, change.commit_lsn)
                    )
                    if len(relations) == len(change.relations):
                        kept.append(change)
                    elif relations:
                        kept.append(_truncating(change, relations))
                elif not _is_request(change):
                    kept.append(change)
            return kept

    def copy_new_tables(self, has_table: Callable[[str, str], bool]) -> None:
        """From now on, the first change of a table that has neither a Delta table
        (``has_table(schema, table)``) nor a copy record starts its copy: the table joined
        the publications, and its existing rows must be copied before its changes are
        applied (with ``snapshot.mode: initial``, once the initial snapshot is done)."""
        with self._lock:
            self._has_table = has_table

    def _start_new_tables(self, changes: Sequence[Change]) -> None:
        """Start the copy of every table of ``changes`` with neither a Delta table nor a
        record: it joined the publications, and its first streamed change must not create
        a table without its existing rows (the copy drops the changes until it lands)."""
        assert self._has_table is not None
        assert self._records is not None
        new: list[str] = []
        seen = self._seen_relations
        for change in changes:
            relations: tuple[Relation, ...] = ()
            if isinstance(change, RowChange):
                if id(change.relation) in seen:
                    continue  # the common case: a relation looked at before
                relations = (change.relation,)
            elif isinstance(change, TruncateChange):
                relations = change.relations
            for relation in relations:
                seen[id(relation)] = relation  # kept, so its id is not reused
                name = relation.qualified_name
                if name in self._known or name in new:
                    continue
                if name in self._records or self._has_table(
                    relation.schema_name, relation.relation_name
                ):
                    self._known.add(name)
                else:
                    new.append(name)
        if new:
            log.info("tables joined the publications; copying them", tables=new)
            self.start(new, "new table")
            self._known.update(new)

    def _keeps(self, table: str, commit_lsn: Lsn) -> bool:
        if table in self._dropping:
            first = self._dropping[table]
            if first is None or commit_lsn < first:
                self._dropping[table] = commit_lsn
            return False
        floor = self._floors.get(table)
        return floor is None or commit_lsn >= floor

    @property
    def held_lsn(self) -> Lsn | None:
        """The commit LSN of the oldest change dropped while its table is copied."""
        with self._lock:
            return min((lsn for lsn in self._dropping.values() if lsn is not None), default=None)

    @property
    def rewind_due(self) -> bool:
        """A copy landed: the stream must restart from the acknowledged position."""
        with self._lock:
            return bool(self._landed)

    def rewound(self) -> None:
        """The stream restarts from the acknowledged position: landed copies take effect
        (older changes skipped, newer applied), and copies still running drop what the
        new stream sends them from its first change on."""
        with self._lock:
            for table in self._landed:
                self._dropping.pop(table, None)
            self._landed.clear()
            for table in self._dropping:
                self._dropping[table] = None

    # --- the copies ----------------------------------------------------------------------

    def records(self) -> list[TableCopy]:
        """Every recorded copy state."""
        with self._lock:
            self._load()
            assert self._records is not None
            return list(self._records.values())

    def to_copy(self) -> list[TableCopy]:
        """Tables requested or interrupted part-way, oldest request first."""
        return [r for r in self.records() if r.state != "done"]

    def copying(self) -> list[str]:
        """Tables whose changes are dropped now (copy running or landed, not rewound)."""
        with self._lock:
            self._load()
            return sorted(self._dropping)

    def request(self, tables: Iterable[str], reason: str, at: int = 0) -> None:
        """Record that ``tables`` are to be copied (unless already requested or copying)."""
        with self._lock:
            self._load()
            assert self._records is not None
            wanted = [
                TableCopy(t, "requested", Lsn(at), reason)
                for t in tables
                if (old := self._records.get(t)) is None or old.state == "done"
            ]
            self._save(wanted)

    def start(self, tables: Iterable[str], reason: str) -> None:
        """Drop the changes of ``tables`` from now on: their copies begin."""
        with self._lock:
            self._load()
            started = [TableCopy(t, "copying", None, reason) for t in tables]
            self._save(started)
            for record in started:
                self._dropping.setdefault(record.table, None)
                self._floors.pop(record.table, None)

    def finish(self, table: str, point: Lsn, reason: str) -> None:
        """The copy of ``table`` at ``point`` replaced the table: keep dropping its changes
        until the stream is rewound, then skip those before ``point``."""
        with self._lock:
            self._save([TableCopy(table, "done", point, reason)])
            self._landed.add(table)
            self._floors[table] = point

    def abandon(self, table: str, reason: str) -> None:
        """A copy failed: apply the table's changes again until it is retried (it stays
        requested)."""
        with self._lock:
            self._save([TableCopy(table, "requested", Lsn(0), reason)])
            if table in self._dropping:
                self._landed.add(table)  # what was dropped must come again: rewind

    # --- the record ----------------------------------------------------------------------

    def _record_request(self, message: MessageChange) -> None:
        try:
            body = json.loads(message.content.decode())
            tables = [str(t) for t in body["tables"]]
        except (ValueError, KeyError, TypeError) as exc:
            log.warning(
                "ignoring a malformed resync request",
                prefix=message.prefix,
                lsn=int(message.lsn),
                error=cause_line(exc),
            )
            return
        assert self._records is not None
        fresh = []
        for table in tables:
            old = self._records.get(table)
            if (
                old is not None
                and old.state == "done"
                and (old.consistent_point or 0) > message.lsn
            ):
                continue  # copied after the request: a replayed message
            fresh.append(table)
        if fresh:
            log.info("resync requested", tables=fresh, lsn=int(message.lsn))
            self.request(fresh, "resync", message.lsn)

    def _columns(self) -> list[ArrowColumn]:
        return typed_columns(COPY_COLUMNS, (STRING, STRING, BIGINT, STRING, TIMESTAMP))

    def _load(self) -> None:
        if self._records is not None:
            return
        rows = []
        if is_delta_table(self._path):  # created by the first copy recorded, not before
            with engine_errors("reading the table copy states"):
                rows = self._lake.read(self._path)
        name, state, point, reason, _ = COPY_COLUMNS
        records: dict[str, TableCopy] = {}
        for row in rows:
            stored = row[point]
            record = TableCopy(
                str(row[name]),
                _state(row[state]),
                None if stored is None else Lsn(int(stored)),
                str(row[reason] or ""),
            )
            records[record.table] = record
            if record.state == "copying":
                self._dropping[record.table] = None
            elif record.state == "done" and record.consistent_point is not None:
                self._floors[record.table] = record.consistent_point
        self._records = records

    def _save(self, records: Sequence[TableCopy]) -> None:
        if not records:
            return
        self._load()
        assert self._records is not None
        name, state, point, reason, updated = COPY_COLUMNS
        now = datetime.now(UTC)
        arrow = pa.table(
            {
                name: pa.array([r.table for r in records], STRING.arrow),
                state: pa.array([r.state for r in records], STRING.arrow),
                point: pa.array(
                    [
                        None if r.consistent_point is None else int(r.consistent_point)
                        for r in records
                    ],
                    BIGINT.arrow,
                ),
                reason: pa.array([r.reason for r in records], STRING.arrow),
                updated: pa.array([now] * len(records), TIMESTAMP.arrow),
            }
        )
        with (
            engine_errors("recording table copy states"),
            self._lake.view(arrow, self._columns()) as view,
        ):
            self._lake.ensure_columns(self._path, COPIES_TABLE, self._columns())
            self._lake.sql(
                render_replace_by_key(COPY_COLUMNS, target=delta_table(self._path), view=view)
            )
        for record in records:
            self._records[record.table] = record


def read_copy_records(root: str) -> list[TableCopy]:
    """The copy states recorded in the lake at ``root``, read with delta-rs (for ``wal2delta
    status`` and ``resync --wait``, beside the running daemon); empty when none is."""
    path = f"{root.rstrip('/')}/{COPIES_TABLE}"
    if not is_delta_table(path):
        return []
    name, state, point, reason, _ = COPY_COLUMNS
    return [
        TableCopy(
            str(row[name]),
            _state(row[state]),
            None if row[point] is None else Lsn(int(str(row[point]))),
            str(row[reason] or ""),
        )
        for row in read_rows(path)
    ]


def _is_request(change: Change) -> bool:
    return isinstance(change, MessageChange) and change.prefix == RESYNC_PREFIX


def _truncating(change: TruncateChange, relations: tuple[Relation, ...]) -> TruncateChange:
    return TruncateChange(
        relations=relations,
        cascade=change.cascade,
        restart_identity=change.restart_identity,
        commit_lsn=change.commit_lsn,
        commit_time=change.commit_time,
        ordinal=change.ordinal,
        xid=change.xid,
    )


def _state(stored: object) -> CopyState:
    if stored in ("requested", "copying", "done"):
        return stored
    raise SinkError(f"unknown table copy state {stored!r} in {COPIES_TABLE}")
