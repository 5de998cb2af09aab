"""``DeltaSink``: orders the work of a batch; the rules live in the parts it calls.

Theory of operation
-------------------
``apply`` is the sink's ``apply_dispatch`` (docs/architecture.md, The sink's shape):

0. Screens the batch against the tables being copied (``copies/copies.py``), gives back
   the changes held from earlier batches and holds back those of tables that change a
   little (``planning/holdback.py``, only with ``sink.table_min_rows``).
1. Plans the batch (``planning/fold.plan_batch``, pure), with the one ``PlanOptions`` built
   from the settings when the sink is made.
2. Opens the batch's records (``records/batches.py``: the commit log's intent), and learns
   which tables the lake cannot hold changes of yet (``planning/replays.py``).
3. Writes every table - up to ``sink.concurrency`` tables at once, each table's work on one
   thread - with ``steps/writer.TableWriter``: the table made ready, each step handed to the
   executor of its kind, then the change history.
4. Closes the batch's records (messages, rejects, the commit log's record) and tells the
   compactor which tables it wrote (``upkeep/compaction.py``).

Every part is made once by ``assembly.assemble``; the ones capture holds beside the sink -
snapshot markers, the snapshot's bulk path, copies while streaming, the timeline - are
``parts`` (``base.SinkParts``). ``apply`` returns after the last commit of every table, so
the whole batch is durable (invariant 1). A failure part-way leaves other commits in place
(the other tables of the batch finish theirs); the batch is replayed after a restart and
the LSN guard makes that harmless (invariant 2).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from decoder import Lsn
from sink.assembly import assemble
from sink.base import Batch, BatchResult, SinkError, SinkParts
from sink.planning.fold import plan_batch
from sink.settings import SinkSettings
from sink.steps.executor import WRITE_KINDS, WriteKind
from sink.upkeep.compaction import UPKEEP_BUDGET_SECONDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sink.planning.evolution import SourceCatalog
    from sink.planning.plan import MergePlan
    from sink.steps.writer import TableOutcome, TableWriter

log = structlog.get_logger("wal2delta.sink")


class DeltaSink:
    """Applies batches to Delta tables at ``settings.path`` through ``spark``.

    The session belongs to the caller (``create_spark_session``); ``close`` does not stop
    it. The sink worker applies batches and runs upkeep; capture holds the sink's
    ``parts`` beside it - the online copier's thread copies tables at the same time. What
    writes the tables themselves takes turns (``Assembly.turns``).

    ``catalog`` (optional) reads the source catalog: fast defaults of added columns, the
    evidence that tells a renamed last column from a dropped one, primary keys for
    REPLICA IDENTITY FULL and NOTHING tables, and the layout of user-defined column types
    sent in binary. Without it, added columns are NULL in existing rows, only renames of a
    column that is not the last are detected, such tables match on every column (FULL) or
    on the insert's position (NOTHING) unless ``settings.keys`` names a key, and a binary
    value of a user-defined type is a ``SinkDataError``. The catalog is the caller's to
    close.
    """

    def __init__(
        self, spark: SparkSession, settings: SinkSettings, catalog: SourceCatalog | None = None
    ) -> None:
        self._settings = settings
        self._parts = assemble(spark, settings, catalog)
        self.parts: SinkParts = self._parts.parts
        """What capture holds beside the sink (``base.SinkParts``)."""
        self._pool: ThreadPoolExecutor | None = None
        """Threads that apply several tables of a batch at once; made on first need."""

    # --- Sink protocol ---------------------------------------------------------------------

    def apply(self, batch: Batch) -> BatchResult:
        """Apply every change of ``batch``; return once all of it is committed in Delta.

        Raises:
            SinkDataError: a change cannot be written (type, identity, column name).
            SinkRetryableError: the engine was unreachable or a concurrent commit
                conflicted; replaying the batch is safe.
            SinkError: any other engine failure.
        """
        with self._parts.turns:
            return self._apply(batch)

    def _apply(self, batch: Batch) -> BatchResult:
        started = time.monotonic()
        parts = self._parts
        # A caller that never calls after_apply still compacts.
        parts.compactor.compact_due(UPKEEP_BUDGET_SECONDS)
        # Small tables' changes may wait for a later batch (holdback.py); ``batch`` is
        # then what is applied now, without a durable_lsn while changes stay held.
        batch = parts.held.admit(self._screened(batch), started)
        plan = plan_batch(batch, parts.plan_options, decoder=parts.decoder)
        new_tables = parts.replays.new_tables(plan.tables)
        parts.replays.attempted(plan.tables, parts.records.begin(batch))
        try:
            outcomes = self._write_tables(plan.tables, new_tables)
            origins = parts.records.tables_written()
        except BaseException:
            parts.records.failed()
            raise
        names = [table.qualified_name for table in plan.tables]
        histories = {
            name: outcome.history
            for name, outcome in zip(names, outcomes, strict=True)
            if outcome.history is not None
        }
        finished = parts.records.finish(batch, plan, histories)
        if finished.written:
            parts.compactor.wrote(list(finished.written))
        if origins is not None:
            parts.compactor.wrote([origins])  # one small file per batch that adds columns
        table_writes: Counter[WriteKind] = Counter()
        for outcome in outcomes:
            table_writes.update(outcome.writes)
        return BatchResult(
            rows_by_table={table.qualified_name: dict(table.counts) for table in plan.tables},
            toast_anomalies=sum(outcome.anomalies for outcome in outcomes),
            duration_seconds=time.monotonic() - started,
            seconds_by_table={
                name: outcome.seconds for name, outcome in zip(names, outcomes, strict=True)
            },
            toast_anomalies_by_table={
                name: outcome.anomalies
                for name, outcome in zip(names, outcomes, strict=True)
                if outcome.anomalies
            },
            unrepresentable=dict(finished.unrepresentable),
            held_lsn=_earliest(parts.held.low_lsn, parts.copies.held_lsn),
            held_changes=parts.held.count,
            table_writes={kind: table_writes[kind] for kind in WRITE_KINDS if table_writes[kind]},
        )

    def after_apply(self) -> None:
        """Compact the tables due after the batch just applied (``upkeep/compaction.py``),
        for at most ``UPKEEP_BUDGET_SECONDS``; the rest waits for the next batch or
        ``settle``.

        Called by the sink worker once the batch is reported durable (``DeferringSink``);
        ``apply`` does it first otherwise. A failure only logs a warning.
        """
        with self._parts.turns:
            self._parts.compactor.compact_due(UPKEEP_BUDGET_SECONDS)

    def settle(self) -> bool:
        """Do what ``apply`` deferred: the records waiting for the next batch's intent,
        then the compactions and vacuums still due, for at most ``UPKEEP_BUDGET_SECONDS``;
        return whether some are still due (the worker settles again while it stays idle).

        Called by the sink worker once it has been idle for a moment (``DeferringSink``). A
        failure only logs a warning: the records wait for the next append.
        """
        with self._parts.turns:
            self._write_deferred_records()
            return self._parts.compactor.compact_due(UPKEEP_BUDGET_SECONDS)

    def _screened(self, batch: Batch) -> Batch:
        """``batch`` without the changes of tables being copied while streaming, or those a
        finished copy holds (``copies/copies.py``); no cut while changes are dropped."""
        copies = self._parts.copies
        changes = copies.screen(batch.changes)
        if len(changes) == len(batch.changes) and copies.held_lsn is None:
            return batch
        return replace(
            batch,
            changes=tuple(changes),
            durable_lsn=batch.durable_lsn if copies.held_lsn is None else None,
        )

    def held_deadline(self) -> float | None:
        """When the changes held back for later batches must be applied (``holdback.py``);
        None when none is held."""
        return self._parts.held.deadline

    def discard_held(self) -> None:
        """Forget the changes held back; the server sends them again (never acknowledged).

        Called when a new session starts from the acknowledged position: copies that
        landed take effect now (``copies/copies.py``).
        """
        self._parts.held.discard()
        self._parts.copies.rewound()

    def _write_deferred_records(self) -> None:
        try:
            self._parts.records.flush()
        except SinkError as exc:
            log.warning("writing the commit log failed; it is tried again", error=str(exc))

    def close(self) -> None:
        """Write the deferred records, then forget cached table schemas (and remove the
        directory of MERGE source files, ``lake/sources.py``).

        No compaction: a worker that outlived its stop may still be applying a batch, and
        a compaction due waits for the next process. The Spark session and the catalog
        stay open.
        """
        parts = self._parts
        self._write_deferred_records()
        parts.held.discard()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        parts.lake.clear()
        if parts.catalog_lookups is not None:
            parts.catalog_lookups.clear()
        parts.writer.clear()
        parts.records.clear()
        parts.replays.forget()
        parts.compactor.clear()

    # --- tables ----------------------------------------------------------------------------

    def _write_tables(
        self, tables: Sequence[MergePlan], new_tables: frozenset[str]
    ) -> list[TableOutcome]:
        """Write each table's steps and history; up to ``settings.concurrency`` tables at
        once (``steps/writer.TableWriter``).

        Tables are independent: each one's steps run in order on one thread, and no two
        threads write the same Delta table (the bookkeeping tables they share serialise
        themselves). When a table fails, the others still finish - a MERGE cannot be
        interrupted, and what they committed is replayed harmlessly (invariant 2) - and the
        first failure, in the batch's table order, is raised: the batch is not durable, so
        nothing of it is acknowledged (invariant 1).
        """
        writer = self._parts.writer
        writer.expect(tables)
        try:
            return self._write_each(writer, tables, new_tables)
        finally:
            writer.expect(())

    def _write_each(
        self, writer: TableWriter, tables: Sequence[MergePlan], new_tables: frozenset[str]
    ) -> list[TableOutcome]:
        """``_write_tables``' work, from up to ``settings.concurrency`` threads."""
        if len(tables) <= 1 or self._settings.concurrency <= 1:
            return [writer.write(table, table.qualified_name in new_tables) for table in tables]
        pool = self._pool
        if pool is None:
            pool = self._pool = ThreadPoolExecutor(
                max_workers=self._settings.concurrency, thread_name_prefix="wal2delta-table"
            )
        futures = [
            pool.submit(writer.write, table, table.qualified_name in new_tables) for table in tables
        ]
        wait(futures)
        failures = [(t, f.exception()) for t, f in zip(tables, futures, strict=True)]
        failed = [(t, e) for t, e in failures if e is not None]
        for table, error in failed[1:]:
            log.warning(
                "another table of the failed batch failed too",
                table=table.qualified_name,
                error=f"{type(error).__name__}: {error}",
            )
        if failed:
            raise failed[0][1]
        return [f.result() for f in futures]


def _earliest(*lsns: Lsn | None) -> Lsn | None:
    """The smallest of the LSNs given, None when none is."""
    return min((lsn for lsn in lsns if lsn is not None), default=None)
