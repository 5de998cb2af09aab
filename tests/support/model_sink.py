"""A reference-model sink: applies batches to plain dictionaries, one per table.

It is the simplest correct reading of the change stream - row by row, in order, unchanged
TOAST keeping the previous value - so capture tests can compare the source tables with it
without Spark. ``DeltaSink`` is compared with the source in the end-to-end tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from decoder import (
    UNCHANGED_TOAST,
    MessageChange,
    Relation,
    RowChange,
    TruncateChange,
    ValueDecoder,
)
from sink import Batch, BatchResult, SnapshotMarker

Row = dict[str, object]


@dataclass
class ModelSink:
    tables: dict[str, dict[tuple[object, ...], Row]] = field(default_factory=dict)
    messages: list[MessageChange] = field(default_factory=list)
    durable_lsns: list[int] = field(default_factory=list)
    toast_anomalies: int = 0
    markers: dict[str, SnapshotMarker] = field(default_factory=dict)
    events: list[tuple[int, str, str, tuple[object, ...]]] = field(default_factory=list)
    _values: ValueDecoder = field(default_factory=ValueDecoder)

    def load_snapshot_marker(self, slot: str) -> SnapshotMarker | None:
        return self.markers.get(slot)

    def save_snapshot_marker(self, marker: SnapshotMarker) -> None:
        self.markers[marker.slot] = marker

    def _key(self, relation: Relation, row: Row) -> tuple[object, ...]:
        names = [c.name for c in relation.key_columns] or [c.name for c in relation.columns]
        return tuple(repr(row[n]) for n in names)

    def _row(self, relation: Relation, change: RowChange, which: str) -> Row:
        data = change.new if which == "new" else change.old
        assert data is not None
        values = self._values.decode_tuple(relation, data)
        return {c.name: v for c, v in zip(relation.columns, values, strict=True)}

    def apply(self, batch: Batch) -> BatchResult:
        for change in batch.changes:
            if isinstance(change, TruncateChange):
                for relation in change.relations:
                    self.tables[relation.qualified_name] = {}
            elif isinstance(change, MessageChange):
                self.messages.append(change)
            else:
                self._apply_row(change)
        if batch.durable_lsn is not None:
            self.durable_lsns.append(batch.durable_lsn)
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def _apply_row(self, change: RowChange) -> None:
        relation = change.relation
        table = self.tables.setdefault(relation.qualified_name, {})
        if change.op == "delete":
            old = self._row(relation, change, "old")
            table.pop(self._key(relation, old), None)
            return
        new = self._row(relation, change, "new")
        self.events.append(
            (change.commit_lsn, relation.qualified_name, change.op, self._key(relation, new))
        )
        previous: Row | None = None
        if change.op == "update":
            identity = self._row(relation, change, "old") if change.old is not None else new
            previous = table.pop(self._key(relation, identity), None)
        for name, value in list(new.items()):
            if value is UNCHANGED_TOAST:
                if previous is None:
                    self.toast_anomalies += 1
                    return
                new[name] = previous[name]
        table[self._key(relation, new)] = new

    def close(self) -> None:
        return None
