"""A relation's shape - its columns as Delta sees them and its identity - and the reading of
its tuples into Delta values.

Theory of operation
-------------------
``build_shape`` turns a Relation message into a ``Shape``: the columns under their Delta
names (``naming``; checked against the metadata columns and Spark's case folding) with
their Delta types (``typemap``, ``sink.column_types`` applied), the identity rows are
matched on, and each column's text and binary converter (``convert.column_converter``),
resolved once per relation so no value pays for the dispatch. The identity:

* ``key``: the columns the relation flags as key (REPLICA IDENTITY DEFAULT / INDEX). When
  the relation flags none - or is REPLICA IDENTITY FULL, where pgoutput flags *every*
  column, so the flags say nothing - the configured key (``PlanOptions.keys``) is used,
  else the table's primary key as the source catalog reports it (``primary_key``), when
  the relation publishes all of its columns.
* ``row``: REPLICA IDENTITY FULL without a configured key or primary key. Such a table
  may hold identical rows, and must keep them: these changes plan a ``KeylessStep``
  (``keyless.py`` explains its folding), whose rows carry a hidden row identity.
* ``ordinal``: no key at all (REPLICA IDENTITY NOTHING, or DEFAULT on a table without
  primary key) and none configured. PostgreSQL only publishes inserts for such tables;
  each insert is identified by its commit LSN and its ordinal in the transaction.

``TupleReader`` reads a TupleData into Delta values, in one of three forms that give the
same values: the compiled walk over the tuple's bytes (``decoder.load_tuple_wire``), the
split columns through the per-relation converters, and - the reference - every value
through ``convert.convert_value`` (``generic_values``). A value its Delta type cannot hold
is stored under its convention (``unrepresentable.py``) and waits in the reader until the
fold takes it as a ``Reject`` of the new row (``take_rejects``). ``identity_key`` is the
dictionary key of a row under its shape's identity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Final, TypeVar

from decoder import (
    UNCHANGED_TOAST,
    ColumnKind,
    ColumnValue,
    Relation,
    RowChange,
    TupleData,
    UnknownBinaryFormatError,
    ValueDecoder,
    cause_line,
    format_lsn,
    load_tuple_wire,
)
from sink.base import SinkDataError
from sink.constants import ColumnNamePolicy, UnrepresentablePolicy
from sink.planning.plan import HELPER_PREFIX, Identity, PlanOptions, PrimaryKeyLookup, Reject
from sink.values.convert import Converter, column_converter, convert_value, optional_text
from sink.values.matching import hashable
from sink.values.naming import delta_can_hold, delta_column_name
from sink.values.typemap import ColumnTypeError, PlanColumn, delta_type
from sink.values.unrepresentable import Reason, UnrepresentableValueError, original_text, substitute


@dataclass(frozen=True, slots=True)
class Shape:
    """Columns and identity of a relation, plus each column's text and binary converter.

    Two shapes are equal when their columns and identity are, whatever their converters
    (which follow from the columns anyway).
    """

    columns: tuple[PlanColumn, ...]
    identity: Identity
    match_indexes: tuple[int, ...]
    unique_key: bool = False
    """The identity is a key PostgreSQL keeps unique: the primary key or the replica
    identity index (flagged by the relation, or the catalog's primary key). A key from
    ``sink.keys`` is not known to be unique."""
    text: tuple[Converter, ...] = field(default=(), compare=False, repr=False)
    binary: tuple[Converter, ...] = field(default=(), compare=False, repr=False)


def build_shape(relation: Relation, options: PlanOptions, decoder: ValueDecoder) -> Shape:
    """The columns, identity and converters of ``relation``'s changes (see the module
    docstring).

    Raises:
        SinkDataError: a column name Delta cannot hold or that collides with a metadata
            column, a configured key naming columns the relation lacks, or a
            ``sink.column_types`` entry its column cannot take.
    """
    names = [column.name for column in relation.columns]
    delta_names = _delta_column_names(
        relation.qualified_name, names, frozenset(options.reserved_columns), options.column_names
    )
    overrides = options.column_types.get(relation.qualified_name, {})
    try:
        columns = tuple(
            PlanColumn(
                delta_name,
                c.type_oid,
                c.type_modifier,
                delta_type(c.type_oid, c.type_modifier, overrides.get(c.name)),
                None if delta_name == c.name else c.name,
            )
            for c, delta_name in zip(relation.columns, delta_names, strict=True)
        )
    except ColumnTypeError as exc:
        raise SinkDataError(
            f"sink.column_types of {relation.qualified_name}: {exc}; fix the entry"
        ) from exc
    configured = options.keys.get(relation.qualified_name)
    flagged = [i for i, c in enumerate(relation.columns) if c.is_key]
    identity: Identity
    unique = True
    if relation.replica_identity == "f" or not flagged:
        # pgoutput flags every column under FULL, so a flag says nothing there.
        if configured:
            missing = [name for name in configured if name not in names]
            if missing:
                raise SinkDataError(
                    f"configured key of {relation.qualified_name} names columns the "
                    f"table does not publish: {', '.join(missing)}; fix sink.keys"
                )
            identity, match = "key", tuple(names.index(name) for name in configured)
            unique = False
        elif (primary := _catalog_key(relation, names, options.primary_key)) is not None:
            identity, match = "key", primary
        elif relation.replica_identity == "f":
            identity, match = "row", tuple(range(len(columns)))
        else:
            identity, match = "ordinal", ()
    else:
        identity, match = "key", tuple(flagged)
    return Shape(
        columns,
        identity,
        match,
        unique_key=identity == "key" and unique,
        text=tuple(column_converter(c, ColumnKind.TEXT, decoder) for c in columns),
        binary=tuple(column_converter(c, ColumnKind.BINARY, decoder) for c in columns),
    )


def _catalog_key(
    relation: Relation, names: Sequence[str], lookup: PrimaryKeyLookup | None
) -> tuple[int, ...] | None:
    """Indexes of the table's primary key columns, when the relation publishes them all."""
    if lookup is None:
        return None
    primary = lookup(relation)
    if not primary or any(name not in names for name in primary):
        # A column list that leaves out part of the primary key cannot match on it.
        return None
    return tuple(names.index(name) for name in primary)


# --- values ----------------------------------------------------------------------------


class TupleReader:
    """Reads tuples into Delta values (see the module docstring); one per planned batch."""

    def __init__(
        self,
        decoder: ValueDecoder,
        on_unrepresentable: Callable[[str], UnrepresentablePolicy],
        *,
        generic_values: bool = False,
    ) -> None:
        self._decoder = decoder
        self._on_unrepresentable = on_unrepresentable
        self._generic_values = generic_values
        self._pending: list[_Pending] = []

    def decode(self, change: RowChange, shape: Shape, data: TupleData) -> list[object]:
        """The tuple's Delta values; values stored under a convention wait in ``_pending``
        until ``take_rejects`` (a new tuple) or the next ``decode`` (any other)."""
        if self._pending:
            self._pending.clear()
        if self._generic_values:
            return self._decode_generic(change, shape, data)
        wire = data.wire
        if wire is None:
            return self._decode_columns(change, shape, data.values)
        try:
            return load_tuple_wire(*wire, shape.text, shape.binary)
        except Exception:
            # A value that does not convert, a column count that does not match or damaged
            # bytes: the split path raises exactly what the generic path raises for them.
            return self._decode_columns(change, shape, data.values)

    def _decode_columns(
        self, change: RowChange, shape: Shape, values: tuple[ColumnValue, ...]
    ) -> list[object]:
        """``_decode`` of a tuple already split into columns."""
        self._check_count(change, shape, len(values))
        out: list[object] = []
        append = out.append
        for index, value in enumerate(values):
            kind = value.kind
            data = value.data
            if kind is ColumnKind.NULL:
                append(None)
            elif kind is ColumnKind.UNCHANGED_TOAST:
                append(UNCHANGED_TOAST)
            elif data is None:
                append(self._convert(change, shape.columns[index], kind, data))
            else:
                convert = shape.text[index] if kind is ColumnKind.TEXT else shape.binary[index]
                try:
                    append(convert(data))
                except Exception as exc:
                    append(self._substitute(change, shape.columns[index], kind, data, exc))
        return out

    def _decode_generic(self, change: RowChange, shape: Shape, data: TupleData) -> list[object]:
        """``_decode`` through ``convert_value`` for every value (``generic_values``)."""
        self._check_count(change, shape, len(data.values))
        out: list[object] = []
        for column, value in zip(shape.columns, data.values, strict=True):
            kind = value.kind
            if kind is ColumnKind.NULL:
                out.append(None)
            elif kind is ColumnKind.UNCHANGED_TOAST:
                out.append(UNCHANGED_TOAST)
            else:
                out.append(self._convert(change, column, kind, value.data))
        return out

    @staticmethod
    def _check_count(change: RowChange, shape: Shape, count: int) -> None:
        if count != len(shape.columns):
            raise SinkDataError(
                f"a tuple of {change.relation.qualified_name} has {count} columns but its "
                f"relation has {len(shape.columns)} (commit {format_lsn(change.commit_lsn)})"
            )

    def _convert(
        self, change: RowChange, column: PlanColumn, kind: ColumnKind, data: bytes | None
    ) -> object:
        try:
            return convert_value(column, kind, data, self._decoder)
        except Exception as exc:
            if data is None:
                raise _value_error(change, column, exc) from exc
            return self._substitute(change, column, kind, data, exc)

    def _substitute(
        self, change: RowChange, column: PlanColumn, kind: ColumnKind, data: bytes, exc: Exception
    ) -> object:
        """What a value that did not convert is stored as (``unrepresentable.py``).

        Raises:
            SinkDataError: the value is not a legal value its type cannot hold (``exc`` is
                the cause), or it is and the table's policy is ``stop``.
        """
        found = substitute(column.delta, column.type_oid, kind, data, self._decoder)
        if found is None:
            raise _value_error(change, column, exc) from exc
        table = change.relation.qualified_name
        if self._on_unrepresentable(table) == "stop":
            raise SinkDataError(
                f"cannot store a value of {_where(change, column)} in "
                f"{column.delta.spark_sql}: {_REASON_TEXT[found.reason]} "
                "(sink.on_unrepresentable: stop); store the column as string "
                "(sink.column_types) to keep it exactly, or set sink.on_unrepresentable: keep "
                "to store it under its documented convention"
            ) from exc
        self._pending.append(
            _Pending(column, found.reason, original_text(column.type_oid, kind, data), found.value)
        )
        return found.value

    def take_rejects(
        self,
        rejects: list[Reject],
        change: RowChange,
        shape: Shape,
        values: Sequence[object],
        commit_time: datetime,
    ) -> None:
        """Record the values of the new tuple just decoded that went under a convention.

        Raises:
            SinkDataError: one of them is an identity column stored as NULL, which would
                match no row.
        """
        pending = self._pending
        if not pending:
            return
        key: tuple[tuple[str, str | None], ...] | None = None
        if shape.identity == "key":
            key = tuple(
                (shape.columns[i].source_name, optional_text(values[i]))
                for i in shape.match_indexes
            )
            key_columns = {shape.columns[i] for i in shape.match_indexes}
            for entry in pending:
                if entry.stored is None and entry.column in key_columns:
                    raise SinkDataError(
                        f"a value of key {_where(change, entry.column)} cannot be "
                        f"stored in {entry.column.delta.spark_sql} "
                        f"({_REASON_TEXT[entry.reason]}) and a NULL key matches no row; "
                        "store the column as string (sink.column_types)"
                    )
        for entry in pending:
            rejects.append(
                Reject(
                    entry.column.name,
                    entry.reason,
                    entry.original,
                    optional_text(entry.stored),
                    key,
                    change.commit_lsn,
                    change.ordinal,
                    commit_time,
                )
            )
        pending.clear()


def identity_key(change: RowChange, shape: Shape, values: Sequence[object]) -> tuple[object, ...]:
    """The dictionary key of a row: its identity values, made hashable."""
    if shape.identity == "ordinal":
        return (change.commit_lsn, change.ordinal)
    match = shape.match_indexes
    if len(match) == 1:
        # A one-column key of a plain type, the common case.
        value = values[match[0]]
        if type(value) in PLAIN_HASHABLE:
            return (value,)
    out: list[object] = []
    for i in match:
        value = values[i]
        if type(value) in PLAIN_HASHABLE:
            out.append(value)
            continue
        if value is UNCHANGED_TOAST:
            raise SinkDataError(
                f"identity column {shape.columns[i].name!r} of "
                f"{change.relation.qualified_name} arrived as unchanged TOAST without an "
                f"old value (commit {format_lsn(change.commit_lsn)}); the change cannot "
                "be matched"
            )
        out.append(hashable(value))
    return tuple(out)


IDENTITY_NAMES: Final = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}
PLAIN_HASHABLE_TYPES: Final = (int, str, bytes, bool, Decimal, date, datetime, type(None))
"""Types of Delta values that ``hashable`` returns unchanged (neither lists nor floats)."""
PLAIN_HASHABLE: Final = frozenset(PLAIN_HASHABLE_TYPES)


@dataclass(frozen=True, slots=True)
class _Pending:
    """A value of the tuple being decoded that went under a convention."""

    column: PlanColumn
    reason: Reason
    original: str
    stored: object


_REASON_TEXT: Final = {
    Reason.INFINITY: "an infinite date or timestamp",
    Reason.OUT_OF_RANGE: "a date or timestamp outside years 1-9999",
    Reason.NOT_FINITE: "NaN or an infinity in a constrained numeric",
    Reason.MULTIDIMENSIONAL: "a multi-dimensional array",
    Reason.LOWER_BOUND: "an array whose lower bound is not 1",
}


def _value_error(change: RowChange, column: PlanColumn, exc: Exception) -> SinkDataError:
    """The error for a value of ``column`` that did not convert, ``exc`` chained by caller."""
    if isinstance(exc, UnrepresentableValueError | UnknownBinaryFormatError):
        return SinkDataError(f"cannot store a value of {_where(change, column)}: {exc}")
    return SinkDataError(
        f"cannot convert a value of {_where(change, column)} to "
        f"{column.delta.spark_sql}: {cause_line(exc)}"
    )


def _delta_column_names(
    table: str, names: Sequence[str], reserved: frozenset[str], policy: ColumnNamePolicy
) -> list[str]:
    """The Delta names of a relation's columns (``naming``), checked before anything is
    written: each one Delta can hold, none clashing with ours or another, case ignored."""
    folded_reserved = {name.lower() for name in reserved}
    seen: dict[str, str] = {}
    delta_names: list[str] = []
    for name in names:
        delta_name = delta_column_name(name, policy)
        shown = repr(name) if delta_name == name else f"{name!r} (Delta {delta_name!r})"
        folded = delta_name.lower()
        # Spark resolves column names case-insensitively, so case does not tell apart.
        if folded in folded_reserved or folded.startswith(HELPER_PREFIX):
            raise SinkDataError(
                f"column {shown} of {table} collides with a wal2delta metadata column; "
                "rename the metadata columns in the sink configuration"
            )
        if not delta_can_hold(delta_name):
            # Delta tables without column mapping reject these characters in Spark.
            raise SinkDataError(
                f"column {name!r} of {table} contains a character Delta does not allow in "
                "column names (space or one of ,;{}()=, tab, newline); rename the column, "
                f"or set sink.column_names: map to store it as {delta_column_name(name, 'map')!r}"
            )
        if folded in seen:
            raise SinkDataError(
                f"columns {seen[folded]} and {shown} of {table} differ only in case, which "
                "Spark cannot tell apart (nor can sink.column_names: map); rename one of them"
            )
        seen[folded] = shown
        delta_names.append(delta_name)
    return delta_names


def _where(change: RowChange, column: PlanColumn) -> str:
    return (
        f"column {column.name!r} of {change.relation.qualified_name} "
        f"(type OID {column.type_oid}, commit {format_lsn(change.commit_lsn)})"
    )


def without_unchanged(values: Sequence[object]) -> list[object]:
    return [None if v is UNCHANGED_TOAST else v for v in values]


_T = TypeVar("_T")


def required(value: _T | None, change: RowChange, which: str) -> _T:
    if value is None:
        raise SinkDataError(
            f"{change.op.upper()} on {change.relation.qualified_name} without its {which} "
            f"tuple (commit {format_lsn(change.commit_lsn)}); the change cannot be applied"
        )
    return value
