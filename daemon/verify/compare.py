"""How ``wal2delta verify`` compares rows read from both sides.

Theory of operation
-------------------
A differing bucket is read row by row on both sides (``rounds``); the rows are compared
here, in Python, by the type mapping's meaning rather than by any engine's text:
``comparable`` gives each value a typed, hashable form (a decimal keeps its scale, an
instant compares in UTC, NaN equals NaN, -0.0 equals 0.0, as in PostgreSQL). A source
value is first brought to what the sink writes (``as_stored``: ``sink.to_delta_value``);
one Delta cannot hold stays as read, and so differs.

A table with a key is compared key by key: a key only in PostgreSQL is *missing*, one only
in Delta (or held by a second Delta row) is *extra*, one whose rows differ is *different*,
with the columns that differ. A table without a key is compared as a multiset: each copy
of a row must be in Delta as often as in PostgreSQL, and the surplus on either side counts.
A Delta row whose commit LSN is after the compared LSN was written after the snapshot, so
what it makes differ is no finding of this round.

``Findings`` collects the differences of one round under an identity (kind and key, or
kind and row), so that a later round can keep only what it finds again (``keep_common``).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from daemon.verify.plan import VerifyColumn, VerifyTable
from decoder import Lsn
from sink import to_delta_value

DifferenceKind = Literal["missing", "extra", "different"]


@dataclass(frozen=True)
class Difference:
    """One example of a difference: the row's key (the whole row without a key) and, for a
    different row, the columns that differ."""

    kind: DifferenceKind
    key: dict[str, str]
    columns: list[str] = field(default_factory=list)


@dataclass
class Findings:
    """Differences found in one round: per difference id, how often and an example."""

    counts: dict[tuple[object, ...], int] = field(default_factory=dict)
    examples: dict[tuple[object, ...], Difference] = field(default_factory=dict)

    def add(self, ident: tuple[object, ...], example: Difference, times: int = 1) -> None:
        self.counts[ident] = self.counts.get(ident, 0) + times
        self.examples.setdefault(ident, example)

    def total(self) -> int:
        return sum(self.counts.values())

    def keep_common(self, later: Findings) -> int:
        """Keep only what ``later`` found too; return how many differences vanished."""
        before = self.total()
        self.counts = {
            k: min(n, later.counts[k]) for k, n in self.counts.items() if k in later.counts
        }
        self.examples = {k: v for k, v in self.examples.items() if k in self.counts}
        return before - self.total()


def comparable(value: object) -> object:
    """A typed, hashable form of a Delta value; two values mean the same when equal.

    Decimals keep their scale, instants compare in UTC, NaN equals NaN and -0.0 equals 0.0
    (as in PostgreSQL).
    """
    match value:
        case None:
            return None
        case bool():
            return ("bool", value)
        case int():
            return ("int", value)
        case float():
            return ("float", "nan" if math.isnan(value) else repr(value + 0.0))
        case Decimal():
            return ("decimal", str(value))
        case str():
            return ("text", value)
        case bytes() | bytearray() | memoryview():
            return ("bytes", bytes(value))
        case dt.datetime() if value.tzinfo is not None:
            return ("instant", value.astimezone(dt.UTC).isoformat())
        case dt.datetime():
            return ("timestamp", value.isoformat())
        case dt.date():
            return ("date", value.isoformat())
        case list() | tuple():
            return ("array", tuple(comparable(v) for v in value))
    return ("text", str(value))


def shown(value: object) -> str:
    """A value as a report prints it."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)


def as_stored(column: VerifyColumn, value: object) -> object:
    """A source value as the sink writes it; a value Delta cannot hold stays as read."""
    if value is None:
        return None
    try:
        return to_delta_value(column.mapped, value)
    except ValueError:
        return value


def compare_rows(
    table: VerifyTable,
    source: Sequence[Sequence[object]],
    delta: Sequence[tuple[Sequence[object], int | None]],
    compared_at: Lsn,
) -> Findings:
    """Compare rows read from the same buckets on both sides.

    A Delta row written after ``compared_at`` (its LSN column says so) is newer than the
    snapshot, so a difference it makes is not a finding of this round.
    """
    names = [c.name for c in table.columns]
    found = Findings()
    if not table.key:
        as_source: dict[tuple[object, ...], Sequence[object]] = {}
        counts: dict[tuple[object, ...], int] = {}
        for row in source:
            ident = tuple(comparable(v) for v in row)
            as_source.setdefault(ident, row)
            counts[ident] = counts.get(ident, 0) + 1
        # Older rows first: a copy the source holds is matched by the Delta row written
        # before the snapshot, and only copies written after it are left over.
        for row, lsn in sorted(delta, key=lambda pair: -1 if pair[1] is None else pair[1]):
            ident = tuple(comparable(v) for v in row)
            if counts.get(ident, 0) > 0:
                counts[ident] -= 1
            elif lsn is None or lsn <= compared_at:
                whole = {n: shown(v) for n, v in zip(names, row, strict=True)}
                found.add(("extra", *ident), Difference("extra", whole))
        for ident, left in counts.items():
            if left > 0:
                whole = {n: shown(v) for n, v in zip(names, as_source[ident], strict=True)}
                found.add(("missing", *ident), Difference("missing", whole), left)
        return found
    positions = [names.index(k) for k in table.key]

    def key_of(row: Sequence[object]) -> tuple[object, ...]:
        return tuple(comparable(row[i]) for i in positions)

    def shown_key(row: Sequence[object]) -> dict[str, str]:
        return {names[i]: shown(row[i]) for i in positions}

    by_key = {key_of(row): row for row in source}
    seen: set[tuple[object, ...]] = set()
    for row, lsn in delta:
        key = key_of(row)
        newer = lsn is not None and lsn > compared_at
        wanted = by_key.get(key)
        if key in seen or wanted is None:
            if not newer:
                found.add(("extra", *key), Difference("extra", shown_key(row)))
            continue
        seen.add(key)
        columns = [
            name
            for name, want, got in zip(names, wanted, row, strict=True)
            if comparable(want) != comparable(got)
        ]
        if columns and not newer:
            found.add(("different", *key), Difference("different", shown_key(row), columns))
    for key, row in by_key.items():
        if key not in seen:
            found.add(("missing", *key), Difference("missing", shown_key(row)))
    return found
