"""``wal2delta verify``: every replicated table compared with its source, at one LSN.

Theory of operation
-------------------
Round 0 opens a REPEATABLE READ, READ ONLY transaction on the source; its first statement
reads the WAL insert position, the *compared LSN* L. Inside that snapshot each published
table (``read_published_tables``: its row filter and column list) is summarised per bucket
(``daemon.verify_sql``: count and sum of 60-bit row hashes, buckets by the hash of the
key). Before Delta is read, verify waits (at most ``wait`` seconds) until the slot has
*passed* L: its ``confirmed_flush_lsn`` is at or after L, or - the slot being inactive, as
after ``run --endpos`` - decoding the slot up to L (``pg_logical_slot_peek_binary_changes``,
which consumes nothing) yields no row change of the publications. Delta then holds every
change up to L. The same summaries are computed over each Delta table through the Spark
session, and only the buckets whose summaries differ are read row by row on both sides
and compared in Python, by the type mapping's meaning: missing keys, extra keys (extra
copies of a row in a keyless table, compared as a multiset) and different rows.

On a live source Delta may also hold changes committed after L. Differences are therefore
checked again in further rounds, each with a fresh snapshot and LSN, re-reading only the
differing buckets once the slot has passed the new LSN. A difference that disappears in
any round is *lag* (reported, exit 0); one that persists through a round confirmed by the
slot, until two rounds agree, is a *divergence* (exit 1). When the slot never passes L
within ``wait`` (the daemon is stopped with changes not yet replicated, or far behind),
the differences are *unreplicated*: verify cannot tell lag from divergence and exits 1.
On a quiet source, or after ``run --endpos``, the comparison is exact.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Final, Literal

import psycopg
import structlog
from psycopg import sql

from capture import (
    EXIT_FATAL,
    EXIT_OK,
    PublishedTable,
    read_published_tables,
    slot_state,
    with_text_form_settings,
)
from config import AppConfig
from daemon.verify_sql import (
    VerifyColumn,
    VerifyTable,
    pg_rows_query,
    pg_summary_query,
    spark_rows_query,
    spark_summary_query,
)
from daemon.wiring import configured_keys, relation_name, sink_settings, spark_settings
from decoder import Lsn, format_lsn, parse_lsn
from sink import column_map, create_spark_session, stop_spark_session, table_path, to_delta_value

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("wal2delta.verify")

Conn = psycopg.Connection[tuple[object, ...]]
Status = Literal["match", "lag", "different", "unreplicated", "error"]
DifferenceKind = Literal["missing", "extra", "different"]

ROWS_PER_BUCKET: Final = 512
MAX_BUCKETS: Final = 16384
MAX_DRILL_BUCKETS: Final = 256
"""Differing buckets read row by row per table; beyond them only the counts are known."""
MAX_ROUNDS: Final = 4
EXAMPLES: Final = 5
_DATA_TAGS: Final = (ord("I"), ord("U"), ord("D"), ord("T"))


@dataclass(frozen=True)
class Difference:
    """One example of a difference: the row's key (the whole row without a key) and, for a
    different row, the columns that differ."""

    kind: DifferenceKind
    key: dict[str, str]
    columns: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TableVerdict:
    """The comparison of one table.

    Attributes:
        table: ``schema.table``.
        delta_path: the Delta table's location.
        status: ``match``; ``lag`` (differences that vanished once Delta caught up);
            ``different`` (divergence); ``unreplicated`` (the slot never passed the
            compared LSN: lag and divergence cannot be told apart); ``error``.
        source_rows: rows in PostgreSQL at the compared LSN.
        delta_rows: live rows in Delta when it was read.
        keyless: compared as a multiset (no key).
        missing: keys in PostgreSQL, not in Delta (rows, for a keyless table).
        extra: keys (rows) in Delta, not in PostgreSQL.
        different: keys whose rows differ.
        lag: differences seen that disappeared in a later round.
        examples: a few differences of each kind.
        buckets: buckets the table was summarised in.
        differing_buckets: buckets whose summaries differed in round 0.
        complete: every differing bucket was read row by row (the counts are exact).
        error: why the table could not be compared.
    """

    table: str
    delta_path: str
    status: Status
    source_rows: int | None = None
    delta_rows: int | None = None
    keyless: bool = False
    missing: int = 0
    extra: int = 0
    different: int = 0
    lag: int = 0
    examples: list[Difference] = field(default_factory=list)
    buckets: int = 0
    differing_buckets: int = 0
    complete: bool = True
    error: str | None = None


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of ``wal2delta verify``.

    Attributes:
        slot: the configured slot.
        compared_lsn: the source LSN of round 0's snapshot (the LSN compared at).
        final_lsn: the LSN of the last round's snapshot.
        confirmed_flush_lsn: the slot's confirmed flush position at the end.
        replicated: the slot had passed the compared LSN when Delta was read.
        rounds: comparison rounds run (round 0 plus re-checks of differences).
        tables: one verdict per table.
    """

    slot: str
    compared_lsn: str
    final_lsn: str
    confirmed_flush_lsn: str | None
    replicated: bool
    rounds: int
    tables: list[TableVerdict]

    @property
    def matches(self) -> bool:
        return all(t.status in ("match", "lag") for t in self.tables)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.matches else EXIT_FATAL


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


@dataclass
class _TableRun:
    """One table's state across rounds (private, mutable)."""

    table: VerifyTable
    buckets: int = 1
    source_summary: dict[int, tuple[int, int]] = field(default_factory=dict)
    source_rows: int | None = None
    delta_rows: int | None = None
    differing: list[int] = field(default_factory=list)
    findings: Findings | None = None
    lag: int = 0
    error: str | None = None


# --- values --------------------------------------------------------------------------------


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


def _shown(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)


def _source_value(column: VerifyColumn, value: object) -> object:
    """A source value as the sink writes it; a value Delta cannot hold stays as read."""
    if value is None:
        return None
    try:
        return to_delta_value(column.mapped, value)
    except ValueError:
        return value


# --- catalog -------------------------------------------------------------------------------


def _columns(conn: Conn, schema: str, name: str) -> list[tuple[str, int, int, bool]]:
    rows = conn.execute(
        "SELECT attname, atttypid::int, atttypmod, attgenerated <> '' FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (sql.Identifier(schema, name).as_string(conn),),
    ).fetchall()
    return [(str(n), int(str(t)), int(str(m)), bool(g)) for n, t, m, g in rows]


def _catalog_key(conn: Conn, schema: str, name: str) -> tuple[str, list[str], list[str]]:
    """(relreplident, primary key columns, replica identity index columns)."""
    row = conn.execute(
        """
        SELECT c.relreplident::text,
          ARRAY(SELECT a.attname::text FROM pg_index i,
                  unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n), pg_attribute a
                WHERE i.indrelid = c.oid AND i.indisprimary AND a.attrelid = c.oid
                  AND a.attnum = k.attnum ORDER BY k.n),
          ARRAY(SELECT a.attname::text FROM pg_index i,
                  unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n), pg_attribute a
                WHERE i.indrelid = c.oid AND i.indisreplident AND a.attrelid = c.oid
                  AND a.attnum = k.attnum ORDER BY k.n)
        FROM pg_class c WHERE c.oid = %s::regclass
        """,
        (sql.Identifier(schema, name).as_string(conn),),
    ).fetchone()
    assert row is not None
    primary, identity = row[1], row[2]
    assert isinstance(primary, list)
    assert isinstance(identity, list)
    return str(row[0]), [str(c) for c in primary], [str(c) for c in identity]


def _key(conn: Conn, published: PublishedTable, configured: Sequence[str] | None) -> list[str]:
    """The key the sink merges on: the replica identity's, else configured, else primary."""
    identity, primary, index = _catalog_key(conn, published.schema, published.name)
    if identity == "d" and primary:
        return primary
    if identity == "i" and index:
        return index
    if configured:
        return list(configured)
    return primary


def _plan_table(
    conn: Conn, spark: SparkSession, config: AppConfig, published: PublishedTable
) -> VerifyTable:
    schema, name = published.schema, published.name
    path = table_path(str(config.sink.path), schema, name)
    described = _columns(conn, schema, name)
    if published.columns is not None:
        described = [c for c in described if c[0] in published.columns]
    delta_columns = set(spark.read.format("delta").load(path).columns)
    renamed = column_map([c[0] for c in described], config.sink.column_names)
    overrides = sink_settings(config).column_types.get(f"{schema}.{name}", {})
    columns = []
    for column, type_oid, typmod, generated in described:
        delta_name = renamed.get(column, column)
        present = delta_name in delta_columns
        if generated and not present:
            continue  # not published (before PostgreSQL 18, or not asked for)
        override = overrides.get(column)
        columns.append(
            VerifyColumn.of(column, delta_name if present else None, type_oid, typmod, override)
        )
    key = _key(conn, published, configured_keys(config).get(f"{schema}.{name}"))
    metadata = config.sink.metadata
    return VerifyTable(
        schema=schema,
        name=name,
        columns=tuple(columns),
        key=tuple(k for k in key if k in {c.name for c in columns}),
        row_filter=published.where,
        delta_path=path,
        deleted_column=(
            metadata.deleted_column
            if config.sink.soft_delete and metadata.deleted_column in delta_columns
            else None
        ),
        lsn_column=metadata.lsn_column if metadata.lsn_column in delta_columns else None,
    )


def _bucket_count(conn: Conn, table: VerifyTable) -> int:
    row = conn.execute(
        "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
        (sql.Identifier(table.schema, table.name).as_string(conn),),
    ).fetchone()
    estimate = int(str(row[0])) if row is not None else -1
    if estimate < 0:
        counted = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table.schema, table.name))
        ).fetchone()
        estimate = int(str(counted[0])) if counted is not None else 0
    return max(1, min(MAX_BUCKETS, math.ceil(estimate / ROWS_PER_BUCKET)))


# --- slot ----------------------------------------------------------------------------------


def _has_pending_changes(conn: Conn, slot: str, publications: Sequence[str], target: Lsn) -> bool:
    """Whether decoding the (inactive) slot up to ``target`` yields a row change.

    Decoding reads only WAL already flushed (``GetFlushRecPtr``); with ``synchronous_commit
    = off`` a commit may still sit in WAL buffers, so until the flush position reaches
    ``target`` the answer is yes.
    """
    flushed = conn.execute(
        "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (format_lsn(target),)
    ).fetchone()
    if flushed is None or not flushed[0]:
        return True
    names = ",".join(sql.Identifier(p).as_string(conn) for p in publications)
    row = conn.execute(
        "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
        "'proto_version', '1', 'publication_names', %s) WHERE get_byte(data, 0) = ANY(%s)",
        (slot, format_lsn(target), names, list(_DATA_TAGS)),
    ).fetchone()
    return row is not None and int(str(row[0])) > 0


def replicated_to(conn: Conn, slot: str, publications: Sequence[str], target: Lsn) -> bool:
    """Whether everything the publications changed up to ``target`` is in Delta.

    True when the slot's confirmed flush position is at or after ``target``, or when the
    slot is inactive and nothing published changed between that position and ``target``.
    """
    state = slot_state(conn, slot)
    if state is None:
        return False
    if state.confirmed_flush_lsn is not None and state.confirmed_flush_lsn >= target:
        return True
    if state.active_pid is not None:
        return False
    try:
        return not _has_pending_changes(conn, slot, publications, target)
    except psycopg.Error as exc:  # the daemon took the slot meanwhile, say
        log.info("slot peek failed", slot=slot, error_type=type(exc).__name__)
        return False


@dataclass(frozen=True)
class _Clock:
    deadline: float
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def _wait_replicated(
    conn: Conn, config: AppConfig, target: Lsn, clock: _Clock, *, poll: float = 0.5
) -> bool:
    source = config.source
    while True:
        if replicated_to(conn, source.slot, source.publication, target):
            return True
        remaining = clock.deadline - clock.now()
        if remaining <= 0:
            return False
        clock.sleep(min(poll, remaining))


# --- comparing -----------------------------------------------------------------------------


def _source_summary(conn: Conn, run: _TableRun) -> dict[int, tuple[int, int]]:
    rows = conn.execute(pg_summary_query(run.table, run.buckets)).fetchall()
    return {int(str(b)): (int(str(n)), int(str(s))) for b, n, s in rows}


def _delta_summary(spark: SparkSession, run: _TableRun) -> dict[int, tuple[int, int]]:
    rows = spark.sql(spark_summary_query(run.table, run.buckets)).collect()
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


def _source_rows(conn: Conn, run: _TableRun, chosen: Sequence[int]) -> list[list[object]]:
    rows = conn.execute(pg_rows_query(run.table, run.buckets, chosen)).fetchall()
    columns = run.table.columns
    return [[_source_value(c, v) for c, v in zip(columns, row, strict=True)] for row in rows]


def _delta_rows(
    spark: SparkSession, run: _TableRun, chosen: Sequence[int]
) -> list[tuple[list[object], int | None]]:
    """The Delta rows in ``chosen`` buckets with each row's commit LSN."""
    arrow = spark.sql(spark_rows_query(run.table, run.buckets, chosen)).toArrow()
    out = []
    for record in arrow.to_pylist():
        values = list(record.values())
        lsn = values.pop()
        out.append((values, int(lsn) if lsn is not None else None))
    return out


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
                shown = {n: _shown(v) for n, v in zip(names, row, strict=True)}
                found.add(("extra", *ident), Difference("extra", shown))
        for ident, left in counts.items():
            if left > 0:
                shown = {n: _shown(v) for n, v in zip(names, as_source[ident], strict=True)}
                found.add(("missing", *ident), Difference("missing", shown), left)
        return found
    positions = [names.index(k) for k in table.key]

    def key_of(row: Sequence[object]) -> tuple[object, ...]:
        return tuple(comparable(row[i]) for i in positions)

    def shown_key(row: Sequence[object]) -> dict[str, str]:
        return {names[i]: _shown(row[i]) for i in positions}

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


def _differing(
    source: Mapping[int, tuple[int, int]], delta: Mapping[int, tuple[int, int]]
) -> list[int]:
    return sorted(b for b in source.keys() | delta.keys() if source.get(b) != delta.get(b))


def _engine_error(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


@dataclass(frozen=True)
class _Context:
    """The connections, engine and settings one verification uses."""

    snap: Conn
    slot_conn: Conn
    spark: SparkSession
    config: AppConfig
    clock: _Clock

    def wait_replicated(self, target: Lsn) -> bool:
        return _wait_replicated(self.slot_conn, self.config, target, self.clock)


def _drill(
    ctx: _Context, runs: Iterable[_TableRun], compared_at: Lsn, *, replicated: bool | None = None
) -> tuple[dict[int, Findings], bool]:
    """Read the differing buckets of ``runs``: the source in the open snapshot, then Delta
    once the slot passed ``compared_at`` (waited for unless ``replicated`` already says).
    Returns findings per run id, and whether the slot had passed ``compared_at``."""
    conn, spark = ctx.snap, ctx.spark
    chosen = {id(run): run.differing[:MAX_DRILL_BUCKETS] for run in runs if run.error is None}
    live = [run for run in runs if id(run) in chosen and chosen[id(run)]]
    source: dict[int, list[list[object]]] = {}
    for run in live:
        try:
            with conn.transaction():
                source[id(run)] = _source_rows(conn, run, chosen[id(run)])
        except psycopg.Error as exc:
            run.error = f"cannot read the source table: {_engine_error(exc)}"
    if replicated is None:
        replicated = ctx.wait_replicated(compared_at)
    found: dict[int, Findings] = {}
    for run in live:
        if run.error is not None:
            continue
        try:
            rows = _delta_rows(spark, run, chosen[id(run)])
        except Exception as exc:  # any engine failure is this table's error
            run.error = f"cannot read the Delta table: {_engine_error(exc)}"
            continue
        found[id(run)] = compare_rows(run.table, source[id(run)], rows, compared_at)
    return found, replicated


def _snapshot_lsn(conn: Conn) -> Lsn:
    # The transaction's first statement takes its snapshot.
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(str(row[0]))


def _selected(
    published: list[PublishedTable], names: Sequence[str] | None
) -> tuple[list[PublishedTable], list[str]]:
    if not names:
        return published, []
    wanted = {relation_name(n if "." in n else f"public.{n}") for n in names}
    chosen = [p for p in published if p.qualified_name in wanted]
    unknown = sorted(wanted - {p.qualified_name for p in chosen})
    return chosen, unknown


def _unreadable(snap: Conn, table: PublishedTable, path: str, exc: Exception) -> TableVerdict:
    """A table whose Delta table cannot be read: an error, unless the source table is
    empty too (the daemon creates a Delta table with the table's first change)."""
    where = sql.SQL(" WHERE ({})").format(sql.SQL(table.where)) if table.where else sql.SQL("")
    with snap.transaction():
        row = snap.execute(
            sql.SQL("SELECT EXISTS (SELECT FROM {}{})").format(
                sql.Identifier(table.schema, table.name), where
            )
        ).fetchone()
    if row is not None and not row[0]:
        return TableVerdict(table.qualified_name, path, "match", source_rows=0)
    problem = f"cannot read the Delta table: {_engine_error(exc)}"
    return TableVerdict(table.qualified_name, path, "error", error=problem)


def _round_zero(
    ctx: _Context, tables: Sequence[str] | None
) -> tuple[Lsn, bool, list[_TableRun], list[TableVerdict]]:
    """The whole comparison at one snapshot: summaries, then the differing buckets' rows."""
    snap, spark, config = ctx.snap, ctx.spark, ctx.config
    compared_at = _snapshot_lsn(snap)
    published = read_published_tables(snap, config.source.publication, check_column_lists=False)
    chosen, unknown = _selected(published, tables)
    errors = [
        TableVerdict(name, "", "error", error="not published by the configured publication(s)")
        for name in unknown
    ]
    runs: list[_TableRun] = []
    for table in chosen:
        path = table_path(str(config.sink.path), table.schema, table.name)
        try:
            with snap.transaction():
                plan = _plan_table(snap, spark, config, table)
        except psycopg.Error as exc:
            problem = f"cannot read the source table: {_engine_error(exc)}"
            errors.append(TableVerdict(table.qualified_name, path, "error", error=problem))
            continue
        except Exception as exc:  # the Delta table cannot be read
            errors.append(_unreadable(snap, table, path, exc))
            continue
        run = _TableRun(plan)
        try:
            with snap.transaction():
                run.buckets = _bucket_count(snap, plan)
                run.source_summary = _source_summary(snap, run)
        except psycopg.Error as exc:
            run.error = f"cannot read the source table: {_engine_error(exc)}"
        run.source_rows = sum(n for n, _ in run.source_summary.values())
        runs.append(run)
    replicated = ctx.wait_replicated(compared_at)
    for run in runs:
        if run.error is not None:
            continue
        try:
            delta = _delta_summary(spark, run)
        except Exception as exc:  # any engine failure is this table's error
            run.error = f"cannot read the Delta table: {_engine_error(exc)}"
            continue
        run.delta_rows = sum(n for n, _ in delta.values())
        run.differing = _differing(run.source_summary, delta)
    found, _ = _drill(ctx, runs, compared_at, replicated=replicated)
    for run in runs:
        if id(run) in found:
            run.findings = found[id(run)]
    return compared_at, replicated, runs, errors


def verify_source(
    config: AppConfig,
    *,
    tables: Sequence[str] | None = None,
    wait: float = 30.0,
    spark: SparkSession | None = None,
    now: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> VerifyReport:
    """Compare every replicated table of ``config`` (or the ``tables`` named) with its
    Delta table; see the module docstring.

    Args:
        config: the daemon's configuration (source, slot, publications, lake, engine).
        tables: ``schema.table`` names to compare (``table`` means ``public.table``).
        wait: seconds to wait for the slot to pass a compared LSN before reading Delta.
        spark: a Spark session to use; default: one created as the daemon would
            (``spark.mode``), stopped at the end.
        now: monotonic clock (tests).
        sleep: sleep function (tests).
    """
    clock = _Clock(now() + wait, now, sleep)
    own_session = spark is None
    session = spark if spark is not None else create_spark_session(spark_settings(config))
    # Text forms printed as the daemon's connections print them (TimeZone UTC, ...).
    conninfo = with_text_form_settings(config.source.conninfo())
    try:
        with (
            psycopg.connect(conninfo, autocommit=True) as slot_conn,
            psycopg.connect(conninfo) as snap,
        ):
            snap.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            snap.read_only = True
            ctx = _Context(snap, slot_conn, session, config, clock)
            with snap.transaction():
                compared_at, replicated, runs, errors = _round_zero(ctx, tables)
            final_lsn, rounds = compared_at, 1
            last_replicated = replicated
            previous = -1
            while replicated and rounds < MAX_ROUNDS:
                pending = [r for r in runs if r.findings and r.findings.total() and r.error is None]
                total = sum(r.findings.total() for r in pending if r.findings)
                if not pending or total == previous:
                    break
                previous = total
                with snap.transaction():
                    final_lsn = _snapshot_lsn(snap)
                    found, last_replicated = _drill(ctx, pending, final_lsn)
                rounds += 1
                for run in pending:
                    if run.findings is not None and id(run) in found:
                        run.lag += run.findings.keep_common(found[id(run)])
                if not last_replicated:
                    break
            state = slot_state(slot_conn, config.source.slot)
    finally:
        if own_session:
            stop_spark_session(session)
    confirmed = state.confirmed_flush_lsn if state is not None else None
    verdicts = [_verdict(run, replicated=last_replicated) for run in runs] + errors
    report = VerifyReport(
        slot=config.source.slot,
        compared_lsn=format_lsn(compared_at),
        final_lsn=format_lsn(final_lsn),
        confirmed_flush_lsn=format_lsn(confirmed) if confirmed is not None else None,
        replicated=replicated,
        rounds=rounds,
        tables=sorted(verdicts, key=lambda v: v.table),
    )
    log.info(
        "verify finished",
        compared_lsn=report.compared_lsn,
        tables=len(verdicts),
        differing=sum(1 for v in verdicts if v.status not in ("match", "lag")),
    )
    return report


def _verdict(run: _TableRun, *, replicated: bool) -> TableVerdict:
    table = run.table
    base = {
        "table": table.qualified_name,
        "delta_path": table.delta_path,
        "source_rows": run.source_rows,
        "delta_rows": run.delta_rows,
        "keyless": not table.key,
        "buckets": run.buckets,
        "differing_buckets": len(run.differing),
        "complete": len(run.differing) <= MAX_DRILL_BUCKETS,
    }
    if run.error is not None:
        return TableVerdict(**base, status="error", error=run.error)  # type: ignore[arg-type]
    findings = run.findings or Findings()
    counts = {"missing": 0, "extra": 0, "different": 0}
    examples: list[Difference] = []
    for ident, times in findings.counts.items():
        example = findings.examples[ident]
        counts[example.kind] += times
        if sum(1 for e in examples if e.kind == example.kind) < EXAMPLES:
            examples.append(example)
    # Summaries that differ while no row does: a value both engines print differently
    # (a float's exponent, say); the rows decide.
    status: Status
    if findings.total() > 0:
        status = "different" if replicated else "unreplicated"
    else:
        status = "lag" if run.lag else "match"
    return TableVerdict(
        **base,  # type: ignore[arg-type]
        status=status,
        missing=counts["missing"],
        extra=counts["extra"],
        different=counts["different"],
        lag=run.lag,
        examples=sorted(examples, key=lambda e: e.kind),
    )


# --- output --------------------------------------------------------------------------------


def render_report(report: VerifyReport, *, as_json: bool) -> str:
    """Human table by default, JSON for scripts."""
    if as_json:
        return json.dumps({**asdict(report), "matches": report.matches}, indent=2)
    lines = [
        f"compared at LSN {report.compared_lsn} (slot {report.slot}, confirmed flush "
        f"{report.confirmed_flush_lsn or '-'}"
        + ("" if report.replicated else ", NOT yet past the compared LSN")
        + ")",
        "",
        f"{'table':<32} {'postgres':>9} {'delta':>9}  result",
    ]
    for table in report.tables:
        lines.extend(_table_lines(table, report))
    differing = sum(1 for t in report.tables if t.status not in ("match", "lag"))
    lines.append("")
    lines.append("all tables match" if report.matches else f"{differing} table(s) differ")
    return "\n".join(lines)


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table_lines(table: TableVerdict, report: VerifyReport) -> list[str]:
    head = f"{table.table:<32} {_count(table.source_rows):>9} {_count(table.delta_rows):>9}  "
    if table.status == "error":
        return [head + f"ERROR: {table.error}"]
    if table.status in ("match", "lag"):
        note = (
            f" ({table.lag} difference(s) were lag: changes in flight, gone at a later LSN)"
            if table.lag
            else ""
        )
        return [head + "match" + note]
    at_least = "" if table.complete else "at least "
    summary = f"{at_least}{table.missing} missing, {table.extra} extra, {table.different} different"
    label = "DIFFERENT" if table.status == "different" else "NOT YET REPLICATED"
    lines = [head + f"{label}: {summary}"]
    if table.status == "unreplicated":
        lines.append(
            f"    the slot has not passed LSN {report.compared_lsn}: these may be lag; run "
            "again once the daemon has caught up"
        )
    names = {"missing": "missing in Delta", "extra": "only in Delta", "different": "differs"}
    for example in table.examples:
        key = ", ".join(f"{k}={v}" for k, v in example.key.items())
        columns = f" (columns: {', '.join(example.columns)})" if example.columns else ""
        lines.append(f"    {names[example.kind]}: {key}{columns}")
    return lines
