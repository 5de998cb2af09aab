"""Tables copied while streaming (``OnlineCopySink``): the object capture's copier holds.

A copy is appended to a staging table inside its table's directory (prepared by the bulk
path, ``snapshot.BulkLoader.prepare``) while batches are applied, then replaces the table
in one commit: the table adopts the staging table's files (``lake/adoption.py``), or, where
delta-rs cannot commit them, the engine overwrites the table from the staging table. Which
tables are being copied, and what the stream does with their changes meanwhile, is
``copies.TableCopies`` (shared with ``DeltaSink``, which screens each batch with it).

What writes the tables themselves takes turns with the batches (``turns``, the lock
``DeltaSink`` holds while it applies one): a copy that starts waits for the batch in
flight, and a table is never compacted while its copy replaces it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pyarrow as pa

from decoder import Lsn, PgTimestamp, Relation
from sink.base import CopyTarget, SinkDataError
from sink.copies.bulk import BulkTarget
from sink.copies.copies import TableCopies
from sink.copies.snapshot import BulkLoader
from sink.engine.deadline import engine_call
from sink.engine.spark import engine_errors
from sink.engine.sql import delta_table, render_select_all
from sink.lake.adoption import StagedFileAdopter, remove_directory, remove_stale_staging
from sink.lake.deltars import is_delta_table
from sink.lake.tables import LakeTables
from sink.records.bookkeeping import Bookkeeping
from sink.settings import SinkSettings
from sink.values.naming import staging_path, table_path


class OnlineCopies:
    """Copies tables while the stream runs (the module docstring)."""

    def __init__(
        self,
        lake: LakeTables,
        settings: SinkSettings,
        *,
        copies: TableCopies,
        loader: BulkLoader,
        bookkeeping: Bookkeeping,
        turns: threading.RLock,
    ) -> None:
        self._lake = lake
        self._settings = settings
        self._copies = copies
        self._loader = loader
        self._bookkeeping = bookkeeping
        self._turns = turns
        self._adopter = StagedFileAdopter() if settings.bulk_writer != "spark" else None

    def request_copies(self, tables: Sequence[str], reason: str) -> None:
        """Record that ``tables`` are to be copied while streaming (``copies.py``)."""
        self._copies.request(tables, reason)

    def copy_requests(self) -> list[tuple[str, str]]:
        """``(table, reason)`` of every copy requested or interrupted part-way."""
        return [(r.table, r.reason) for r in self._copies.to_copy()]

    def start_copies(self, tables: Sequence[str], reason: str) -> None:
        """Drop the changes of ``tables`` from now on: their copies begin. Waits for the
        batch being applied, if any (``turns``)."""
        with self._turns:
            self._copies.start(tables, reason)

    def finish_empty_copy(self, table: str, lsn: Lsn, reason: str) -> None:
        """A requested table is not published at ``lsn``: nothing to copy; done."""
        self._copies.finish(table, lsn, reason)

    def copy_new_tables(self) -> None:
        """From now on, the first change of a table with neither a Delta table nor a copy
        record starts its copy (``copies.py``): called once the initial snapshot is done,
        with ``snapshot.mode: initial``."""
        self._copies.copy_new_tables(self._has_delta_table)

    def _has_delta_table(self, schema: str, table: str) -> bool:
        """Whether ``schema.table`` has a Delta table (this process wrote or read it, or
        its log exists)."""
        path = table_path(self._settings.path, schema, table)
        return self._lake.states.get(path) is not None or is_delta_table(path)

    def knows_table(self, schema: str, table: str) -> bool:
        """Whether ``schema.table`` has a Delta table or a copy record."""
        if any(r.table == f"{schema}.{table}" for r in self._copies.records()):
            return True
        return self._has_delta_table(schema, table)

    def abandon_copy(self, table: str, reason: str) -> None:
        """A copy failed: apply the table's changes again until it is retried."""
        self._copies.abandon(table, reason)

    def copy_rewind_due(self) -> bool:
        """A copy landed: the stream must restart from the acknowledged position."""
        return self._copies.rewind_due

    def tables_copying(self) -> list[str]:
        """Tables whose changes are dropped now (copy running or landed, not rewound)."""
        return self._copies.copying()

    def begin_copy(self, relation: Relation, lsn: Lsn, commit_time: PgTimestamp) -> BulkTarget:
        """A fresh staging table for ``relation``'s copy at ``lsn``, for ``append_bulk``.

        Raises:
            SinkDataError: the table cannot be copied by appends (a key-range partitioned
                table without a key).
            SinkRetryableError, SinkError: as ``DeltaSink.apply``.
        """
        staging = staging_path(
            self._settings.path, relation.schema_name, relation.relation_name, lsn
        )
        with self._turns:  # the relation follower's records are the batches' too
            remove_stale_staging(
                table_path(self._settings.path, relation.schema_name, relation.relation_name)
            )
            target = self._loader.prepare(relation, lsn, commit_time, staging)
        if target is None:
            raise SinkDataError(
                f"{relation.qualified_name} cannot be copied while streaming: its rows "
                "cannot be appended as they are (a key-range partitioned table needs a key)"
            )
        return target

    def append_bulk(
        self, target: CopyTarget, strings: pa.RecordBatch | pa.Table, first_ordinal: int
    ) -> int:
        """Append copied rows to the staging table ``begin_copy`` prepared
        (``snapshot.BulkLoader.append_bulk``)."""
        return self._loader.append_bulk(target, strings, first_ordinal)

    def finish_copy(self, relation: Relation, target: CopyTarget, lsn: Lsn, reason: str) -> None:
        """Replace the table by its copy in one commit; from the stream's next rewind on,
        its changes before ``lsn`` are skipped and the rest applied (``copies.py``).

        The table adopts the staging table's files (``adoption.py``); where delta-rs cannot
        commit them, the engine overwrites the table from the staging table.

        Raises:
            SinkRetryableError, SinkError: the table could not be replaced (it still holds
                its old content).
        """
        assert isinstance(target, BulkTarget), "a target begin_copy handed out"
        with self._turns:
            self._replace_by_copy(relation, target, lsn, reason)

    def _replace_by_copy(
        self, relation: Relation, target: BulkTarget, lsn: Lsn, reason: str
    ) -> None:
        self._bookkeeping.flush_column_origins()
        name = relation.qualified_name
        path = table_path(self._settings.path, relation.schema_name, relation.relation_name)
        action = f"replacing {name} by its copy"
        try:
            with engine_call(action):
                adopted = self._adopter is not None and self._adopter.adopt(
                    path, target.path, action
                )
            if not adopted:
                spec = self._settings.key_buckets.get(name)
                partitions = (self._settings.metadata.key_bucket,) if spec is not None else ()
                with engine_errors(action):
                    self._lake.overwrite(
                        path,
                        render_select_all(target=delta_table(target.path)),
                        merge_schema=True,
                        partitions=partitions,
                    )
        finally:
            # Also after a failure: an engine error may come after the commit it reports.
            self._lake.forget(path)
            self._lake.forget(target.path)
        self._copies.finish(name, lsn, reason)
        if not adopted:
            remove_directory(target.path, "a staging table the engine copied from")
