"""The lake port: every engine call of the sink goes through ``LakeTables``.

``LakeTables`` wraps the Spark session for the sink - no other sink module holds it. SQL is
rendered in ``sql.py`` and executed here: statements (``sql``; ``merge`` stages a keyed
step's rows, runs its MERGE over them and removes them, one call), queries whose rows the
sink reads (``rows``, ``count``, ``newest_position``), appends of Arrow tables
(``append``; ``append_rows`` for a step's new rows, inline or from a file), rewrites of
a table from a query (``overwrite``) and whole reads of the lake's small bookkeeping
tables (``read``). It also creates a table with its columns unless it exists (an empty
DataFrame written with save mode ``ignore``: Sail rejects ``CREATE TABLE
delta.`path```; a table made here is not read back, its columns are the ones it was made
with), caches each table's columns after the first look (``TableState``), adds missing
columns (``mergeSchema``, a metadata-only commit), checks a table's key-range
partitioning against the configuration, and runs statements over temporary views of
Arrow tables (read from a local Parquet file by the embedded engine, ``sources.py``; sent
inline through the session otherwise). DataFrame schemas are built from the Arrow types
once per column set, not parsed by the engine each time.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import structlog

from decoder import Relation
from sink.base import SinkDataError
from sink.engine.arrow import ArrowColumn, ddl
from sink.engine.spark import engine_errors
from sink.engine.sql import (
    ANOMALY_COUNT,
    SOURCE_MARK,
    MetadataColumns,
    delta_table,
    quote,
    render_any_row,
    render_newest_position,
)
from sink.lake.deltars import is_delta_table
from sink.lake.sources import FILE_FORMAT, INLINE_APPEND_BYTES, SourceFiles, StagedFile
from sink.planning.evolution import delta_type_name
from sink.planning.plan import NO_POSITION, Position
from sink.settings import KeyBuckets
from sink.values.typemap import BIGINT, PlanColumn

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
    from pyspark.sql.types import StructType

log = structlog.get_logger("wal2delta.sink")


@dataclass(slots=True)
class TableState:
    """What the sink knows of one Delta table.

    Attributes:
        columns: every column (data and metadata) in Delta order, with its type as
            ``evolution.delta_type_name`` normalises it.
        reference: the table reference SQL names it by (``sql.delta_table``).
        relation: the columns of the last merge step applied in this process; None until
            one was.
        message: the Relation message object of that step; a step with another one
            (even an equal one) makes the table follow its relation again.
        stale: a statement failed; ``columns`` must be read from the table again.
        partition_column: the key-range partition column when the table has one.
        buckets_checked: the stored buckets were compared with the configured width.
        row_ids_complete: every row has a keyless identity and stamp (checked before the
            first keyless step; a keyed step may insert rows without them).
        keyless_floor: the newest change of the table known to be applied; keyless changes
            at or before it are replays (``keyless.py``). Read from the table once.
        creation: how the table is made, while ``load`` left its making to its first
            append (``append_rows``); None once it exists.
    """

    columns: dict[str, str]
    reference: str
    relation: tuple[PlanColumn, ...] | None = None
    message: Relation | None = None
    stale: bool = False
    partition_column: str | None = None
    buckets_checked: bool = False
    row_ids_complete: bool = False
    keyless_floor: Position | None = None
    creation: TableCreation | None = None


@dataclass(frozen=True, slots=True)
class TableCreation:
    """What a new table is made with (``LakeTables.load``): its location, its source name
    (for messages), its columns, whether it holds data (the ``timestampNtz`` feature), its
    partition column and its Delta table properties."""

    path: str
    table: str
    columns: tuple[ArrowColumn, ...]
    data: bool
    partition: str | None
    properties: tuple[tuple[str, str], ...]


class LakeTables:
    """The sink's Delta tables and its Spark session's statements, for one sink instance."""

    def __init__(
        self, spark: SparkSession, meta: MetadataColumns, files: SourceFiles | None = None
    ) -> None:
        """``files``: where views of Arrow tables are written for the engine to read; None
        sends the tables inline through the session."""
        self._spark = spark
        self._meta = meta
        self._files = files
        self._states: dict[str, TableState] = {}
        self.states: Mapping[str, TableState] = MappingProxyType(self._states)
        """The cached state of each table ``load`` made or read, by location (read-only:
        a state changes through this port's methods alone)."""
        self._schemas: dict[tuple[ArrowColumn, ...], StructType | str] = {}
        """``_schema``'s results: one per column set the process writes."""
        self._view_numbers = itertools.count(1)

    # --- what the sink learns of a table: every change of a TableState is made here ---

    @staticmethod
    def failed(state: TableState) -> None:
        """A statement on the table failed, and may or may not have committed: its columns
        are read from the table again before the next write."""
        state.stale = True

    @staticmethod
    def followed(
        state: TableState, relation: tuple[PlanColumn, ...] | None, message: Relation | None
    ) -> None:
        """The table follows ``relation`` (the columns of the Relation ``message``)."""
        state.relation = relation
        state.message = message

    @staticmethod
    def buckets_checked(state: TableState) -> None:
        """A stored row's key bucket was compared with the configured width."""
        state.buckets_checked = True

    @staticmethod
    def rows_without_row_ids(state: TableState) -> None:
        """Rows were written without a keyless identity (a keyed step, or appended)."""
        state.row_ids_complete = False

    @staticmethod
    def row_ids_completed(state: TableState) -> None:
        """Every row of the table has a keyless identity and stamp."""
        state.row_ids_complete = True

    @staticmethod
    def keyless_floor(state: TableState, floor: Position | None) -> None:
        """The newest change known to be applied to the keyless table (None: read it from
        the table again)."""
        state.keyless_floor = floor

    def forget(self, path: str) -> None:
        """Drop the cached state of the table at ``path``; the next look reads it again."""
        self._states.pop(path, None)

    def clear(self) -> None:
        """Forget every cached table, and remove the source files' directory (the next
        view makes a new one)."""
        self._states.clear()
        if self._files is not None:
            self._files.close()

    def load(
        self,
        path: str,
        table: str,
        wanted: Sequence[ArrowColumn],
        *,
        data: bool = False,
        partition: str | None = None,
        properties: Mapping[str, str] | None = None,
        made_by_first_append: bool = False,
    ) -> TableState:
        """Create the table with ``wanted`` unless it exists; read and cache its schema.

        ``partition`` names the partition column of a table created here (an existing
        table keeps its layout; ``check_partitioning`` compares); ``properties`` are the
        Delta table properties it is created with (``layout.table_properties``).
        ``made_by_first_append``: a table that does not exist is not made now but by its
        first ``append_rows``, in the same engine call and Delta commit as its rows
        (``TableState.creation``; ``create`` makes it empty when no row comes first).

        A data table is created with the ``timestampNtz`` table feature even when it has
        no ``TIMESTAMP_NTZ`` column yet: Delta refuses to add such a column (a PostgreSQL
        ``timestamp`` added later) to a table whose protocol lacks the feature, and the
        protocol cannot be upgraded through Sail afterwards.
        """
        creation = None
        made_here = False
        with engine_errors(f"creating or reading the Delta table of {table}"):
            if is_delta_table(path):
                schema = self._spark.read.format("delta").load(path).schema
                columns = {
                    field.name: delta_type_name(field.dataType.simpleString())
                    for field in schema.fields
                }
            else:
                made_here = True
                creation = TableCreation(
                    path, table, tuple(wanted), data, partition, tuple((properties or {}).items())
                )
                if not made_by_first_append:
                    self._make_empty(creation)
                    creation = None
                # Made here, so its schema is ``wanted`` (no read back: one engine call per
                # new table saved). ``ignore`` keeps a table another writer made meanwhile,
                # which only a second daemon on the same lake could (unsupported).
                columns = dict(_column_types(wanted))
        state = self._states[path] = TableState(columns, delta_table(path), creation=creation)
        if self._meta.key_bucket in state.columns:
            state.partition_column = self._meta.key_bucket
            # Made by this process, so with the configured width: no stored row to compare.
            state.buckets_checked = made_here
        return state

    def create(self, state: TableState) -> None:
        """Make the table ``load`` left to its first append (``state.creation``), empty,
        now: a step other than an append, or a change of its schema, needs it to exist."""
        creation = state.creation
        if creation is None:
            return
        with engine_errors(f"creating the Delta table of {creation.table}"):
            self._make_empty(creation)
        state.creation = None

    def _make_empty(self, creation: TableCreation) -> None:
        """Make the table ``creation`` describes, without rows: an empty frame saved with
        mode ``ignore``, which keeps a table another writer made meanwhile."""
        _made(self.empty_frame(creation.columns).write.format("delta").mode("ignore"), creation)

    def check_partitioning(self, table: str, state: TableState, spec: KeyBuckets | None) -> None:
        """The table's layout must be the configured one: a MERGE relies on it."""
        column = self._meta.key_bucket
        if spec is not None and state.partition_column is None:
            raise SinkDataError(
                f"sink.partition_by_key lists {table}, but its Delta table exists without "
                f"the partition column {column!r}; Delta cannot partition an existing table: "
                "remove the entry, or rewrite the table (drop it and take a new snapshot)"
            )
        if spec is None and state.partition_column is not None:
            raise SinkDataError(
                f"the Delta table of {table} is partitioned by key range ({column!r}) but "
                "sink.partition_by_key does not list it; put its entry back, with the same "
                "width"
            )

    def ensure_columns(self, path: str, table: str, wanted: Sequence[ArrowColumn]) -> None:
        """Create the table, or add the columns it lacks (NULL in existing rows)."""
        state = self._states.get(path)
        if state is None:
            state = self.load(path, table, wanted)
        self.add_columns(path, table, state, [c for c in wanted if c.name not in state.columns])

    def add_columns(
        self, path: str, table: str, state: TableState, columns: Sequence[ArrowColumn]
    ) -> None:
        """Append ``columns`` to the table's schema; a metadata-only Delta commit."""
        if not columns:
            return
        self.create(state)
        frame_columns = list(columns)
        partition = state.partition_column
        if partition is not None:
            # Sail rejects an append to a partitioned table without its partition column.
            frame_columns.append(ArrowColumn(partition, BIGINT.spark_sql, BIGINT.arrow))
        with engine_errors(f"adding columns {', '.join(c.name for c in columns)} to {table}"):
            writer = (
                self.empty_frame(frame_columns)
                .write.format("delta")
                .mode("append")
                .option("mergeSchema", "true")
            )
            if partition is not None:
                writer = writer.partitionBy(partition)
            writer.save(path)
        state.columns.update(_column_types(columns))

    def empty_frame(self, columns: Sequence[ArrowColumn]) -> DataFrame:
        """An empty DataFrame with ``columns``."""
        schema = pa.schema([pa.field(c.name, c.arrow) for c in columns])
        return self._spark.createDataFrame(schema.empty_table(), schema=self._schema(columns))

    def _schema(self, columns: Sequence[ArrowColumn]) -> StructType | str:
        """``columns`` as the schema of a DataFrame made from Arrow, worked out once per
        column set: a ``StructType`` built from the Arrow types (a DDL string costs a round
        trip to the engine to parse, each time), or the DDL string when Arrow's mapping to
        Spark disagrees with a column's Spark type."""
        key = tuple(columns)
        schema = self._schemas.get(key)
        if schema is None:
            schema = self._schemas[key] = _struct_type(columns) or ddl(columns)
        return schema

    @contextmanager
    def view(self, table: pa.Table, columns: Sequence[ArrowColumn]) -> Iterator[str]:
        """A relation reference to ``table``, usable in SQL for the duration of the block.

        The embedded engine reads the table's file itself (``parquet.`path```,
        ``sources.py``); otherwise the table is sent inline and registered as a temporary
        view, dropped at the end.
        """
        with self._staged_file(table, columns) as staged:
            if staged is not None:
                yield staged.reference
                return
        name = f"__w2d_source_{next(self._view_numbers)}"
        self._spark.createDataFrame(table, schema=self._schema(columns)).createOrReplaceTempView(
            name
        )
        try:
            yield quote(name)
        finally:
            self._spark.catalog.dropTempView(name)

    def merge(
        self,
        table: pa.Table,
        columns: Sequence[ArrowColumn],
        statement: str,
        anomaly_count: str | None = None,
    ) -> int:
        """Run ``statement`` (a MERGE) over ``table`` (typed as ``columns``), after the
        query ``anomaly_count`` when given; return the count that query gives (0 without).

        Both were rendered with ``sql.SOURCE_MARK`` as their view: the staged rows'
        reference (``view``) takes its place.
        """
        with self.view(table, columns) as reference:
            anomalies = 0
            if anomaly_count is not None:
                anomalies = self.count(anomaly_count.replace(SOURCE_MARK, reference), ANOMALY_COUNT)
            self._spark.sql(statement.replace(SOURCE_MARK, reference))
        return anomalies

    @contextmanager
    def _staged_file(
        self, table: pa.Table, columns: Sequence[ArrowColumn]
    ) -> Iterator[StagedFile | None]:
        """``table`` in a file the engine reads, for the duration of the block
        (``sources.py``); None: send it inline."""
        if self._files is None:
            yield None
            return
        # The engine takes the types from the file: cast to those of ``columns``, as the
        # inline path's explicit schema does.
        schema = pa.schema([pa.field(c.name, c.arrow) for c in columns])
        if not table.schema.equals(schema):
            table = table.cast(schema)
        with ExitStack() as stack:
            try:
                staged: StagedFile | None = stack.enter_context(self._files.staged(table))
            except OSError as exc:
                log.warning(
                    "MERGE sources cannot be written to local files",
                    directory=str(self._files.directory or tempfile.gettempdir()),
                    error=f"{type(exc).__name__}: {exc}",
                    consequence="every later source goes to the engine inline, which is slower",
                )
                self._files.close()
                self._files = None
                staged = None
            yield staged

    def rows(self, query: str) -> list[Any]:
        """The rows of ``query`` (pyspark ``Row`` objects, read by column name)."""
        return list(self._spark.sql(query).collect())

    def read(self, path: str) -> list[Any]:
        """Every row of the Delta table at ``path`` (the lake's small bookkeeping tables)."""
        return list(self._spark.read.format("delta").load(path).collect())

    def append(
        self,
        path: str,
        table: pa.Table,
        columns: Sequence[ArrowColumn],
        *,
        partitions: Sequence[str] = (),
        merge_schema: bool = False,
        creation: TableCreation | None = None,
    ) -> None:
        """Append ``table`` (typed as ``columns``) to the Delta table at ``path``, one commit;
        with ``creation``, the commit that makes the table (``TableState.creation``)."""
        frame = self._spark.createDataFrame(table, schema=self._schema(columns))
        _save_appended(
            frame, path, partitions=partitions, merge_schema=merge_schema, creation=creation
        )

    def append_rows(
        self,
        path: str,
        table: pa.Table,
        columns: Sequence[ArrowColumn],
        *,
        names: Sequence[str] | None = None,
        partitions: Sequence[str] = (),
    ) -> None:
        """Append the columns ``names`` of ``table`` (every column when None), typed as
        ``columns`` say (by name), to the Delta table at ``path``, in one commit and one
        engine call, without SQL: inline up to ``INLINE_APPEND_BYTES``, read from a source
        file the embedded engine sees above it (``sources.py``).

        Columns are matched by name; a table column the rows lack is NULL in them.
        ``partitions`` names the table's partition column (Sail rejects an append to a
        partitioned table without it). A table ``load`` left to its first append is made
        by this one, with its rows: the inline rows get every column of the new table,
        NULL where they have none, so the table is made as ``load`` makes it; rows that go
        through a file go into a table made just before.
        """
        if names is not None:
            typed = {column.name: column for column in columns}
            columns = [typed[name] for name in names]
            table = table.select(names)
        state = self._states.get(path)
        creation = None if state is None else state.creation
        if table.nbytes > INLINE_APPEND_BYTES:
            if state is not None:
                self.create(state)
            with self._staged_file(table, columns) as staged:
                if staged is not None:
                    # Written out here, not through ``_save_appended``: after staging, the
                    # walk of a table's write returns to no file it left (decision 0129).
                    writer = self._spark.read.format(FILE_FORMAT).load(str(staged.path)).write
                    writer = writer.format("delta").mode("append")
                    if partitions:
                        writer = writer.partitionBy(*partitions)
                    writer.save(path)
                    return
            creation = None  # made above
        if creation is not None:
            table = _with_every_column(table, creation.columns)
            columns = creation.columns
        self.append(path, table, columns, partitions=partitions, creation=creation)
        if state is not None:
            state.creation = None

    def overwrite(
        self, path: str, query: str, *, merge_schema: bool = False, partitions: Sequence[str] = ()
    ) -> None:
        """Replace the Delta table at ``path`` by the rows of ``query``, in one commit (the
        table is created when it does not exist, partitioned by ``partitions``)."""
        writer = self._spark.sql(query).write.format("delta").mode("overwrite")
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        if partitions:
            writer = writer.partitionBy(*partitions)
        writer.save(path)

    def holds_rows(self, target: str) -> bool:
        """Whether the table ``target`` (``sql.delta_table``) has any row."""
        return bool(self.rows(render_any_row(target=target)))

    def newest_position(self, target: str) -> Position:
        """The newest (commit LSN, ordinal) stamp of ``target``; ``NO_POSITION`` when empty."""
        rows = self.rows(render_newest_position(self._meta, target=target))
        return (int(rows[0]["l"]), int(rows[0]["o"])) if rows else NO_POSITION

    def sql(self, statement: str) -> None:
        """Run ``statement`` (a command: MERGE, DELETE, UPDATE) to completion.

        Spark Connect runs a command when ``sql`` is called (Sail and Spark alike, as
        classic Spark does): the call returns after the Delta commit, and fetching its
        result rows (the operation metrics, unused) would only cost another round trip.
        """
        self._spark.sql(statement)

    def count(self, query: str, column: str) -> int:
        """The integer in ``column`` of the first row of ``query`` (0 without rows)."""
        rows = self._spark.sql(query).collect()
        return int(rows[0][column]) if rows else 0


def _save_appended(
    frame: DataFrame,
    path: str,
    *,
    partitions: Sequence[str] = (),
    merge_schema: bool = False,
    creation: TableCreation | None = None,
) -> None:
    """Append ``frame`` to the Delta table at ``path``, one commit; with ``creation``, the
    commit that makes the table (``_made``: its partition column, features, properties)."""
    writer = frame.write.format("delta").mode("append")
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    if creation is not None:
        _made(writer, creation)
        return
    if partitions:
        writer = writer.partitionBy(*partitions)
    writer.save(path)


def _made(writer: DataFrameWriter, creation: TableCreation) -> None:
    """Save with ``writer`` the first commit of the table ``creation`` describes: its
    partition column, its table features and properties."""
    if creation.data:
        writer = writer.option("delta.feature.timestampNtz", "supported")
    if creation.partition is not None:
        writer = writer.partitionBy(creation.partition)
    for key, value in creation.properties:
        writer = writer.option(key, value)
    writer.save(creation.path)


def _with_every_column(table: pa.Table, columns: Sequence[ArrowColumn]) -> pa.Table:
    """``table`` with exactly ``columns``, in their order: NULL where it has none."""
    present = set(table.column_names)
    return pa.table(
        [
            table.column(c.name) if c.name in present else pa.nulls(table.num_rows, c.arrow)
            for c in columns
        ],
        names=[c.name for c in columns],
    )


def _column_types(columns: Sequence[ArrowColumn]) -> Iterator[tuple[str, str]]:
    """Each column's name and type as ``TableState.columns`` holds them, for columns this
    port wrote itself (a table's schema read back gives the same forms)."""
    return ((column.name, delta_type_name(column.spark_sql)) for column in columns)


def _struct_type(columns: Sequence[ArrowColumn]) -> StructType | None:
    """``columns`` as a Spark ``StructType`` (every field nullable, as a parsed DDL string
    makes them) from their Arrow types; None when Arrow's mapping gives another Spark type
    than a column's ``spark_sql``."""
    from pyspark.sql.pandas.types import from_arrow_type  # noqa: PLC0415 - pyspark is heavy
    from pyspark.sql.types import StructField, StructType  # noqa: PLC0415

    fields = []
    for column in columns:
        spark_type = from_arrow_type(column.arrow, prefer_timestamp_ntz=True)
        if delta_type_name(spark_type.simpleString()) != delta_type_name(column.spark_sql):
            return None
        fields.append(StructField(column.name, spark_type, nullable=True))
    return StructType(fields)
