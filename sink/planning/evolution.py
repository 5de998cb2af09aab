"""Schema evolution: what a changed Relation means for an existing Delta table (pure).

Theory of operation
-------------------
pgoutput sends a Relation message before the first change of a table after its schema
changed, and that is all a logical replication client learns of DDL: the message carries
the column names, types and key flags in column (``attnum``) order, but no ``attnum``s, no
defaults and no hint of what the DDL was. Like PostgreSQL's own subscriber, wal2delta
follows *names*: a Delta column is the source column of that name. What names alone
cannot tell is whether a name still means the same attribute, so ``evolve`` also asks the
source catalog (``pg_attribute``: live attributes with their ``attnum``, and the dropped
ones PostgreSQL keeps for ever) and remembers, per Delta column, the attribute it came
from (``ColumnOrigin``: table OID, ``attnum``; ``records/bookkeeping.py`` keeps these
records in the lake, so the decisions survive restarts). It compares the relation of a
merge step with what the Delta table holds, with those records and with the relation this
process applied last for the table (``previous``; unknown after a restart), and decides:

* **Added column** (not in Delta): Delta gets a new nullable column. PostgreSQL shows a
  column added with a constant default (a *fast default*, ``pg_attribute.attmissingval``)
  in every row that existed before, although no WAL record carries it; the executor
  backfills those rows, read from the source catalog, in the same Delta commit that adds
  the column (``steps/follow.py``), so a crash cannot leave the column added but not backfilled.
* **Returned column** (in Delta, but now another attribute: a dropped column whose name
  was added again, ``ALTER TABLE t DROP b, ADD b ...``): Delta still holds the values of
  the dropped one; the executor resets the rows written before the step to the new
  column's default (or NULL), which is what PostgreSQL shows for them. Its ``attnum``
  differs from the recorded one (PostgreSQL never reuses an ``attnum``). The record is
  updated after the reset, and the step that brought a column (back) is remembered
  (``since_lsn``): a restarted daemon that replays that step, after older steps that wrote
  the old column's values again, resets once more - harmless, every row at or below the
  step's first LSN predates the column.
* **Same column** (recorded ``attnum`` = catalog ``attnum``): nothing, also when the column
  was left out of the publication's column list for a while and comes back.
* **Dropped column** (in Delta, not in the relation; also a column left out of a changed
  column list): stays in Delta. Updates write only the columns their relation carries, so
  existing rows keep its last value and rows inserted from now on hold NULL there, as in
  the table of a native subscriber (``sql.render_merge``). Nothing to do here.
* **Renamed column**: a relation column whose ``attnum`` Delta holds under another name
  (same ``attnum``, new name). It stops the daemon (``SinkDataError``) before a row of the
  new shape is written, as a native subscriber stops ("missing replicated column"):
  following it would leave the column's history under two names. Two fallbacks catch
  renames where no ``attnum`` is known (no catalog, a table written before the records
  existed): PostgreSQL appends new columns, so an unknown column *before* one Delta knows
  cannot be new; and a dropped column leaves a dropped attribute behind, a renamed one does
  not, so more unrecorded Delta columns missing from the catalog than unaccounted dropped
  attributes means a rename.
* **Type change**: a column whose Delta type differs from the type its new PostgreSQL
  type maps to stops the daemon likewise, naming both types. Changes that keep the Delta
  type (``varchar(10)`` to ``varchar(20)`` or ``text``) go on unnoticed. wal2delta never
  widens Delta types: Delta's type widening (``int`` to ``bigint``) is a table feature
  that delta-rs readers (``deltalake`` 1.x) refuse to read.

The catalog answers "now", which may be later than the step being applied. The relation
lists its columns in ``attnum`` order, so the ``attnum``s the catalog gives its names must
increase; when they do not, later DDL renamed columns around and the catalog is not used
to tell columns apart for this step (names and records decide). A relation column the
catalog no longer has (dropped or renamed since) keeps its recorded origin, unless its
recorded ``attnum`` cannot sit where the relation puts it (between the ``attnum``s of its
neighbours): then it is a newer column under that name.

A Relation message that looks exactly like the previous one (``DROP b, ADD b`` of the last
column, same type) changes nothing the relation shows: the plan starts a new step at every
new Relation message (``MergePlan.relations``), and the executor asks ``evolve`` there.

Limitations (docs/decisions/0045-column-origins-are-recorded-in-the-lake.md): the catalog
may already show DDL the stream has not reached; a name dropped and added back *after* the
step being applied is then reset at that step, and rows changed between it and the DDL keep
the old column's values; when the catalog has moved on by several DDL statements on the same
name, the decision falls back to names; a table written before the records existed learns
them on first sight, so a drop-and-add that happened before is taken for the same column; a
column filled by a volatile default (``DEFAULT now()``) or a ``USING`` type change is
written by a table rewrite that logical decoding does not see, so Delta keeps NULL or the
old values for rows not changed since.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from decoder import TypeDescription
from sink.base import SinkDataError
from sink.values.typemap import (
    ARRAY_ELEMENT_OIDS,
    NUMERIC_OID,
    SCALAR_TYPE_NAMES,
    PlanColumn,
    numeric_precision_scale,
)

_VARCHAR_OIDS = {1042: "bpchar", 1043: "varchar"}
_VARHDRSZ = 4


@dataclass(frozen=True, slots=True)
class CatalogColumn:
    """A live column of a source table as ``pg_attribute`` describes it now.

    Attributes:
        name: ``attname``.
        attnum: ``attnum``; PostgreSQL never reuses one.
        missing_value: PostgreSQL's text form of the value every row stored before the
            column was added shows (``attmissingval``, the fast default); None when the
            column has none.
    """

    name: str
    attnum: int
    missing_value: str | None = None


@dataclass(frozen=True, slots=True)
class CatalogTable:
    """What the source catalog says about one table, now.

    Attributes:
        columns: live columns by name.
        dropped_columns: attributes left behind by ``DROP COLUMN`` (``attisdropped``).
        primary_key: primary key columns in key order; empty when there is none.
        oid: the table's OID (``pg_class.oid``); 0 when unknown. A table dropped and
            created again under the same name has another OID and new ``attnum``s.
        dropped_attnums: the ``attnum``s of the dropped attributes, when known.
    """

    columns: Mapping[str, CatalogColumn]
    dropped_columns: int = 0
    primary_key: tuple[str, ...] = ()
    oid: int = 0
    dropped_attnums: frozenset[int] = frozenset()


class SourceCatalog(Protocol):
    """Read access to the source database's catalog, injected into ``DeltaSink``.

    ``capture.catalog.PostgresCatalog`` implements it with a regular connection. The sink
    asks when a relation changes or needs a key, never per row. Answers describe the
    catalog *now*, which may be later than the change being applied.
    """

    def table(self, schema: str, table: str) -> CatalogTable | None:
        """Describe ``schema.table``; None when it no longer exists.

        Raises:
            Wal2DeltaError: the catalog could not be read (a retryable error when the
                connection was lost).
        """
        ...

    def tables(
        self, names: Sequence[tuple[str, str]]
    ) -> Mapping[tuple[str, str], CatalogTable | None]:
        """Describe each ``(schema, table)`` of ``names`` at once (what ``table`` gives
        for each, in fewer round trips); None for a table that no longer exists.

        Raises:
            Wal2DeltaError: the catalog could not be read (a retryable error when the
                connection was lost).
        """
        ...

    def describe_type(self, type_oid: int) -> TypeDescription | None:
        """Describe what decides type ``type_oid``'s binary layout; None when it is gone.

        The sink asks once per user-defined column type (enum, domain, composite, their
        arrays), when planning a relation's first change; ``decoder.usertypes`` prints
        binary values of the type as PostgreSQL's text form with it.

        Raises:
            Wal2DeltaError: the catalog could not be read (a retryable error when the
                connection was lost).
        """
        ...


@dataclass(frozen=True, slots=True)
class ColumnOrigin:
    """The source attribute a Delta column holds, as recorded in the lake.

    Attributes:
        attnum: the attribute's ``attnum``; PostgreSQL never gives it to another column of
            the table.
        table_oid: the OID of the source table the attribute belongs to.
        since_lsn: the first LSN of the step that brought the column into Delta (or back);
            None when the origin was learned for a column Delta already held.
    """

    attnum: int
    table_oid: int
    since_lsn: int | None = None


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """What the executor must do before merging a step.

    Attributes:
        added: columns Delta does not have; add them, backfilling a fast default.
        returned: columns Delta has that are now another attribute (dropped, then added
            again), or whose arrival is being replayed; reset them in rows written before
            the step.
        origins: origins to record (new or changed), by Delta column name, once the
            columns are added and reset.
    """

    added: tuple[PlanColumn, ...] = ()
    returned: tuple[PlanColumn, ...] = ()
    origins: tuple[tuple[str, ColumnOrigin], ...] = ()


def delta_type_name(spark_sql: str) -> str:
    """Normalise a Spark SQL type for comparison (``DECIMAL(10, 2)`` -> ``decimal(10,2)``).

    Spark's ``DataType.simpleString()`` of a table column gives the same form.
    """
    return spark_sql.replace(" ", "").lower()


def pg_type_label(type_oid: int, type_modifier: int) -> str:
    """A readable name for a PostgreSQL column type, for error messages."""
    element = ARRAY_ELEMENT_OIDS.get(type_oid)
    if element is not None:
        return pg_type_label(element, type_modifier) + "[]"
    if type_oid == NUMERIC_OID:
        constraint = numeric_precision_scale(type_modifier)
        return "numeric" if constraint is None else "numeric({},{})".format(*constraint)
    if type_oid in _VARCHAR_OIDS and type_modifier >= _VARHDRSZ:
        return f"{_VARCHAR_OIDS[type_oid]}({type_modifier - _VARHDRSZ})"
    name = SCALAR_TYPE_NAMES.get(type_oid)
    return name if name is not None else f"type OID {type_oid}"


def evolve(
    table: str,
    columns: Sequence[PlanColumn],
    delta: Mapping[str, str],
    previous: Sequence[PlanColumn] | None,
    catalog: CatalogTable | None,
    *,
    origins: Mapping[str, ColumnOrigin] | None = None,
    first_lsn: int = 0,
) -> SchemaChange:
    """Decide how the Delta table follows a relation; see the module docstring.

    Args:
        table: qualified table name, for messages.
        columns: the relation's columns, in relation order.
        delta: the Delta table's data columns (no metadata columns), in Delta order, with
            their types normalised by ``delta_type_name``.
        previous: the columns of the relation this process applied last for the table;
            None when it applied none yet.
        catalog: the table as the source catalog describes it now, under Delta column
            names; None without a catalog (or when the table is gone).
        origins: the recorded origin of Delta columns, by Delta column name.
        first_lsn: the first LSN of the step (``MergeStep.first_lsn``).

    Returns:
        The columns to add and to reset, and the origins to record.

    Raises:
        SinkDataError: a column changed to a type Delta cannot hold, or was renamed.
    """
    before = {c.name: c for c in previous} if previous is not None else {}
    for column in columns:
        held = delta.get(column.name)
        wanted = delta_type_name(column.delta.spark_sql)
        if held is not None and held != wanted:
            raise _type_change_error(table, column, held, before.get(column.name))
    if catalog is None:
        return _evolve_by_names(table, columns, delta, previous)
    return _Evolution(table, columns, delta, previous, catalog, origins or {}, first_lsn).run()


def _evolve_by_names(
    table: str,
    columns: Sequence[PlanColumn],
    delta: Mapping[str, str],
    previous: Sequence[PlanColumn] | None,
) -> SchemaChange:
    """Without a catalog: names and the order of the relation decide (no origins)."""
    before = {c.name for c in previous} if previous is not None else set()
    known = [c.name for c in previous] if previous is not None else list(delta)
    for index, column in enumerate(columns):
        if column.name not in before and column.name not in known:
            _check_order(table, columns, index, set(known), known)
    added = tuple(c for c in columns if c.name not in delta)
    returned = tuple(
        c for c in columns if previous is not None and c.name in delta and c.name not in before
    )
    return SchemaChange(added=added, returned=returned)


def _check_order(
    table: str,
    columns: Sequence[PlanColumn],
    index: int,
    known: set[str],
    candidates: Sequence[str],
) -> None:
    """Column ``index`` is unknown: before a known one it cannot be new (PostgreSQL appends).

    Raises:
        SinkDataError: a known column follows it; ``candidates`` not in the relation are
            named as what it may have been.
    """
    names = [c.name for c in columns]
    later = [name for name in names[index + 1 :] if name in known]
    if later:
        vanished = [name for name in candidates if name not in names]
        raise _rename_error(table, names[index], later[0], vanished)


class _Evolution:
    """``evolve`` with a catalog: origins (``attnum``s) tell columns apart."""

    def __init__(  # noqa: PLR0917 - the inputs of ``evolve``, in order
        self,
        table: str,
        columns: Sequence[PlanColumn],
        delta: Mapping[str, str],
        previous: Sequence[PlanColumn] | None,
        catalog: CatalogTable,
        origins: Mapping[str, ColumnOrigin],
        first_lsn: int,
    ) -> None:
        self.table = table
        self.columns = columns
        self.delta = delta
        self.previous = previous
        self.before = {c.name for c in previous} if previous is not None else set()
        self.catalog = catalog
        self.first_lsn = first_lsn
        # Origins of another table that had this name once say nothing about this one.
        self.record = {
            name: origin
            for name, origin in origins.items()
            if name in delta and origin.table_oid == catalog.oid
        }
        self.learned: dict[str, ColumnOrigin] = {}
        self.added: list[PlanColumn] = []
        self.returned: list[PlanColumn] = []

    def run(self) -> SchemaChange:
        attnums = self._attnums_now()
        certain = self._certain(attnums)
        owners = {o.attnum: n for n, o in self.record.items()}
        renewed = {
            c.name
            for c, attnum in zip(self.columns, attnums, strict=True)
            if attnum is not None and c.name in self.record and self.record[c.name].attnum != attnum
        }
        for index, (column, attnum) in enumerate(zip(self.columns, attnums, strict=True)):
            if attnum is not None:
                self._resolved(column, attnum, owners.get(attnum), certain=certain[index])
            else:
                self._unresolved(index, column, attnums, renewed)
        if self.added:
            self._check_dropped_count()
        return SchemaChange(
            added=tuple(self.added),
            returned=tuple(self.returned),
            origins=tuple(self.learned.items()),
        )

    def _attnums_now(self) -> list[int | None]:
        """The catalog's ``attnum`` of each relation column; all None if it cannot be read.

        The relation lists columns in ``attnum`` order; when the catalog's numbers for
        them do not increase, later DDL moved names around and the catalog cannot be read
        against this relation.
        """
        live = self.catalog.columns
        attnums = [live[c.name].attnum if c.name in live else None for c in self.columns]
        known = [a for a in attnums if a is not None]
        if any(a >= b for a, b in itertools.pairwise(known)):
            return [None] * len(attnums)
        return attnums

    def _certain(self, attnums: Sequence[int | None]) -> list[bool]:
        """Whether each column's ``attnum`` now is surely its ``attnum`` in this relation.

        A column dropped (or renamed away) and added again under its name after this
        relation has a higher ``attnum`` now; its old one is left between the ``attnum``s
        of its neighbours as a dropped attribute, or as a live one the relation does not
        carry. Any such attribute there makes the column unsure - unless a later column
        is sure: a column added again would have an ``attnum`` above every later column's
        (the ``attnum``s would not increase). Origins are learned only from sure columns.
        """
        names = {c.name for c in self.columns}
        suspects = set(self.catalog.dropped_attnums)
        suspects.update(c.attnum for n, c in self.catalog.columns.items() if n not in names)
        certain = [False] * len(attnums)
        later_sure = False
        for index in reversed(range(len(attnums))):
            attnum = attnums[index]
            if attnum is None:
                continue
            lower = max((a for a in attnums[:index] if a is not None), default=0)
            sure = later_sure or not any(lower < d < attnum for d in suspects)
            certain[index] = sure
            later_sure = later_sure or sure
        return certain

    def _introduce(self, column: PlanColumn, attnum: int | None, *, returned: bool) -> None:
        (self.returned if returned else self.added).append(column)
        if attnum is not None:
            self.learned[column.name] = ColumnOrigin(attnum, self.catalog.oid, self.first_lsn)

    def _replayed(self, origin: ColumnOrigin | None) -> bool:
        """The step is (at or before) the one that brought the column: a replay."""
        return (
            origin is not None
            and origin.since_lsn is not None
            and self.first_lsn <= origin.since_lsn
        )

    def _resolved(
        self, column: PlanColumn, attnum: int, owner: str | None, *, certain: bool
    ) -> None:
        name = column.name
        if owner is not None and owner != name:
            raise _rename_error(self.table, name, None, [owner], attnum=attnum)
        origin = self.record.get(name)
        sure = attnum if certain else None
        if name not in self.delta:
            self._introduce(column, sure, returned=False)
        elif origin is None:
            if self.previous is not None and name not in self.before:
                # Nothing recorded: names decide, as without a catalog.
                self._introduce(column, sure, returned=True)
            elif certain:
                self.learned[name] = ColumnOrigin(attnum, self.catalog.oid)
        elif origin.attnum != attnum:
            # Another attribute than the recorded one: the name was dropped and added
            # again (before this step, or after it: resetting now is right for more rows).
            self._introduce(column, attnum, returned=True)
        elif self._replayed(origin):
            self.returned.append(column)

    def _unresolved(
        self, index: int, column: PlanColumn, attnums: Sequence[int | None], renewed: set[str]
    ) -> None:
        """A column the catalog cannot place (gone under this name since, or moved on)."""
        name = column.name
        origin = self.record.get(name)
        if name not in self.delta:
            known = (self.before if self.previous is not None else set(self.delta)) - renewed
            _check_order(self.table, self.columns, index, known, list(self.delta))
            self._introduce(column, None, returned=False)
        elif origin is not None and not _fits(origin.attnum, attnums, index):
            # Its recorded attribute cannot sit here in attnum order: a newer column.
            self._introduce(column, None, returned=True)
        elif origin is None and self.previous is not None and name not in self.before:
            self._introduce(column, None, returned=True)
        elif self._replayed(origin):
            self.returned.append(column)

    def _check_dropped_count(self) -> None:
        """More unrecorded Delta columns gone from the catalog than drops: a rename."""
        live = {c.attnum for c in self.catalog.columns.values()}
        known = {**self.record, **self.learned}
        gone = [n for n in self.delta if n not in self.catalog.columns and n not in known]
        accounted = len({o.attnum for o in self.record.values() if o.attnum not in live})
        if gone and len(gone) > self.catalog.dropped_columns - accounted:
            raise _rename_error(self.table, self.added[0].name, None, gone)


def _fits(attnum: int, attnums: Sequence[int | None], index: int) -> bool:
    """Whether ``attnum`` lies between the known ``attnum``s around position ``index``."""
    lower = max((a for a in attnums[:index] if a is not None), default=0)
    upper = min((a for a in attnums[index + 1 :] if a is not None), default=None)
    return lower < attnum and (upper is None or attnum < upper)


def _type_change_error(
    table: str, column: PlanColumn, held: str, before: PlanColumn | None
) -> SinkDataError:
    new_type = pg_type_label(column.type_oid, column.type_modifier)
    old = (
        f"{pg_type_label(before.type_oid, before.type_modifier)} (Delta {held.upper()})"
        if before is not None
        else f"Delta {held.upper()}"
    )
    wanted = delta_type_name(column.delta.spark_sql).upper()
    if before is None:
        # No relation of the table applied yet by this process: the source type may be the
        # one the table was written under, and the configuration what changed.
        return SinkDataError(
            f"column {column.name!r} of {table} is {held.upper()} in Delta, but its type "
            f"{new_type} is now stored as {wanted}: either the column changed type, or "
            "sink.column_types for it differs from the setting the table was written "
            "with. wal2delta stopped before writing a row, so one column never mixes two "
            f"representations; restore the setting (the Delta type {held.upper()} is its "
            "record), or rebuild the Delta table from a new initial snapshot."
        )
    return SinkDataError(
        f"column {column.name!r} of {table} changed type from {old} to {new_type} (Delta "
        f"{wanted}); Delta cannot widen {held.upper()} to {wanted} safely, so wal2delta "
        "stopped before writing any row of the new type. Change the column back, or rebuild "
        "the Delta table from a new initial snapshot (drop the table and the slot, "
        "snapshot.mode: initial)."
    )


def _rename_error(
    table: str, name: str, later: str | None, vanished: Sequence[str], *, attnum: int | None = None
) -> SinkDataError:
    if attnum is not None:
        evidence = (
            f"it is attribute {attnum} of the source table (pg_attribute.attnum), which "
            f"Delta holds as column {vanished[0]!r}"
        )
    elif later is not None:
        evidence = (
            f"it comes before column {later!r}, which Delta already holds, and PostgreSQL "
            "only ever adds columns at the end"
        )
    else:
        evidence = (
            "the source catalog has fewer dropped columns than Delta has columns the table "
            "no longer has, so one of them was renamed (or the table was re-created)"
        )
    candidates = ", ".join(repr(v) for v in vanished) or "none"
    return SinkDataError(
        f"column {name!r} of {table} was renamed or replaced: {evidence} (Delta columns no "
        f"longer published: {candidates}). wal2delta cannot follow a rename, as PostgreSQL's "
        "subscriber cannot: it stopped before writing any row of the new shape. "
        "Rename the column back, or rebuild the Delta table from a new initial snapshot."
    )
