"""Issues 31 and 40: one backlog over 1 to 200 tables against one table and the engine's floor.

Run: ``python -m bench tables`` (``python -m bench.tables``; ``--help`` for the knobs). The
default (two mixes over 1, 50 and 200 tables, the engine's floor, the 10M-row table and
one minute of lag) takes about 10 to 15 minutes on two cores; ``--tables 1,10 --no-big
--lag-seconds 20`` takes a few.

Method
------
Throughput, memory and start-up, for each mix of ``--mix`` (``bench.table_workload``:
``insert-only`` and ``70-30`` by default; ``60-30-10`` is issue 31's) and each table count
N of ``--tables`` (default 1, 50, 200), one case after the other on one PostgreSQL 18
(``bench.postgres``):

1. A fresh database with N tables of the benchmark shape (``bigint`` primary key, about
   100 bytes a row, no seed rows), one publication of all of them and a pgoutput slot.
2. The backlog, written before the daemon starts: ``--changes`` changes in transactions of
   ``--transaction``, each into a table the mix chooses (``bench.table_workload``).
3. ``wal2delta run -c FILE --endpos END`` in a child process (``bench.daemon_process``)
   into a fresh lake: the production configuration (embedded Sail, adaptive batching),
   plus ``--concurrency``, ``--table-min-rows`` and ``--table-max-age`` as
   ``sink.concurrency``, ``sink.table_min_rows`` and ``sink.table_max_age`` when given.
   The child is ``bench.table_timings`` - ``daemon.cli`` with the sink's methods timed by
   phase, the same process otherwise - which also counts the table writes (each batch's
   ``BatchResult.seconds_by_table``). ``--profile DIR`` runs each child under ``cProfile``
   too (slower; for finding where the time goes, not for the figures). ``--engine
   sc://HOST:PORT`` (issue 41) points every daemon of the run, the lag section's too, at
   that Spark Connect endpoint (``sink.spark: {mode: connect, url: URL}``).
4. Every Delta table's row count (delta-rs) against its source table's; any difference
   fails the benchmark (exit 1).

Per case: changes per second over the streaming time (from the daemon's ``replication
started`` log line to its last ``batch applied``, so the process's start-up is not in
it) and its ratio to the 1-table case of the same mix (to the smallest N when 1 is not
asked for); the child's peak RSS (``ru_maxrss``) and its ratio; start-up (to
``replication started`` and to the first batch durable); and the daemon's cost per table
write: streaming seconds over table writes (wall time, everything the daemon does
included), and the phases of ``bench.table_timings`` in milliseconds of thread time per
table write (for the largest N).

The engine's floor (``--floor``, on by default; ``bench.table_floor``): right after each
case (under the same load), in a process of its own (the benchmark's process holds no
engine while daemons run: Linux would count its memory in a child's peak RSS), one Spark
session as the daemon's (embedded Sail, or the ``--engine`` endpoint) and N small Delta
tables of the daemon's columns; a MERGE
and a DataFrame append of each table's share of the backlog (``--changes / N`` rows, the
mix's share of them updates of rows the table holds), one table after the other and from
``sink.concurrency`` threads. The daemon's cost per table write is printed against the
concurrent floors, as ratios.

The big table (``--big``, on by default; ``bench.table_big``): a ``--big-batch``-insert
batch through ``DeltaSink.apply`` into a ``--big-rows``-row table against the same batch
into an empty table, medians of ``--big-repeat`` rounds.

Lag (``--lag``, on by default): a second PostgreSQL with ``synchronous_commit`` on (as
``bench.lag``), ``--lag-tables`` tables without seed rows, and the daemon in this process
(``bench.lag.run_steady``: ``daemon.Supervisor`` and ``DeltaSink`` with the same sink
settings). One warm-up transaction per table (the first write to a table creates its Delta
table) is waited for; then transactions of ``--transaction`` changes of ``--lag-mix``
(insert-only by default), round robin over the tables, at ``--lag-rate`` changes/s for
``--lag-seconds``. Each transaction's lag is from its commit to the return of the ``apply``
that made it durable (``bench.lag``); p50 and p99 are printed, and the row counts are
checked as above.

Targets, printed next to the figures, never asserted. Issue 40: changes/s at 200 tables
>= 0.5x of one table insert-only and >= 0.22x for 70-30; the 10k-insert batch into 10M rows
<= 2x the empty table; p99 lag <= 5 s at 5k changes/s insert-only over 200 tables. Issue 31
(the ``60-30-10`` mix): >= 0.8x at 50 tables and >= 0.5x at 200; peak RSS at 200 tables
<= 1.3x of one table (every mix).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

import psycopg
from deltalake import DeltaTable
from psycopg import sql

from bench.daemon import bench_config_document
from bench.daemon_process import BATCH_APPLIED, STREAMING, ChildRun, run_wal2delta
from bench.lag import LagSink, SteadyRun, run_steady
from bench.postgres import bench_server
from bench.report import Figure, Ratio, median_figure, print_report
from bench.settings import bench_spark_settings
from bench.table_big import BigRun, measure_big
from bench.table_floor import PASSES, Floor, floor_in_child
from bench.table_timings import PROFILE_ENV, TIMINGS_ENV
from bench.table_workload import MIXES, Mix, MixWriter, write_backlog
from bench.workload import PUBLICATION, Backlog, create_source_slot, create_tables, table_names
from config import parse_config
from daemon.logging import configure_engine_logging
from daemon.wiring import sink_settings, spark_settings
from devtools.pgserver import LocalPostgres
from sink import DeltaSink, create_spark_session, stop_spark_session, table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

THROUGHPUT_TARGETS: Final = {
    "insert-only": {200: 0.5},
    "70-30": {200: 0.22},
    "60-30-10": {50: 0.8, 200: 0.5},
}
"""Mix -> table count -> changes/s at least this times one table's (issues 40 and 31)."""
RSS_TARGETS: Final = {200: 1.3}
"""Table count -> peak RSS at most this times one table's (issue 31)."""
LAG_TARGET: Final = 5.0
"""p99 commit-to-durable lag in seconds at 5k changes/s over 200 tables (issue 40)."""
BIG_TARGET: Final = 2.0
"""The insert batch into the big table over the same into an empty one, at most (issue 40)."""
SLOT: Final = "bench_tables"
PHASE_ROWS: Final = 14
"""Phases printed per case (the costliest per table write)."""


class MeasurementError(RuntimeError):
    """The benchmark could not measure: the daemon failed or Delta lost rows."""


@dataclass(frozen=True, slots=True)
class Case:
    """One mix and table count's run over the backlog."""

    mix: Mix
    tables: int
    backlog: Backlog
    run: ChildRun
    timings: dict[str, object]
    """``bench.table_timings``' document of the run."""
    load: float
    """The 1-minute load average when the case started."""
    floor: Floor | None = field(default=None)

    @property
    def rate(self) -> float:
        """Changes per second over the streaming time."""
        return self.backlog.changes / self.run.streaming_seconds

    @property
    def peak_rss_mib(self) -> float:
        """The daemon process's peak RSS."""
        return self.run.peak_rss_kib / 1024

    @property
    def batches(self) -> list[dict[str, float]]:
        """Every ``DeltaSink.apply`` of the run (``bench.table_timings``)."""
        batches = self.timings.get("batches", [])
        assert isinstance(batches, list)
        return batches

    @property
    def table_writes(self) -> int:
        """Tables written, over every batch (a table written by two batches counts twice)."""
        return int(sum(batch["table_writes"] for batch in self.batches))

    @property
    def seconds_per_table_write(self) -> float:
        """Streaming seconds over table writes: the daemon's wall time per table write."""
        return self.run.streaming_seconds / max(1, self.table_writes)

    def phases(self) -> list[tuple[str, int, float]]:
        """(phase, calls, seconds) of every timed phase, costliest first."""
        phases = self.timings.get("phases", {})
        assert isinstance(phases, dict)
        rows = [(name, int(v["calls"]), float(v["seconds"])) for name, v in phases.items()]
        return sorted(rows, key=lambda row: -row[2])

    def label(self) -> str:
        return f"{self.mix.name}, {_tables(self.tables)}"


def check_row_counts(
    conn: psycopg.Connection[tuple[object, ...]], lake: Path, tables: list[str]
) -> None:
    """Compare every table's row count in Delta with its source table's (a table the
    workload never wrote to may have no Delta table).

    Raises:
        MeasurementError: a count differs (the first few are named).
    """
    differences = []
    for table in tables:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("public", table))
        row = conn.execute(query).fetchone()
        source = 0 if row is None else int(str(row[0]))
        path = table_path(str(lake), "public", table)
        if not source and not DeltaTable.is_deltatable(path):
            continue
        rows = DeltaTable(path).to_pyarrow_table(columns=["id"]).num_rows
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
    server: LocalPostgres, mix: Mix, count: int, args: argparse.Namespace, workdir: Path
) -> Case:
    """Prepare, run and check the case of ``count`` tables, in a database of its own."""
    load = os.getloadavg()[0]
    database = f"bench_tables_{mix.name.replace('-', '_')}_{count}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    dsn = server.dsn(database)
    names = table_names(count)
    label = f"{mix.name}, {_tables(count)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_tables(conn, names, seed_rows=0)
        create_source_slot(conn, SLOT)
        backlog = write_backlog(
            conn, mix, changes=args.changes, per_transaction=args.transaction, tables=names
        )
        print(f"{label}: {backlog.changes:,} changes written; daemon running", flush=True)
        document = _config_document(dsn, workdir, names, args)
        timings_file = workdir / "timings.json"
        environment = {TIMINGS_ENV: str(timings_file)}
        if args.profile is not None:
            environment[PROFILE_ENV] = str(args.profile / f"{mix.name}-{count}")
        try:
            run = run_wal2delta(
                document,
                backlog.end_lsn,
                workdir,
                timeout=args.timeout,
                module="bench.table_timings",
                environment=environment,
            )
        except RuntimeError as exc:
            raise MeasurementError(f"{label}: {exc}") from exc
        check_row_counts(conn, workdir / "lake", names)
        conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
    timings = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    case = Case(mix, count, backlog, run, timings, load)
    print(
        f"{label}: {case.rate:,.0f} changes/s, {case.table_writes} table writes in "
        f"{run.log.batches} batches, {case.seconds_per_table_write * 1000:.1f} ms a table "
        f"write, peak RSS {case.peak_rss_mib:,.0f} MiB, streaming after "
        f"{run.since_start(STREAMING):.1f} s (load {load:.2f})",
        flush=True,
    )
    if args.profile is not None:
        _print_profile(args.profile / f"{mix.name}-{count}" / "all.pstats")
    return case


def _print_profile(path: Path) -> None:
    """The top of a child's merged profile, by cumulative and by own time."""
    if not path.exists():
        return
    stats = pstats.Stats(str(path))
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(30)


def floor_shares(mix: Mix, changes: int, tables: int) -> tuple[int, int]:
    """Rows of one table's share of the backlog, and of them the updates."""
    rows = max(1, changes // tables)
    return rows, rows * mix.updates // 100


def measure_lag(args: argparse.Namespace, workdir: Path, spark: SparkSession) -> SteadyRun:
    """The lag section (module docstring), on a server of its own."""
    names = table_names(args.lag_tables)
    mix = MIXES[args.lag_mix]
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(bench_server(workdir / "pg", synchronous_commit=True))
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_tables(conn, names, seed_rows=0)
            create_source_slot(conn, SLOT)
        config = parse_config(_config_document(dsn, workdir, names, args))
        writer = MixWriter(dsn, args.transaction, names, mix)
        stack.callback(writer.close)
        print(f"lag: {args.lag_tables} tables, {mix.name}, warming up", flush=True)
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


def _printer(prefix: str) -> Callable[[str], None]:
    """Prints a progress line with ``prefix``."""

    def progress(line: str) -> None:
        print(f"{prefix}{line}", flush=True)

    return progress


def _tables(count: int) -> str:
    return "1 table" if count == 1 else f"{count} tables"


def _case_figures(case: Case, base: Case, *, phases: bool) -> tuple[list[Figure], list[Ratio]]:
    """A case's figures, and its ratios to ``base`` (one table of the same mix) and to the
    engine's floor."""
    run = case.run
    label = case.label()
    writes = case.table_writes
    apply_seconds = sum(batch["seconds"] for batch in case.batches)
    figures = [
        median_figure(
            f"{label}: changes/s",
            [case.rate],
            "changes/s",
            note=f"{run.log.batches} batches, {run.streaming_seconds:.1f} s streaming, "
            f"{run.wall_seconds:.1f} s in all, {run.cpu_seconds:.1f} s CPU, load {case.load:.2f}",
        ),
        median_figure(f"{label}: peak RSS", [case.peak_rss_mib], "MiB"),
        median_figure(f"{label}: start-up to streaming", [run.since_start(STREAMING)], "s"),
        median_figure(
            f"{label}: start-up to first batch durable", [run.since_start(BATCH_APPLIED)], "s"
        ),
        median_figure(
            f"{label}: daemon, per table write",
            [case.seconds_per_table_write * 1000],
            "ms",
            note=f"streaming / {writes} table writes; apply {apply_seconds:.1f} s in all",
        ),
    ]
    if phases:
        batches = ", ".join(
            f"{int(b['changes']):,}/{int(b.get('transactions', 0)):,}/{int(b['table_writes'])}"
            f"/{b['seconds']:.1f} s"
            for b in case.batches
        )
        figures.append(
            median_figure(
                f"{label}: daemon batches",
                [len(case.batches)],
                "batches",
                note=f"changes/transactions/table writes/apply seconds of each: {batches}",
            )
        )
    if phases and writes:
        figures += [
            median_figure(
                f"{label}: daemon phase: {name}",
                [seconds * 1000 / writes],
                "ms/write",
                note=f"{calls} calls, {seconds:.2f} s",
            )
            for name, calls, seconds in case.phases()[:PHASE_ROWS]
        ]
    ratios: list[Ratio] = []
    floor = case.floor
    if floor is not None:
        figures += [
            median_figure(
                f"{label}: engine floor, {name}",
                [floor.seconds[name] * 1000],
                "ms/table",
                note=f"{floor.rows_per_table:,} rows a table, {floor.updated_per_table:,} "
                f"of them updates; {floor.concurrency} threads; load {floor.load:.2f}",
            )
            for name in PASSES
        ]
        for name in ("merge, concurrent", "append, concurrent"):
            ratios.append(
                Ratio(
                    f"{label}: daemon per table write / engine {name}",
                    case.seconds_per_table_write / floor.seconds[name],
                    higher_is_better=False,
                )
            )
    if case is not base:
        against = f"{case.mix.name}: {case.tables} / {_tables(base.tables)}"
        ratios += [
            Ratio(
                f"{against}: changes/s",
                case.rate / base.rate,
                target=THROUGHPUT_TARGETS.get(case.mix.name, {}).get(case.tables),
            ),
            Ratio(
                f"{against}: peak RSS",
                case.run.peak_rss_kib / base.run.peak_rss_kib,
                target=RSS_TARGETS.get(case.tables),
                higher_is_better=False,
            ),
        ]
    return figures, ratios


def _report(cases: list[Case]) -> tuple[list[Figure], list[Ratio]]:
    """Every case's figures and ratios, mix by mix."""
    figures: list[Figure] = []
    ratios: list[Ratio] = []
    for mix in dict.fromkeys(case.mix.name for case in cases):
        of_mix = [case for case in cases if case.mix.name == mix]
        base = min(of_mix, key=lambda case: case.tables)
        largest = max(of_mix, key=lambda case: case.tables)
        for case in of_mix:
            more, against = _case_figures(case, base, phases=case is largest)
            figures += more
            ratios += against
    return figures, ratios


def _big_report(big: BigRun) -> tuple[list[Figure], Ratio, dict[str, object]]:
    label = f"big: {big.batch:,}-insert batch into"
    figures = [
        median_figure(f"{label} an empty table", big.empty_seconds, "s"),
        median_figure(f"{label} {big.rows:,} rows", big.big_seconds, "s"),
    ]
    ratio = Ratio(
        f"big: {big.rows:,} rows / empty table",
        big.ratio,
        target=BIG_TARGET,
        higher_is_better=False,
    )
    facts: dict[str, object] = {
        "big": f"{big.rows:,}-row table built in {big.build_seconds:.1f} s; the big table's "
        f"commits of the batches: {', '.join(big.operations)}"
    }
    return figures, ratio, facts


def _table_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("table counts are positive integers, e.g. 1,10,50")
    return counts


def _mixes(text: str) -> list[Mix]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in MIXES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"mixes are some of {', '.join(MIXES)}")
    return [MIXES[name] for name in names]


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """The command line (``--help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.tables",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--tables",
        type=_table_counts,
        default=[1, 50, 200],
        help="table counts, comma-separated (default 1,50,200)",
    )
    parser.add_argument(
        "--mix",
        type=_mixes,
        default=[MIXES["insert-only"], MIXES["70-30"]],
        help=f"backlog mixes, comma-separated, of {', '.join(MIXES)} (default insert-only,70-30)",
    )
    parser.add_argument("--changes", type=int, default=100_000, help="backlog size")
    parser.add_argument("--transaction", type=int, default=100, help="changes per transaction")
    parser.add_argument("--concurrency", type=int, help="sink.concurrency (default: config)")
    parser.add_argument("--table-min-rows", type=int, help="sink.table_min_rows (default: config)")
    parser.add_argument("--table-max-age", help="sink.table_max_age, e.g. 5s (default: config)")
    parser.add_argument(
        "--floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the engine's floor for every mix and table count",
    )
    parser.add_argument(
        "--big", action=argparse.BooleanOptionalAction, default=True, help="the big-table section"
    )
    parser.add_argument("--big-rows", type=int, default=10_000_000, help="rows of the big table")
    parser.add_argument("--big-batch", type=int, default=10_000, help="inserts of the batch")
    parser.add_argument("--big-repeat", type=int, default=3, help="rounds of the big section")
    parser.add_argument(
        "--big-rows-per-file", type=int, default=100_000, help="the big table's file size"
    )
    parser.add_argument(
        "--lag", action=argparse.BooleanOptionalAction, default=True, help="the lag section"
    )
    parser.add_argument("--lag-rate", type=float, default=5000.0, help="changes per second")
    parser.add_argument("--lag-tables", type=int, default=200)
    parser.add_argument("--lag-seconds", type=float, default=60.0)
    parser.add_argument("--lag-mix", choices=list(MIXES), default="insert-only")
    parser.add_argument(
        "--engine",
        metavar="URL",
        help="a Spark Connect endpoint, sc://HOST:PORT: every daemon of the run and the "
        "floor use sink.spark {mode: connect, url: URL} (default: embedded Sail)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run every daemon under cProfile, its statistics in DIR/<mix>-<tables>/ "
        "(slower: for finding where time goes, not for the figures)",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="per daemon run, seconds")
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep servers and lakes here (default: tmp)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured, 1 when the daemon failed or lost rows."""
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    # The settings as the daemon reads them, defaults filled in, for the report.
    config = parse_config(_config_document("host=unused", Path("unused"), [], args))
    sink = config.sink
    lag: SteadyRun | None = None
    big: BigRun | None = None
    facts: dict[str, object] = {}
    try:
        with contextlib.ExitStack() as stack:
            workdir: Path = args.workdir or Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-tables-"))
            )
            cases = []
            with bench_server(workdir / "pg") as server:
                for mix in args.mix:
                    for count in args.tables:
                        name = f"{mix.name}-{count}"
                        case = measure_case(server, mix, count, args, workdir / f"case-{name}")
                        if args.floor:  # right after its case, under the same load
                            rows, updated = floor_shares(mix, args.changes, count)
                            try:
                                floor = floor_in_child(
                                    workdir / f"floor-{name}",
                                    tables=count,
                                    rows_per_table=rows,
                                    updated_per_table=updated,
                                    concurrency=sink.concurrency,
                                    engine=args.engine,
                                    progress=_printer(f"{case.label()}: "),
                                )
                            except RuntimeError as exc:
                                raise MeasurementError(f"{case.label()}: {exc}") from exc
                            case = replace(case, floor=floor)
                        cases.append(case)
            if args.big or args.lag:
                configure_engine_logging("warning")  # Sail logs every query at info
                settings = bench_spark_settings() if args.engine is None else spark_settings(config)
                spark = create_spark_session(settings)
                stack.callback(stop_spark_session, spark)
            if args.big:
                facts["big: load at start"] = f"{os.getloadavg()[0]:.2f}"
                big = measure_big(
                    spark,
                    workdir / "big",
                    rows=args.big_rows,
                    batch=args.big_batch,
                    repeat=args.big_repeat,
                    per_file=args.big_rows_per_file,
                    progress=_printer(""),
                )
            if args.lag:
                facts["lag: load at start"] = f"{os.getloadavg()[0]:.2f}"
                lag = measure_lag(args, workdir / "lag", spark)
    except MeasurementError as exc:
        print(f"bench tables: {exc}", file=sys.stderr)
        return 1

    figures, ratios = _report(cases)
    facts = {
        "backlog": f"{args.changes:,} changes in transactions of {args.transaction}; "
        + "; ".join(f"{mix.name}: {mix.description}" for mix in args.mix),
        "sink": f"concurrency {sink.concurrency}, table_min_rows {sink.table_min_rows}, "
        f"table_max_age {sink.table_max_age.total_seconds():g} s",
        "changes/s": "backlog / (last 'batch applied' - 'replication started'), "
        "wal2delta run in its own process",
        "per table write": "daemon: streaming seconds / table writes (every batch's "
        "tables); phases: thread time per table write; engine floor: wall time of a pass / "
        "tables",
        **facts,
    }
    if big is not None:
        more, ratio, big_facts = _big_report(big)
        figures += more
        ratios.append(ratio)
        facts |= big_facts
    if lag is not None:
        label = f"lag, {_tables(args.lag_tables)}, {args.lag_mix}"
        figures += lag.figures(f"{label}: ")
        ratios.append(
            Ratio(
                f"{label}: p99 / {LAG_TARGET:g} s",
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
    title = f"Issues 31 and 40: one backlog over many tables ({engine})"
    print_report(title, figures, ratios, facts=facts, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
