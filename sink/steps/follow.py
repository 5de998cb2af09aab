"""Schema-change execution: a Delta table follows its changed PostgreSQL relation.

``evolution.evolve`` decides (pure); ``RelationFollower.follow`` carries it out before a
step of a new relation is applied: appends plain new columns (``mergeSchema``, metadata
only), adds columns with a fast default and backfills them in one overwrite commit, resets
columns dropped and added back in the rows written before, and records the columns' origins
(``bookkeeping.py``) only afterwards, so a crash in between repeats harmless work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pyarrow as pa
import structlog

from decoder import ColumnKind, Lsn, Relation, ValueDecoder, cause_line, format_lsn
from sink.base import SinkDataError
from sink.engine.arrow import ArrowColumn, metadata_columns, plan_column
from sink.engine.spark import engine_errors
from sink.engine.sql import (
    delta_table,
    render_added_columns_select,
    render_column_reset,
)
from sink.lake.tables import LakeTables, TableState
from sink.planning.evolution import (
    CatalogTable,
    ColumnOrigin,
    SourceCatalog,
    delta_type_name,
    evolve,
)
from sink.planning.plan import KeylessStep, MergePlan, MergeStep
from sink.records.bookkeeping import Bookkeeping
from sink.settings import SinkSettings
from sink.values.convert import convert_value
from sink.values.naming import delta_column_name
from sink.values.typemap import PlanColumn
from sink.values.unrepresentable import substitute

log = structlog.get_logger("wal2delta.sink")


class RelationFollower:
    """Carries out schema changes for one ``DeltaSink`` (same session, tables, catalog)."""

    def __init__(
        self,
        lake: LakeTables,
        *,
        bookkeeping: Bookkeeping,
        settings: SinkSettings,
        catalog: SourceCatalog | None,
        decoder: ValueDecoder,
    ) -> None:
        self._lake = lake
        self._bookkeeping = bookkeeping
        self._settings = settings
        self._meta = settings.metadata
        self._catalog = catalog
        self._decoder = decoder
        self._described: dict[tuple[str, str], CatalogTable | None] = {}
        """Catalog entries read ahead for the tables of the batch being written
        (``expect``); each is used once, by the table's first follow."""
        self._metadata = {
            row_ids: tuple(metadata_columns(self._meta, row_ids=row_ids))
            for row_ids in (False, True)
        }
        """The metadata columns of keyed (False) and keyless (True) tables."""

    def expect(self, names: Sequence[tuple[str, str]]) -> None:
        """Read the catalog entries of the tables ``names`` in one request, for their
        first ``follow`` in this batch; drops the entries an earlier call read and no
        follow used (they would be older than the catalog by now)."""
        self._described = (
            dict(self._catalog.tables(names)) if self._catalog is not None and names else {}
        )

    def follow(
        self,
        plan: MergePlan,
        path: str,
        state: TableState,
        step: MergeStep | KeylessStep,
        message: Relation | None = None,
    ) -> None:
        """Make the table ready for ``step``'s relation (``writer.py``'s docstring)."""
        meta = self._meta
        # Metadata columns a table created earlier may lack: the ordinal (keyed tables
        # written by wal2delta before it stamped one), the soft-delete flag once soft
        # deletes are switched on.
        metadata = [
            c for c in self._metadata[step.identity == "row"] if c.name not in state.columns
        ]
        if step.columns == state.relation and not metadata and message is state.message:
            return
        reserved = set(meta.reserved)
        data = {name: typ for name, typ in state.columns.items() if name not in reserved}
        catalog: CatalogTable | None = None
        origins: dict[str, ColumnOrigin] = {}
        if self._catalog is not None:
            name = (plan.schema, plan.table)
            described = (
                self._described.pop(name) if name in self._described else self._catalog.table(*name)
            )
            catalog = self._delta_named(described)
            origins = self._bookkeeping.column_origins(plan.schema, plan.table)
        change = evolve(
            plan.qualified_name,
            step.columns,
            data,
            state.relation,
            catalog,
            origins=origins,
            first_lsn=step.first_lsn,
        )
        values = self._missing_values(plan, (*change.added, *change.returned), catalog)
        table = plan.qualified_name
        plain = [plan_column(c) for c in change.added if c.name not in values] + metadata
        self._lake.add_columns(path, table, state, plain)
        defaulted = [c for c in change.added if c.name in values]
        # A column the catalog no longer has lost its default with it: resetting would
        # replace what an earlier run backfilled with NULL, so it is left alone.
        reset = [c for c in change.returned if catalog is None or c.name in catalog.columns]
        if defaulted or reset:
            self._lake.create(state)  # a table left to its first append is made first
        if defaulted:
            self._add_filled_columns(path, table, state, defaulted, values, lsn=step.first_lsn)
        if reset:
            self._reset_columns(path, table, reset, values, lsn=step.first_lsn)
        # Recorded only now: a crash before this line finds the old origins and repeats
        # the additions and resets (harmless); one after it finds them done.
        if change.origins:
            self._bookkeeping.record_column_origins(plan.schema, plan.table, change.origins)
        if change.added or change.returned:
            log.info(
                "delta table follows relation",
                table=table,
                added=[c.name for c in change.added],
                reset=[c.name for c in reset],
                backfilled=sorted(values),
                lsn=format_lsn(step.first_lsn),
            )
        self._lake.followed(state, step.columns, message)

    def _delta_named(self, catalog: CatalogTable | None) -> CatalogTable | None:
        """``catalog`` with its columns under their Delta names, as ``evolve`` compares them."""
        policy = self._settings.column_names
        if catalog is None or policy == "error":
            return catalog
        columns = {delta_column_name(n, policy): c for n, c in catalog.columns.items()}
        return replace(catalog, columns=columns)

    def _missing_values(
        self, plan: MergePlan, columns: Sequence[PlanColumn], catalog: CatalogTable | None
    ) -> dict[str, object]:
        """The fast default of each of ``columns`` that has one, as a Delta value."""
        values: dict[str, object] = {}
        if catalog is None:
            return values
        for column in columns:
            described = catalog.columns.get(column.name)
            if described is None:
                # Dropping a column clears its missing value: the default is gone with it.
                log.warning(
                    "added column no longer in the source catalog",
                    table=plan.qualified_name,
                    column=column.name,
                    consequence="rows older than the column keep NULL if it had a default",
                )
                continue
            if described.missing_value is None:
                continue
            default = described.missing_value.encode()
            try:
                values[column.name] = convert_value(column, ColumnKind.TEXT, default, self._decoder)
            except Exception as exc:
                found = substitute(
                    column.delta, column.type_oid, ColumnKind.TEXT, default, self._decoder
                )
                if found is None:
                    raise SinkDataError(
                        f"cannot store the default of column {column.name!r} of "
                        f"{plan.qualified_name}, which existing rows show, as "
                        f"{column.delta.spark_sql}: {cause_line(exc)}"
                    ) from exc
                # The default is the catalog's, not a change's: no row to reject, the log
                # names the convention once.
                log.warning(
                    "column default stored under its convention",
                    table=plan.qualified_name,
                    column=column.name,
                    reason=found.reason.value,
                    original=described.missing_value,
                )
                values[column.name] = found.value
        return values

    def _default_view_data(
        self, columns: Sequence[PlanColumn], values: dict[str, object]
    ) -> tuple[list[ArrowColumn], pa.Table]:
        specs = [plan_column(c) for c in columns]
        arrow = pa.table(
            {c.name: pa.array([values.get(c.name)], c.arrow) for c in specs},
        )
        return specs, arrow

    def _add_filled_columns(
        self,
        path: str,
        table: str,
        state: TableState,
        columns: Sequence[PlanColumn],
        values: dict[str, object],
        *,
        lsn: Lsn,
    ) -> None:
        """Add ``columns`` and fill them in the rows up to ``lsn``, in one Delta commit."""
        names = [c.name for c in columns]
        specs, arrow = self._default_view_data(columns, values)
        with (
            engine_errors(f"adding columns {', '.join(names)} with their defaults to {table}"),
            self._lake.view(arrow, specs) as view,
        ):
            query = render_added_columns_select(
                names, self._meta, target=delta_table(path), view=view, lsn=lsn
            )
            self._lake.overwrite(path, query, merge_schema=True)
        state.columns.update((c.name, delta_type_name(c.spark_sql)) for c in specs)

    def _reset_columns(
        self,
        path: str,
        table: str,
        columns: Sequence[PlanColumn],
        values: dict[str, object],
        *,
        lsn: Lsn,
    ) -> None:
        """Set ``columns`` to their default (or NULL) in the rows up to ``lsn``.

        Every row at or below ``lsn`` predates the relation that brought the columns
        (back), so PostgreSQL shows the default there; setting it again when a restarted
        sink replays the step is harmless.
        """
        names = [c.name for c in columns]
        specs, arrow = self._default_view_data(columns, values)
        with (
            engine_errors(f"resetting returned columns {', '.join(names)} of {table}"),
            self._lake.view(arrow, specs) as view,
        ):
            self._lake.sql(
                render_column_reset(names, self._meta, target=delta_table(path), view=view, lsn=lsn)
            )
