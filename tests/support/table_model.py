"""Dictionary models of a Delta table, for checking MERGE plans without Spark.

``apply_plan`` executes a ``BatchPlan`` with exactly the semantics of the SQL that
``sink.sql`` renders (match on identity, LSN guard, kept columns, moved rows read from the
pre-merge snapshot, anomalies not inserted, soft deletes as tombstones). ``replay_changes``
is the simplest correct reading of the stream: one change at a time, in order. The unit
tests check that both agree, and that replays are harmless.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from decoder import UNCHANGED_TOAST, RowChange, TruncateChange, ValueDecoder
from decoder.lsn import pg_timestamp_to_datetime
from sink import Batch
from sink.planning.keyless import Candidate, assign_takes, fold, row_key
from sink.planning.plan import (
    NO_POSITION,
    BatchPlan,
    KeylessStep,
    MergeStep,
    PlannedRow,
    TruncateStep,
)
from sink.values.convert import to_delta_value
from sink.values.matching import hashable
from sink.values.typemap import delta_type

Row = dict[str, object]
LSN = "__lsn"
TIME = "__time"
DELETED = "__deleted"
ORDINAL = "__ordinal"
ROW_ID = "__row_id"


@dataclass
class TableModel:
    """Rows of every table by (schema.table, identity values)."""

    tables: dict[str, dict[tuple[object, ...], Row]] = field(default_factory=dict)
    soft_delete: bool = False
    anomalies: int = 0

    def copy(self) -> TableModel:
        return TableModel(
            {name: {k: dict(r) for k, r in rows.items()} for name, rows in self.tables.items()},
            self.soft_delete,
            self.anomalies,
        )

    def live(self) -> dict[str, dict[tuple[object, ...], Row]]:
        """Rows not soft-deleted, without the delete flag, per table (empty tables omitted)."""
        out: dict[str, dict[tuple[object, ...], Row]] = {}
        for name, rows in self.tables.items():
            kept = {
                k: {c: v for c, v in r.items() if c != DELETED}
                for k, r in rows.items()
                if not r.get(DELETED)
            }
            if kept:
                out[name] = kept
        return out

    def multiset(self) -> dict[str, Counter[tuple[tuple[str, object], ...]]]:
        """Live rows without metadata, counted, per table: what a keyless table must match."""
        return {
            name: Counter(
                tuple(sorted((c, repr(v)) for c, v in r.items() if not c.startswith("__")))
                for r in rows.values()
            )
            for name, rows in self.live().items()
        }

    def data(self) -> dict[str, set[tuple[tuple[str, object], ...]]]:
        """Live rows as sets of (column, value) pairs without metadata, per table."""
        return {
            name: {
                tuple(sorted((c, repr(v)) for c, v in r.items() if not c.startswith("__")))
                for r in rows.values()
            }
            for name, rows in self.live().items()
        }


# --- the plan, executed as the SQL does -------------------------------------------------------


def _identity(step: MergeStep, row: PlannedRow) -> tuple[object, ...]:
    if step.identity == "ordinal":
        return (row.lsn, row.ordinal)
    return tuple(hashable(row.values[i]) for i in step.match_indexes)


def _merge(model: TableModel, rows: dict[tuple[object, ...], Row], step: MergeStep) -> None:
    snapshot = {k: dict(r) for k, r in rows.items()}
    names = [c.name for c in step.columns]
    for row in step.rows:
        key = _identity(step, row)
        keep = set(row.keep)
        values = list(row.values)
        if row.moved_from is not None and keep:
            moved = row.moved_from
            origin = snapshot.get(tuple(hashable(v) for v in moved.identity))
            # The origin as it was before the move: stamped at a position before it.
            if origin is not None and _stamp(origin) < (moved.lsn, moved.ordinal):
                for i in keep:
                    values[i] = origin.get(names[i])
                keep = set()
        target = snapshot.get(key)
        stamp: Row = {LSN: row.lsn, TIME: row.commit_time, ORDINAL: row.ordinal}
        if target is not None:
            if step.identity == "ordinal" or _lsn(target) > row.lsn:
                continue
            if row.delete:
                if model.soft_delete:
                    rows[key] = {**target, **stamp, DELETED: True}
                else:
                    rows.pop(key, None)
                continue
            updated = dict(target)
            for i, name in enumerate(names):
                if i not in keep:
                    updated[name] = values[i]
            updated.update(stamp)
            if model.soft_delete:
                updated[DELETED] = False
            rows[key] = updated
            continue
        if keep:
            model.anomalies += 1
            continue
        if row.delete and not model.soft_delete:
            continue
        inserted: Row = dict(zip(names, values, strict=True))
        inserted.update(stamp)
        if model.soft_delete:
            inserted[DELETED] = row.delete
        rows[key] = inserted


def _truncate(model: TableModel, rows: dict[tuple[object, ...], Row], step: TruncateStep) -> None:
    for key, row in list(rows.items()):
        if _lsn(row) <= step.lsn:
            if model.soft_delete:
                stamp: Row = {LSN: step.lsn, TIME: step.commit_time}
                if ORDINAL in row:  # the SQL stamps it where the table has the column
                    stamp[ORDINAL] = step.ordinal
                rows[key] = {**row, **stamp, DELETED: True}
            else:
                del rows[key]


def _lsn(row: Row) -> int:
    value = row[LSN]
    assert isinstance(value, int)
    return value


def apply_plan(model: TableModel, plan: BatchPlan) -> TableModel:
    """Execute ``plan`` on ``model`` (in place) as the rendered SQL would; return it."""
    for table in plan.tables:
        rows = model.tables.setdefault(table.qualified_name, {})
        for step in table.steps:
            if isinstance(step, TruncateStep):
                _truncate(model, rows, step)
            elif isinstance(step, KeylessStep):
                _merge_keyless(model, rows, step)
            else:
                _merge(model, rows, step)
    return model


def _stamp(row: Row) -> tuple[int, int]:
    lsn, ordinal = row[LSN], row.get(ORDINAL, -1)
    assert isinstance(lsn, int)
    assert isinstance(ordinal, int)
    return (lsn, ordinal)


def _merge_keyless(
    model: TableModel, rows: dict[tuple[object, ...], Row], keyless: KeylessStep
) -> None:
    """A keyless step as ``DeltaSink`` runs it after a restart: the floor read from the table.

    The sink reads the floor once and then follows what it applies; reading it before every
    step, as here, is what it would find, so every step is checked as the first one after a
    restart.
    """
    floor = max((_stamp(row) for row in rows.values()), default=NO_POSITION)
    step = fold(keyless, floor)
    names = [c.name for c in step.columns]
    first = (step.first_lsn, step.first_ordinal)

    def equal_live(values: Sequence[object]) -> list[tuple[tuple[object, ...], Row]]:
        wanted = row_key(values)
        return [
            (key, row)
            for key, row in rows.items()
            if not row.get(DELETED)
            and row[ROW_ID] < first  # type: ignore[operator]
            and row_key([row.get(n) for n in names]) == wanted
        ]

    candidates = []
    for value, count in step.taken_values():
        found = sorted(equal_live(value), key=lambda kv: (_stamp(kv[1]), kv[1][ROW_ID]))
        candidates.append(
            [Candidate(*kv[1][ROW_ID], *_stamp(kv[1])) for kv in found[:count]]  # type: ignore[misc]
        )
    assigned = assign_takes(step.takes, candidates)
    taken = {(c.row_lsn, c.row_ordinal) for c in assigned if c is not None}
    for touch in step.touches:
        for key, row in equal_live(touch.values):
            if row[ROW_ID] not in taken and _stamp(row) < (touch.lsn, touch.ordinal):
                rows[key] = {**row, LSN: touch.lsn, TIME: touch.commit_time, ORDINAL: touch.ordinal}
    for take, candidate in zip(step.takes, assigned, strict=True):
        if candidate is None:
            continue
        key = ("row", candidate.row_lsn, candidate.row_ordinal)
        stamp: Row = {LSN: take.new_lsn, TIME: take.commit_time, ORDINAL: take.new_ordinal}
        if take.new is None:
            if model.soft_delete:
                rows[key] = {**rows[key], **stamp, DELETED: True}
            else:
                del rows[key]
        else:
            rows[key] = {**rows[key], **dict(zip(names, take.new, strict=True)), **stamp}
    for new in step.new_rows:
        key = ("row", new.row_lsn, new.row_ordinal)
        assert key not in rows, "a new row after the floor cannot exist yet"
        inserted: Row = dict(zip(names, new.values, strict=True))
        inserted.update({LSN: new.lsn, TIME: new.commit_time, ORDINAL: new.ordinal})
        inserted[ROW_ID] = (new.row_lsn, new.row_ordinal)
        if model.soft_delete:
            inserted[DELETED] = False
        rows[key] = inserted


# --- one change at a time --------------------------------------------------------------------


def _decode(change: RowChange, which: str, decoder: ValueDecoder) -> list[object]:
    data = change.new if which == "new" else change.old
    assert data is not None
    values = decoder.decode_tuple(change.relation, data)
    out: list[object] = []
    for column, value in zip(change.relation.columns, values, strict=True):
        if value is None or value is UNCHANGED_TOAST:
            out.append(value)
        else:
            out.append(to_delta_value(delta_type(column.type_oid, column.type_modifier), value))
    return out


def _key(
    change: RowChange, values: Sequence[object], keys: dict[str, tuple[str, ...]]
) -> tuple[object, ...]:
    relation = change.relation
    names = [c.name for c in relation.columns]
    configured = keys.get(relation.qualified_name)
    if relation.replica_identity == "f":
        key_names: Sequence[str] = configured or names
    else:
        key_names = [c.name for c in relation.key_columns] or configured or ()
    if not key_names:
        return (change.commit_lsn, change.ordinal)
    return tuple(hashable(values[names.index(n)]) for n in key_names)


def replay_changes(
    model: TableModel,
    batch: Batch,
    *,
    keys: dict[str, tuple[str, ...]] | None = None,
    decoder: ValueDecoder | None = None,
) -> TableModel:
    """Apply ``batch`` one change at a time (in place); the reference reading of the stream."""
    keys = keys or {}
    decoder = decoder or ValueDecoder()
    for change in batch.changes:
        if isinstance(change, TruncateChange):
            for relation in change.relations:
                rows = model.tables.setdefault(relation.qualified_name, {})
                time = pg_timestamp_to_datetime(change.commit_time)
                _truncate(model, rows, TruncateStep(change.commit_lsn, time, change.ordinal))
        elif isinstance(change, RowChange):
            _replay_row(model, change, keys, decoder)
    return model


def _replay_row(
    model: TableModel, change: RowChange, keys: dict[str, tuple[str, ...]], decoder: ValueDecoder
) -> None:
    relation = change.relation
    rows = model.tables.setdefault(relation.qualified_name, {})
    names = [c.name for c in relation.columns]
    stamp: Row = {
        LSN: change.commit_lsn,
        TIME: pg_timestamp_to_datetime(change.commit_time),
        ORDINAL: change.ordinal,
    }
    if relation.replica_identity == "f" and relation.qualified_name not in keys:
        _replay_keyless(model, rows, change, decoder)
        return

    def live(key: tuple[object, ...]) -> Row | None:
        row = rows.get(key)
        return None if row is None or row.get(DELETED) else row

    def remove(key: tuple[object, ...], old: Sequence[object]) -> None:
        if model.soft_delete:
            base = rows.get(key) or dict(zip(names, old, strict=True))
            rows[key] = {**base, **stamp, DELETED: True}
        else:
            rows.pop(key, None)

    if change.op == "delete":
        old = [None if v is UNCHANGED_TOAST else v for v in _decode(change, "old", decoder)]
        remove(_key(change, old, keys), old)
        return
    new = _decode(change, "new", decoder)
    old_values = _decode(change, "old", decoder) if change.old is not None else None
    if old_values is not None:
        for i, value in enumerate(new):
            old_value = old_values[i]
            fillable = change.old_kind == "O" or old_value is not None
            if value is UNCHANGED_TOAST and old_value is not UNCHANGED_TOAST and fillable:
                new[i] = old_value
    old_key = _key(change, old_values if old_values is not None else new, keys)
    previous = live(old_key)
    if change.op == "update" and old_key != _key(change, new, keys):
        remove(old_key, [None if v is UNCHANGED_TOAST else v for v in old_values or new])
    for i, value in enumerate(new):
        if value is UNCHANGED_TOAST:
            if previous is None:
                model.anomalies += 1
                return
            new[i] = previous[names[i]]
    row: Row = dict(zip(names, new, strict=True))
    row.update(stamp)
    if model.soft_delete:
        row[DELETED] = False
    rows[_key(change, new, keys)] = row


_row_numbers = itertools.count()


def _replay_keyless(
    model: TableModel, rows: dict[tuple[object, ...], Row], change: RowChange, decoder: ValueDecoder
) -> None:
    """PostgreSQL's apply worker on a table without a key: one equal row per change."""
    names = [c.name for c in change.relation.columns]
    stamp: Row = {LSN: change.commit_lsn, TIME: pg_timestamp_to_datetime(change.commit_time)}
    new = _decode(change, "new", decoder) if change.new is not None else None
    if change.old is not None:
        old = _decode(change, "old", decoder)
        wanted = row_key(old)
        equal = [
            key
            for key, row in rows.items()
            if not row.get(DELETED) and row_key([row.get(n) for n in names]) == wanted
        ]
        if not equal:
            return
        if new is None:
            if model.soft_delete:
                rows[equal[0]] = {**rows[equal[0]], **stamp, DELETED: True}
            else:
                del rows[equal[0]]
            return
        new = [old[i] if v is UNCHANGED_TOAST else v for i, v in enumerate(new)]
        rows[equal[0]] = {**rows[equal[0]], **dict(zip(names, new, strict=True)), **stamp}
        return
    assert new is not None
    row: Row = {**dict(zip(names, new, strict=True)), **stamp}
    if model.soft_delete:
        row[DELETED] = False
    rows[("replayed", next(_row_numbers))] = row
