"""Schema evolution: what a changed Relation means for an existing Delta table (pure).

Theory of operation
-------------------
pgoutput sends a Relation message before the first change of a table after its schema
changed, and that is all a logical replication client learns of DDL: the message carries
the column names, types and key flags in column (``attnum``) order, but no ``attnum``s, no
defaults and no hint of what the DDL was. ``evolve`` compares the relation of a merge step
with what the Delta table holds and with the relation this process applied last for the
table (``previous``; unknown after a restart), and decides:

* **Added column** (not in Delta): Delta gets a new nullable column. PostgreSQL shows a
  column added with a constant default (a *fast default*, ``pg_attribute.attmissingval``)
  in every row that existed before, although no WAL record carries it; the executor
  backfills those rows, read from the source catalog, in the same Delta commit that adds
  the column (``delta.py``), so a crash cannot leave the column added but not backfilled.
* **Returned column** (in Delta, but not in ``previous``): a dropped column whose name
  came back. Delta still holds the values of the dropped one; the executor resets the rows
  written before the step to the new column's default (or NULL). A restarted daemon that
  replays a step adding a column, after an older step without it, sees the same thing;
  the reset then writes the backfill again, which is harmless: every row at or below the
  step's first LSN predates the column.
* **Dropped column** (in Delta, not in the relation): stays in Delta; rows the MERGE
  writes from now on get NULL there (``sql.render_merge``'s ``unpublished``), rows not
  changed since keep their last value. Nothing to do here.
* **Renamed column**: PostgreSQL appends new columns (highest ``attnum``), so a column
  Delta does not know that comes *before* one it knows cannot be new: it was renamed (or
  the publication's column list changed). Renaming the *last* column looks exactly like
  dropping it and adding another; with a source catalog it is told apart by counting: a
  dropped column leaves a dropped attribute (``attisdropped``) behind for ever, a renamed
  one does not, so more Delta columns missing from the catalog than dropped attributes
  means a rename. Both stop the daemon (``SinkDataError``) before a row of the new shape
  is written: Delta would otherwise hold the column's history under two names.
* **Type change**: a column whose Delta type differs from the type its new PostgreSQL
  type maps to stops the daemon likewise, naming both types. Changes that keep the Delta
  type (``varchar(10)`` to ``varchar(20)`` or ``text``) go on unnoticed. wal2delta never
  widens Delta types: Delta's type widening (``int`` to ``bigint``) is a table feature
  that delta-rs readers (``deltalake`` 1.x) refuse to read.

Limitations (docs/decisions.md): a returned column is recognised only while the daemon
runs, because ``previous`` is in memory; a column filled by a volatile default (``DEFAULT
now()``) or a ``USING`` type change is written by a table rewrite that logical decoding
does not see, so Delta keeps NULL or the old values for rows not changed since; a changed
publication column list or row filter is not followed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sink.base import SinkDataError
from sink.plan import PlanColumn
from sink.typemap import ARRAY_ELEMENT_OIDS, NUMERIC_OID, SCALAR_TYPE_NAMES, numeric_precision_scale

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
    """

    columns: Mapping[str, CatalogColumn]
    dropped_columns: int = 0
    primary_key: tuple[str, ...] = ()


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


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """What the executor must do before merging a step.

    Attributes:
        added: columns Delta does not have; add them, backfilling a fast default.
        returned: columns Delta has but the previous relation did not (dropped, then added
            again); reset them in rows written before the step.
    """

    added: tuple[PlanColumn, ...] = ()
    returned: tuple[PlanColumn, ...] = ()


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
) -> SchemaChange:
    """Decide how the Delta table follows a relation; see the module docstring.

    Args:
        table: qualified table name, for messages.
        columns: the relation's columns, in relation order.
        delta: the Delta table's data columns (no metadata columns), in Delta order, with
            their types normalised by ``delta_type_name``.
        previous: the columns of the relation this process applied last for the table;
            None when it applied none yet.
        catalog: the table as the source catalog describes it now; None without a catalog.

    Returns:
        The columns to add and to reset.

    Raises:
        SinkDataError: a column changed to a type Delta cannot hold, or was renamed.
    """
    before = {c.name: c for c in previous} if previous is not None else {}
    for column in columns:
        held = delta.get(column.name)
        wanted = delta_type_name(column.delta.spark_sql)
        if held is not None and held != wanted:
            raise _type_change_error(table, column, held, before.get(column.name))
    known = list(before) if previous is not None else list(delta)
    known_set = set(known)
    names = [c.name for c in columns]
    for index, column in enumerate(columns):
        if column.name in known_set:
            continue
        later = [name for name in names[index + 1 :] if name in known_set]
        if later:
            vanished = [name for name in known if name not in names]
            raise _rename_error(table, column.name, later[0], vanished)
    added = tuple(c for c in columns if c.name not in delta)
    returned = tuple(
        c for c in columns if previous is not None and c.name in delta and c.name not in before
    )
    if added and catalog is not None and delta:
        gone = [name for name in delta if name not in catalog.columns]
        if len(gone) > catalog.dropped_columns:
            raise _rename_error(table, added[0].name, None, gone)
    return SchemaChange(added=added, returned=returned)


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
    return SinkDataError(
        f"column {column.name!r} of {table} changed type from {old} to {new_type} (Delta "
        f"{wanted}); Delta cannot widen {held.upper()} to {wanted} safely, so wal2delta "
        "stopped before writing any row of the new type. Change the column back, or rebuild "
        "the Delta table from a new initial snapshot (drop the table and the slot, "
        "snapshot.mode: initial)."
    )


def _rename_error(
    table: str, name: str, later: str | None, vanished: Sequence[str]
) -> SinkDataError:
    if later is not None:
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
        f"longer published: {candidates}). wal2delta cannot follow a rename, nor a changed "
        "publication column list: it stopped before writing any row of the new shape. "
        "Rename the column back, or rebuild the Delta table from a new initial snapshot."
    )
