"""Issue 31: one backlog spread over 1 to 1,000 tables, and lag over 200 tables.

Run: ``python -m bench tables`` (``python -m bench.tables``; ``--help`` for the knobs). The
default takes 10 to 25 minutes on two cores, most of it the 1,000-table case; ``--tables
1,10,50 --lag-seconds 20`` takes a few.

Method
------
Throughput, memory and start-up, for each table count N of ``--tables`` (default 1, 10,
50, 200, 1,000), in that order, one case after the other on one PostgreSQL 18
(``bench.postgres``):

1. A fresh database with N tables of the benchmark shape (``bigint`` primary key, about
   100 bytes a row, no seed rows), one publication of all of them and a pgoutput slot.
2. The backlog, written before the daemon starts (``bench.workload``): ``--changes``
   changes in transactions of ``--transaction`` (60% insert, 30% update, 10% delete),
   transaction ``k`` into table ``k mod N``: round robin, so every table gets the same
   number of transactions (at 1,000 tables, one transaction of 100 changes each). A
   table's first transaction updates and deletes rows it inserted itself.
3. ``wal2delta run -c FILE --endpos END`` in a child process (``bench.daemon_process``)
   into a fresh lake: the production configuration (embedded Sail, adaptive batching),
   plus ``--concurrency``, ``--table-min-rows`` and ``--table-max-age`` as
   ``sink.concurrency``, ``sink.table_min_rows`` and ``sink.table_max_age`` when given.
   ``--engine sc://HOST:PORT`` (issue 41) points every daemon of the run, the lag
   section's too, at that Spark Connect endpoint (``sink.spark: {mode: connect, url:
   URL}``) instead of embedded Sail; the report's title names the engine.
4. Every Delta table's row count (delta-rs) against its source table's; any difference
   fails the benchmark (exit 1).

Per case: changes per second over the streaming time (from the daemon's ``replication
started`` log line to its last ``batch applied``, so the process's start-up is not in
it) and its ratio to the 1-table case of the same run (to the smallest N when 1 is not
asked for); the child's peak RSS (``ru_maxrss``) and its ratio; and start-up, the seconds
from the process start to ``replication started`` (engine up, publication and slot
checked, streaming) and to the first batch durable in Delta (the first MERGE, which also
creates the tables that batch writes to).

Lag (``--lag``, on by default): a second PostgreSQL with ``synchronous_commit`` on (as
``bench.lag``), ``--lag-tables`` tables without seed rows, and the daemon in this process
(``bench.lag.run_steady``: ``daemon.Supervisor`` and ``DeltaSink`` with the same sink
settings). One warm-up transaction per table (the first write to a table creates its Delta
table) is waited for; then transactions of ``--transaction`` changes, round robin over the
tables, at ``--lag-rate`` changes/s for ``--lag-seconds``. Each transaction's lag is from
its commit to the return of the ``apply`` that made it durable (``bench.lag``); p50 and p99
are printed, and the row counts are checked as above.

Targets (issue 31), printed next to the figures, never asserted: changes/s at 200 tables
>= 0.5x and at 50 tables >= 0.8x of one table; peak RSS at 200 tables <= 1.3x of one table;
p99 lag <= 2 s at 5k changes/s over 200 tables.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg
from deltalake import DeltaTable
from psycopg import sql

from bench.daemon import bench_config_document
from bench.daemon_process import BATCH_APPLIED, STREAMING, ChildRun, run_wal2delta
from bench.lag import LagSink, SteadyRun, SteadyWriter, run_steady
from bench.postgres import bench_server
from bench.report import Figure, Ratio, median_figure, print_report
from bench.settings import bench_spark_settings
from bench.workload import (
    PUBLICATION,
    Backlog,
    create_source_slot,
    create_tables,
    table_names,
    write_mixed_backlog,
)
from config import parse_config
from daemon.logging import configure_engine_logging
from daemon.wiring import sink_settings, spark_settings
from devtools.pgserver import LocalPostgres
from sink import DeltaSink, create_spark_session, stop_spark_session, table_path

THROUGHPUT_TARGETS: Final = {50: 0.8, 200: 0.5}
"""Table count -> changes/s at least this times one table's (issue 31)."""
RSS_TARGETS: Final = {200: 1.3}
"""Table count -> peak RSS at most this times one table's (issue 31)."""
LAG_TARGET: Final = 2.0
"""p99 commit-to-durable lag in seconds at 5k changes/s over 200 tables (issue 31)."""
SLOT: Final = "bench_tables"


class MeasurementError(RuntimeError):
    """The benchmark could not measure: the daemon failed or Delta lost rows."""


@dataclass(frozen=True, slots=True)
class Case:
    """One table count's run over the backlog."""

    tables: int
    backlog: Backlog
    run: ChildRun

    @property
    def rate(self) -> float:
        """Changes per second over the streaming time."""
        return self.backlog.changes / self.run.streaming_seconds

    @property
    def peak_rss_mib(self) -> float:
        """The daemon process's peak RSS."""
        return self.run.peak_rss_kib / 1024


def check_row_counts(
    conn: psycopg.Connection[tuple[object, ...]], lake: Path, tables: list[str]
) -> None:
    """Compare every table's row count in Delta with its source table's.

    Raises:
        MeasurementError: a count differs (the first few are named).
    """
    differences = []
    for table in tables:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("public", table))
        row = conn.execute(query).fetchone()
        source = 0 if row is None else int(str(row[0]))
        delta = DeltaTable(table_path(str(lake), "public", table))
        rows = delta.to_pyarrow_table(columns=["id"]).num_rows
        if rows != source:
            differences.append(f"{table}: source {source}, Delta {rows}")
    if differences:
        raise MeasurementError(
            f"row counts differ in {len(differences)} of {len(tables)} tables: "
            + "; ".join(differences[:5])
        )


def _sink_options(args: argparse.Namespace) -> dict[str, object]:
    """The ``sink`` settings given on the command line, in YAML spelling."""
    given = {
        "concurrency": args.concurrency,
        "table_min_rows": args.table_min_rows,
        "table_max_age": args.table_max_age,
    }
    options = {name: value for name, value in given.items() if value is not None}
    if args.engine is not None:
        options["spark"] = {"mode": "connect", "url": args.engine}
    return options


def _config_document(
    dsn: str, workdir: Path, tables: list[str], args: argparse.Namespace
) -> dict[str, object]:
    """The daemon's configuration: ``tables`` of the publication, the sink options given."""
    return bench_config_document(
        dsn,
        workdir,
        slot=SLOT,
        publication=PUBLICATION,
        tables=[f"public.{table}" for table in tables],
        sink=_sink_options(args),
    )


def measure_case(
    server: LocalPostgres, count: int, args: argparse.Namespace, workdir: Path
) -> Case:
    """Prepare, run and check the case of ``count`` tables, in a database of its own."""
    database = f"bench_tables_{count}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    dsn = server.dsn(database)
    names = table_names(count)
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_tables(conn, names, seed_rows=0)
        create_source_slot(conn, SLOT)
        backlog = write_mixed_backlog(
            conn,
            changes=args.changes,
            per_transaction=args.transaction,
            tables=names,
            seeded=False,
        )
        print(f"{_tables(count)}: {backlog.changes:,} changes written; daemon running", flush=True)
        document = _config_document(dsn, workdir, names, args)
        try:
            run = run_wal2delta(document, backlog.end_lsn, workdir, timeout=args.timeout)
        except RuntimeError as exc:
            raise MeasurementError(f"{_tables(count)}: {exc}") from exc
        check_row_counts(conn, workdir / "lake", names)
        conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
    case = Case(count, backlog, run)
    print(
        f"{_tables(count)}: {case.rate:,.0f} changes/s, peak RSS {case.peak_rss_mib:,.0f} MiB, "
        f"streaming after {run.since_start(STREAMING):.1f} s",
        flush=True,
    )
    return case


def measure_lag(args: argparse.Namespace, workdir: Path) -> SteadyRun:
    """The lag section (module docstring), on a server of its own."""
    names = table_names(args.lag_tables)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(bench_server(workdir / "pg", synchronous_commit=True))
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_tables(conn, names, seed_rows=0)
            create_source_slot(conn, SLOT)
        config = parse_config(_config_document(dsn, workdir, names, args))
        configure_engine_logging("warning")  # Sail logs every query at info
        engine = bench_spark_settings() if args.engine is None else spark_settings(config)
        spark = create_spark_session(engine)
        stack.callback(stop_spark_session, spark)
        writer = SteadyWriter(dsn, args.transaction, names, seeded=False)
        stack.callback(writer.close)
        print(f"lag: {args.lag_tables} tables, warming up", flush=True)
        run = run_steady(
            config,
            LagSink(DeltaSink(spark, sink_settings(config))),
            writer,
            rate=args.lag_rate,
            seconds=args.lag_seconds,
            warmup=len(names),
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            check_row_counts(conn, workdir / "lake", names)
    return run


def _tables(count: int) -> str:
    return "1 table" if count == 1 else f"{count} tables"


def _ratios(cases: list[Case]) -> tuple[list[Figure], list[Ratio]]:
    """Each case's figures, and its ratios to the smallest case (one table)."""
    base = min(cases, key=lambda case: case.tables)
    figures: list[Figure] = []
    ratios: list[Ratio] = []
    for case in cases:
        run = case.run
        label = _tables(case.tables)
        figures += [
            median_figure(
                f"{label}: changes/s",
                [case.rate],
                "changes/s",
                note=f"{run.log.batches} batches, {run.streaming_seconds:.1f} s streaming, "
                f"{run.wall_seconds:.1f} s in all, {run.cpu_seconds:.1f} s CPU",
            ),
            median_figure(f"{label}: peak RSS", [case.peak_rss_mib], "MiB"),
            median_figure(f"{label}: start-up to streaming", [run.since_start(STREAMING)], "s"),
            median_figure(
                f"{label}: start-up to first batch durable", [run.since_start(BATCH_APPLIED)], "s"
            ),
        ]
        if case is base:
            continue
        against = f"{case.tables} / {_tables(base.tables)}"
        ratios += [
            Ratio(
                f"{against}: changes/s",
                case.rate / base.rate,
                target=THROUGHPUT_TARGETS.get(case.tables),
            ),
            Ratio(
                f"{against}: peak RSS",
                case.run.peak_rss_kib / base.run.peak_rss_kib,
                target=RSS_TARGETS.get(case.tables),
                higher_is_better=False,
            ),
        ]
    return figures, ratios


def _table_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("table counts are positive integers, e.g. 1,10,50")
    return counts


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """The command line (``--help``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.tables", description=__doc__)
    parser.add_argument(
        "--tables",
        type=_table_counts,
        default=[1, 10, 50, 200, 1000],
        help="table counts, comma-separated (default 1,10,50,200,1000)",
    )
    parser.add_argument("--changes", type=int, default=100_000, help="backlog size")
    parser.add_argument("--transaction", type=int, default=100, help="changes per transaction")
    parser.add_argument("--concurrency", type=int, help="sink.concurrency (default: config)")
    parser.add_argument("--table-min-rows", type=int, help="sink.table_min_rows (default: config)")
    parser.add_argument("--table-max-age", help="sink.table_max_age, e.g. 5s (default: config)")
    parser.add_argument(
        "--lag", action=argparse.BooleanOptionalAction, default=True, help="the lag section"
    )
    parser.add_argument("--lag-rate", type=float, default=5000.0, help="changes per second")
    parser.add_argument("--lag-tables", type=int, default=200)
    parser.add_argument("--lag-seconds", type=float, default=60.0)
    parser.add_argument(
        "--engine",
        metavar="URL",
        help="a Spark Connect endpoint, sc://HOST:PORT: every daemon of the run uses "
        "sink.spark {mode: connect, url: URL} (default: embedded Sail)",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="per daemon run, seconds")
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep servers and lakes here (default: tmp)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured, 1 when the daemon failed or lost rows."""
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    # The settings as the daemon reads them, defaults filled in, for the report.
    sink = parse_config(_config_document("host=unused", Path("unused"), [], args)).sink
    lag: SteadyRun | None = None
    try:
        with contextlib.ExitStack() as stack:
            workdir: Path = args.workdir or Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-tables-"))
            )
            with bench_server(workdir / "pg") as server:
                cases = [
                    measure_case(server, count, args, workdir / f"case-{count}")
                    for count in args.tables
                ]
            if args.lag:
                lag = measure_lag(args, workdir / "lag")
    except MeasurementError as exc:
        print(f"bench tables: {exc}", file=sys.stderr)
        return 1

    figures, ratios = _ratios(cases)
    facts: dict[str, object] = {
        "backlog": f"{args.changes:,} changes in transactions of {args.transaction} "
        "(60% insert, 30% update, 10% delete), round robin over the tables",
        "sink": f"concurrency {sink.concurrency}, table_min_rows {sink.table_min_rows}, "
        f"table_max_age {sink.table_max_age.total_seconds():g} s",
        "changes/s": "backlog / (last 'batch applied' - 'replication started'), "
        "wal2delta run in its own process",
    }
    if lag is not None:
        figures += lag.figures(f"lag, {_tables(args.lag_tables)}: ")
        ratios.append(
            Ratio(
                f"lag, {_tables(args.lag_tables)}: p99 / {LAG_TARGET:g} s",
                lag.p99 / LAG_TARGET,
                target=1.0,
                higher_is_better=False,
            )
        )
        facts |= {
            f"lag: {name}": value
            for name, value in lag.facts(args.lag_rate, args.lag_seconds).items()
        }
    if args.engine is not None:
        facts["engine"] = f"Spark Connect at {args.engine} (sink.spark mode connect)"
    engine = "embedded Sail" if args.engine is None else f"Spark Connect at {args.engine}"
    title = f"Issue 31: one backlog over many tables ({engine})"
    print_report(title, figures, ratios, facts=facts, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
