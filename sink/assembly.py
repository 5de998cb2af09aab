"""The Delta sink put together: every part made once, from the settings, and handed to
``DeltaSink`` (which orders a batch over them) and to capture (``base.SinkParts``).

This module holds no rule: it only builds. Each part's job is in its own subpackage
(docs/architecture.md, The sink's parts).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from decoder import Relation, TypeDescription, ValueDecoder
from sink.base import SinkParts
from sink.copies.copies import TableCopies
from sink.copies.online import OnlineCopies
from sink.copies.snapshot import BulkLoader
from sink.copies.step_bulk import BulkAppendExecutor
from sink.engine.spark import is_embedded
from sink.lake.deltars import DeltaRsAppender
from sink.lake.sources import SourceFiles
from sink.lake.tables import LakeTables
from sink.planning.evolution import SourceCatalog
from sink.planning.holdback import HeldChanges
from sink.planning.plan import PlanOptions
from sink.planning.replays import ReplayHorizon
from sink.records.batches import BatchRecords
from sink.records.bookkeeping import Bookkeeping
from sink.records.commits import CommitLog
from sink.records.rejects import RejectsLog
from sink.records.timeline import LakeTimeline
from sink.settings import SinkSettings
from sink.steps.step_history import HistoryExecutor
from sink.steps.writer import TableWriter
from sink.upkeep.compaction import Compactor

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class Assembly:
    """The parts of one sink (the module docstring)."""

    lake: LakeTables
    """The lake port every engine call goes through."""
    plan_options: PlanOptions
    decoder: ValueDecoder
    held: HeldChanges
    replays: ReplayHorizon
    copies: TableCopies
    """Which tables are copied while streaming (screens every batch)."""
    records: BatchRecords
    writer: TableWriter
    compactor: Compactor
    turns: threading.RLock
    """Taken by whatever writes the tables themselves - a batch, upkeep, a copy that starts
    or replaces its table, a timeline record - so they take turns. A copy that starts waits
    for the batch in flight: the batch was screened before the copy started, and its MERGE -
    reading the table before the copy's commit, committing after it - would fail on the
    conflict (Sail merges without retries). A table is never compacted while its copy
    replaces it, and the relation follower's pending records are never flushed or
    forgotten by the other thread. The rows of a copy are appended to its staging table
    outside it, so a copy runs while batches are applied."""
    parts: SinkParts
    catalog_lookups: CatalogLookups | None


class CatalogLookups:
    """What the planner and the value decoder read from the source catalog, once each."""

    def __init__(self, catalog: SourceCatalog) -> None:
        self._catalog = catalog
        self._primary_keys: dict[Relation, tuple[str, ...]] = {}

    def describe_type(self, type_oid: int) -> TypeDescription | None:
        """A user type's description (``ValueDecoder`` caches it per OID)."""
        return self._catalog.describe_type(type_oid)

    def primary_key(self, relation: Relation) -> tuple[str, ...]:
        """The table's primary key, once per Relation message."""
        key = self._primary_keys.get(relation)
        if key is None:
            described = self._catalog.table(relation.schema_name, relation.relation_name)
            key = self._primary_keys[relation] = described.primary_key if described else ()
        return key

    def clear(self) -> None:
        """Forget the primary keys read."""
        self._primary_keys.clear()


def assemble(
    spark: SparkSession, settings: SinkSettings, catalog: SourceCatalog | None
) -> Assembly:
    """Every part of a sink writing to ``settings.path`` through ``spark``."""
    meta = settings.metadata
    lookups = CatalogLookups(catalog) if catalog is not None else None
    # User types in binary mode are described from the catalog (decoder.usertypes), on the
    # first relation that has one.
    decoder = ValueDecoder(lookups.describe_type if lookups is not None else None)
    plan_options = PlanOptions(
        keys=settings.keys,
        reserved_columns=meta.reserved,
        primary_key=lookups.primary_key if lookups is not None else None,
        on_missing_key=settings.on_missing_key,
        column_names=settings.column_names,
        history=settings.history,
        columnar=True,
        column_types=settings.column_types,
        on_unrepresentable=settings.unrepresentable_policy,
    )
    # The embedded engine reads MERGE sources from local files (sources.py).
    files = SourceFiles() if is_embedded(spark) and not settings.inline_sources else None
    lake = LakeTables(spark, meta, files)
    bookkeeping = Bookkeeping(lake, settings.path, meta)
    rejects = RejectsLog(lake, settings.path, meta)
    commits = CommitLog(lake, settings.path)
    writer = TableWriter(
        lake,
        settings,
        bookkeeping=bookkeeping,
        history=HistoryExecutor(lake, settings.path, meta),
        catalog=catalog,
        decoder=decoder,
    )
    loader = BulkLoader(
        lake,
        settings,
        writer=writer,
        appender=BulkAppendExecutor(lake, rejects, DeltaRsAppender(settings.bulk_writer)),
        bookkeeping=bookkeeping,
        commits=commits,
        plan_options=plan_options,
        decoder=decoder,
    )
    copies = TableCopies(lake, settings.path)
    turns = threading.RLock()
    return Assembly(
        lake=lake,
        plan_options=plan_options,
        decoder=decoder,
        held=HeldChanges(settings.table_min_rows, settings.table_max_age),
        replays=ReplayHorizon(commits.newest_high_lsn),
        copies=copies,
        records=BatchRecords(
            settings.path,
            commits=commits,
            bookkeeping=bookkeeping,
            rejects=rejects,
            messages_table=settings.messages_table,
        ),
        writer=writer,
        compactor=Compactor.for_settings(settings, lake),
        turns=turns,
        parts=SinkParts(
            markers=bookkeeping,
            bulk=loader,
            copies=OnlineCopies(
                lake,
                settings,
                copies=copies,
                loader=loader,
                bookkeeping=bookkeeping,
                turns=turns,
            ),
            timeline=LakeTimeline(commits, turns),
        ),
        catalog_lookups=lookups,
    )
