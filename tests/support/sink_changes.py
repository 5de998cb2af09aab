"""Builders for sink test inputs: relations, text-mode tuples and committed changes.

Values are given as PostgreSQL text (what pgoutput sends in text mode): ``None`` is NULL,
``U`` is an unchanged TOAST column, ``str`` is encoded as UTF-8 text, ``bytes`` are sent as
given (binary format when ``binary=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, Literal

from decoder import (
    ColumnKind,
    ColumnValue,
    Lsn,
    MessageChange,
    Oid,
    Relation,
    RelationColumn,
    RowChange,
    TruncateChange,
    TupleData,
    datetime_to_pg_timestamp,
)
from sink import Batch


class _Unchanged:
    def __repr__(self) -> str:
        return "U"


U: Final = _Unchanged()
"""An unchanged TOAST column (``'u'``) in a tuple given to the builders."""

BASE_TIME: Final = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

INT4: Final = 23
INT8: Final = 20
TEXT: Final = 25


def col(name: str, type_oid: int = TEXT, *, key: bool = False, typmod: int = -1) -> RelationColumn:
    """A relation column; ``key`` sets the replica identity flag."""
    return RelationColumn(
        flags=1 if key else 0, name=name, type_oid=Oid(type_oid), type_modifier=typmod
    )


def rel(
    name: str,
    *columns: RelationColumn,
    identity: Literal["d", "n", "f", "i"] = "d",
    relation_id: int = 16384,
) -> Relation:
    """A Relation; under FULL (``"f"``) every column is flagged, as pgoutput does."""
    schema, _, table = name.partition(".")
    if identity == "f":
        columns = tuple(RelationColumn(1, c.name, c.type_oid, c.type_modifier) for c in columns)
    return Relation(
        xid=None,
        relation_id=Oid(relation_id),
        namespace=schema,
        relation_name=table,
        replica_identity=identity,
        columns=tuple(columns),
    )


Value = str | bytes | None | _Unchanged


def tup(values: Sequence[Value], *, binary: bool = False) -> TupleData:
    """A TupleData from text (or binary) values."""
    out = []
    for value in values:
        if value is None:
            out.append(ColumnValue(ColumnKind.NULL))
        elif isinstance(value, _Unchanged):
            out.append(ColumnValue(ColumnKind.UNCHANGED_TOAST))
        else:
            data = value.encode() if isinstance(value, str) else value
            out.append(ColumnValue(ColumnKind.BINARY if binary else ColumnKind.TEXT, data))
    return TupleData(tuple(out))


def commit_time(lsn: int) -> datetime:
    """A deterministic commit time per LSN, in whole microseconds."""
    return BASE_TIME.replace(microsecond=lsn % 1_000_000)


def insert(relation: Relation, *values: Value, lsn: int, ordinal: int = 0) -> RowChange:
    return RowChange(
        op="insert",
        relation=relation,
        new=tup(values),
        old=None,
        old_kind=None,
        commit_lsn=Lsn(lsn),
        commit_time=datetime_to_pg_timestamp(commit_time(lsn)),
        ordinal=ordinal,
    )


def update(
    relation: Relation,
    *values: Value,
    lsn: int,
    ordinal: int = 0,
    old: Sequence[Value] | None = None,
    old_kind: Literal["K", "O"] | None = None,
) -> RowChange:
    """An UPDATE; pass ``old`` (with ``old_kind``) for key changes and REPLICA IDENTITY FULL."""
    return RowChange(
        op="update",
        relation=relation,
        new=tup(values),
        old=None if old is None else tup(old),
        old_kind=None if old is None else (old_kind or "K"),
        commit_lsn=Lsn(lsn),
        commit_time=datetime_to_pg_timestamp(commit_time(lsn)),
        ordinal=ordinal,
    )


def delete(
    relation: Relation,
    *old: Value,
    lsn: int,
    ordinal: int = 0,
    old_kind: Literal["K", "O"] = "K",
) -> RowChange:
    """A DELETE; ``old`` holds the key columns (others None) for 'K', every column for 'O'."""
    return RowChange(
        op="delete",
        relation=relation,
        new=None,
        old=tup(old),
        old_kind=old_kind,
        commit_lsn=Lsn(lsn),
        commit_time=datetime_to_pg_timestamp(commit_time(lsn)),
        ordinal=ordinal,
    )


def truncate(*relations: Relation, lsn: int, ordinal: int = 0) -> TruncateChange:
    return TruncateChange(
        relations=tuple(relations),
        cascade=False,
        restart_identity=False,
        commit_lsn=Lsn(lsn),
        commit_time=datetime_to_pg_timestamp(commit_time(lsn)),
        ordinal=ordinal,
    )


def message(content: bytes, *, lsn: int, commit_lsn: int | None, ordinal: int = 0) -> MessageChange:
    return MessageChange(
        prefix="wal2delta-test",
        content=content,
        lsn=Lsn(lsn),
        transactional=commit_lsn is not None,
        commit_lsn=None if commit_lsn is None else Lsn(commit_lsn),
        commit_time=None
        if commit_lsn is None
        else datetime_to_pg_timestamp(commit_time(commit_lsn)),
        ordinal=ordinal,
    )


def batch(*changes: RowChange | TruncateChange | MessageChange) -> Batch:
    """A batch whose durable LSN is its newest commit LSN."""
    lsns = [c.commit_lsn for c in changes if c.commit_lsn is not None]
    return Batch(
        changes=tuple(changes),
        durable_lsn=Lsn(max(lsns)) if lsns else None,
        transaction_count=len(set(lsns)),
        last_commit_time=None,
    )


def ended(*changes: RowChange) -> Batch:
    """A batch ending with its last transaction, whose end LSN follows its commit LSN."""
    return Batch(changes, Lsn(max(c.commit_lsn for c in changes) + 1), 1, None)
