"""The rounds of ``wal2delta verify``: one comparison at one LSN, then re-checks.

Theory of operation
-------------------
Round 0 opens a REPEATABLE READ, READ ONLY transaction on the source; its first statement
reads the end of the WAL (the insert position as an end of record,
``capture.current_wal_lsn``), the *compared LSN* L. Inside that snapshot each published
table (``plan``: its row filter, column list and key) is summarised per bucket (``sql``:
count and sum of 60-bit row hashes, buckets by the hash of the key). Before Delta is read,
verify waits (at most ``wait`` seconds) until the slot has *passed* L: its
``confirmed_flush_lsn`` is at or after L, or - the slot being inactive, as after ``run
--endpos`` - decoding the slot up to L (``pg_logical_slot_peek_binary_changes``, which
consumes nothing) yields no row change of the publications. Delta then holds every
change up to L. The same summaries are computed over each Delta table through the Spark
session, and only the buckets whose summaries differ are read row by row on both sides
(at most ``MAX_DRILL_BUCKETS`` per table) and compared (``compare``): missing keys, extra
keys (extra copies of a row in a keyless table, compared as a multiset) and different rows.

On a live source Delta may also hold changes committed after L. Differences are therefore
checked again in further rounds, each with a fresh snapshot and LSN, re-reading only the
differing buckets once the slot has passed the new LSN, until two rounds find as many
differences or ``MAX_ROUNDS`` have run. A difference that disappears in any round is
*lag*; one that persists through a round confirmed by the slot is a *divergence*. When
the slot never passes L within ``wait`` (the daemon is stopped with changes not yet
replicated, or far behind), the differences are *unreplicated*. ``report`` turns what is
left into verdicts. On a quiet source, or after ``run --endpos``, the comparison is exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import psycopg
import structlog
from psycopg import sql

from capture import (
    PublishedTable,
    current_wal_lsn,
    read_published_tables,
    slot_state,
    with_text_form_settings,
)
from config import AppConfig
from daemon.verify.compare import Findings, as_stored, compare_rows
from daemon.verify.plan import Conn, VerifyTable, bucket_count, plan_table, selected_tables
from daemon.verify.report import TableVerdict, VerifyReport, table_verdict
from daemon.verify.sql import (
    pg_rows_query,
    pg_summary_query,
    spark_rows_query,
    spark_summary_query,
)
from daemon.wiring import source_conninfo, spark_settings
from decoder import Lsn, format_lsn
from sink import create_spark_session, stop_spark_session, table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("wal2delta.verify")

MAX_DRILL_BUCKETS: Final = 256
"""Differing buckets read row by row per table; beyond them only the counts are known."""
MAX_ROUNDS: Final = 4
_DATA_TAGS: Final = (ord("I"), ord("U"), ord("D"), ord("T"))


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

    def verdict(self, *, replicated: bool) -> TableVerdict:
        return table_verdict(
            self.table,
            source_rows=self.source_rows,
            delta_rows=self.delta_rows,
            buckets=self.buckets,
            differing_buckets=len(self.differing),
            complete=len(self.differing) <= MAX_DRILL_BUCKETS,
            findings=self.findings,
            lag=self.lag,
            error=self.error,
            replicated=replicated,
        )


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


# --- reading both sides --------------------------------------------------------------------


def _source_summary(conn: Conn, run: _TableRun) -> dict[int, tuple[int, int]]:
    rows = conn.execute(pg_summary_query(run.table, run.buckets)).fetchall()
    return {int(str(b)): (int(str(n)), int(str(s))) for b, n, s in rows}


def _delta_summary(spark: SparkSession, run: _TableRun) -> dict[int, tuple[int, int]]:
    rows = spark.sql(spark_summary_query(run.table, run.buckets)).collect()
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


def _source_rows(conn: Conn, run: _TableRun, chosen: Sequence[int]) -> list[list[object]]:
    rows = conn.execute(pg_rows_query(run.table, run.buckets, chosen)).fetchall()
    columns = run.table.columns
    return [[as_stored(c, v) for c, v in zip(columns, row, strict=True)] for row in rows]


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


def _differing(
    source: Mapping[int, tuple[int, int]], delta: Mapping[int, tuple[int, int]]
) -> list[int]:
    return sorted(b for b in source.keys() | delta.keys() if source.get(b) != delta.get(b))


def _engine_error(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


# --- rounds --------------------------------------------------------------------------------


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
    # The transaction's first statement takes its snapshot. The end of the WAL, not the
    # raw insert position: a page header past a record that ends on a page boundary, no
    # slot and no flush position would ever reach that (``capture.slots.wal_end_position``).
    return current_wal_lsn(conn)


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
    chosen, unknown = selected_tables(published, tables)
    errors = [
        TableVerdict(name, "", "error", error="not published by the configured publication(s)")
        for name in unknown
    ]
    runs: list[_TableRun] = []
    for table in chosen:
        path = table_path(str(config.sink.path), table.schema, table.name)
        try:
            with snap.transaction():
                plan = plan_table(snap, spark, config, table)
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
                run.buckets = bucket_count(snap, plan)
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
    conninfo = with_text_form_settings(source_conninfo(config))
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
    verdicts = [run.verdict(replicated=last_replicated) for run in runs] + errors
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
