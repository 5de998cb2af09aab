"""Benchmark 4 of issue 6: commit-to-durable-in-Delta lag under a steady write rate.

Run: ``python -m bench.lag`` (``python -m bench lag``; ``--help`` for the knobs). The
default (5k changes/s for 2 minutes on a 1M-row table, then a minute of the engine's
floor) takes about five minutes;
``--seconds 30 --table-rows 100000`` takes one.

Method
------
1. Start PostgreSQL 18 (``bench.postgres``, with ``synchronous_commit`` on as in
   production: off, a commit would wait up to 200 ms for the WAL writer before any WAL
   sender may decode it) with the benchmark table holding
   ``--table-rows`` seed rows and its publication (``bench.workload``), and a Delta table
   with the same rows (``bench.sink_scaling.build_table``); create the daemon's slot.
2. Start the daemon (``daemon.Supervisor`` + ``DeltaSink`` on embedded Sail, production
   batching settings) in a thread. One warm-up transaction is written and waited for,
   so Sail's first-query start-up is not counted.
3. A writer commits one transaction of ``--per-transaction`` changes (the backlog's mix:
   60% insert, 30% update and 10% delete of the previous transaction's rows) every
   ``per_transaction / rate`` seconds, on a fixed schedule, for ``--seconds``.
4. The sink is wrapped: when a batch is durable (``apply`` returned), every transaction
   that ends in it gets ``now - commit time`` as its lag. That is commit-to-visible for
   each transaction, which is what a reader of Delta sees; the daemon's own metric
   (``wal2delta_batch_apply_lag_seconds``) observes only the newest transaction of each
   batch, so it is printed too, as the ``per batch`` figures.
5. Then the engine's floor (``bench.lag_floor``, ``--floor-seconds``, 60 by default; 0
   skips it): the same stream's transactions, continuing the daemon's keys, fall due on the
   writer's schedule and are applied to the same Delta table by bare engine calls - one
   MERGE and one commit-record append a batch, a compaction every 20 - with no PostgreSQL,
   decoding or daemon: the lag the engine alone gives at this rate on this machine.
6. Print p50/p99 lag (target: p99 <= 0.5 s at 5k changes/s, <= 2 s at 50k changes/s,
   issue 13), the rate actually written, and the batch sizes
   over time, which show adaptive batching: batches grow while the sink is busy; the
   floor's lag and the daemon's p99 against it.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import psycopg
from psycopg import sql

from bench.daemon import add_delta_run_arguments, bench_config
from bench.lag_floor import LagFloor
from bench.postgres import bench_server
from bench.report import Figure, Ratio, median_figure, percentile, print_report
from bench.settings import bench_spark_settings
from bench.sink_scaling import bucketed_settings, build_table, layout_description
from bench.workload import (
    PUBLICATION,
    TABLE,
    TRANSACTION_FUNCTION,
    create_source_slot,
    create_table,
    mixed_sizes,
)
from bench.wrapped_sink import WrapsDeltaSink
from config import AppConfig
from daemon.gc_tuning import collector_paced_by_time
from daemon.logging import configure_logging
from daemon.supervisor import Supervisor
from decoder import Lsn, RowChange, parse_lsn, pg_timestamp_to_datetime
from sink import (
    Batch,
    BatchResult,
    DeltaSink,
    create_spark_session,
    stop_spark_session,
    table_path,
)

LAG_TARGETS: Final = ((5_000.0, 0.5), (50_000.0, 2.0))
"""(rate up to which it applies, p99 target in seconds); higher rates take the last."""


def lag_target(rate: float) -> float:
    """The p99 lag target at ``rate`` changes per second."""
    return next((target for limit, target in LAG_TARGETS if rate <= limit), LAG_TARGETS[-1][1])


SLOT: Final = "bench_lag"


@dataclass(slots=True)
class LagSink(WrapsDeltaSink):
    """Wraps a sink; records each transaction's commit-to-durable lag and each batch.

    A transaction is durable when the ``apply`` that carries its last change returns (the
    batch's ``durable_lsn`` is past its commit), unless the sink holds changes back for a
    later batch (``sink.table_min_rows``): then every transaction from
    ``BatchResult.held_lsn`` on waits for a later ``apply`` that holds nothing at or before
    it (the acknowledged position waits the same way).
    """

    inner: DeltaSink
    measure_after: float = float("inf")
    """Only transactions committed at or after this UNIX time are counted."""
    transaction_lags: list[float] = field(default_factory=list)
    batch_lags: list[float] = field(default_factory=list)
    batches: list[tuple[float, int, float]] = field(default_factory=list)
    """(time applied, changes, apply seconds) of every batch."""
    durable_lsn: int = 0
    counted_through: int = 0
    """The newest commit LSN made durable: a transaction at or before it that comes again
    (replayed by a session restarted from the acknowledged position) is not counted twice."""
    waiting: dict[int, float] = field(default_factory=dict)
    """Commit LSN -> commit time (UNIX) of applied transactions the sink holds back."""
    upkeeps: list[tuple[float, float]] = field(default_factory=list)
    """(time ended, seconds) of every upkeep (``after_apply``, ``settle``): a batch offered
    meanwhile waits for it, so a long one shows in the lag of the transactions behind it."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def after_apply(self) -> None:
        """The wrapped sink's upkeep after a batch, timed."""
        started = time.perf_counter()
        self.inner.after_apply()
        self._upkept(started)

    def settle(self) -> bool:
        """The wrapped sink's upkeep when idle, timed; whether some is still due."""
        started = time.perf_counter()
        more = self.inner.settle()
        self._upkept(started)
        return more

    def _upkept(self, started: float) -> None:
        with self.lock:
            self.upkeeps.append((time.time(), time.perf_counter() - started))

    def apply(self, batch: Batch) -> BatchResult:
        """Apply through the wrapped sink, then record the lags."""
        started = time.perf_counter()
        result = self.inner.apply(batch)
        now = time.time()
        commits: dict[int, float] = {}
        for change in batch.changes:
            if isinstance(change, RowChange):
                commits[change.commit_lsn] = pg_timestamp_to_datetime(
                    change.commit_time
                ).timestamp()
        with self.lock:
            self.batches.append((now, len(batch.changes), time.perf_counter() - started))
            if batch.durable_lsn is not None:
                self.durable_lsn = max(self.durable_lsn, batch.durable_lsn)
            self.waiting |= {lsn: t for lsn, t in commits.items() if lsn > self.counted_through}
            held = result.held_lsn
            # Complete (a large transaction's first batches are not) and not held back.
            durable = [
                lsn
                for lsn in self.waiting
                if lsn < self.durable_lsn and (held is None or lsn < held)
            ]
            committed = [self.waiting.pop(lsn) for lsn in durable]
            self.counted_through = max([self.counted_through, *durable])  # replayed: not again
            counted = [t for t in committed if t >= self.measure_after]
            self.transaction_lags += [now - t for t in counted]
            if counted:
                self.batch_lags.append(now - max(counted))
        return result

    def wait_durable(
        self, lsn: int, timeout: float, failures: Sequence[BaseException] = ()
    ) -> None:
        """Block until a batch durable at or past ``lsn`` was applied and nothing is held.

        Raises:
            BaseException: the first of ``failures`` (the daemon thread's), once there is one.
            RuntimeError: ``timeout`` passed.
        """
        deadline = time.monotonic() + timeout
        while True:
            if failures:
                raise failures[0]
            with self.lock:
                if self.durable_lsn >= lsn and not self.waiting:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("the daemon did not catch up in time")
            time.sleep(0.05)


class SteadyWriter:
    """Commits the backlog's transactions one by one on a fixed schedule.

    Transaction ``k`` goes to ``tables[k % len(tables)]`` (round robin) and is that table's
    transaction ``k // len(tables)``, written by ``bench.workload``'s server-side function,
    as the backlog's are.
    """

    def __init__(
        self,
        dsn: str,
        per_transaction: int,
        tables: Sequence[str] = (TABLE,),
        *,
        seeded: bool = True,
    ) -> None:
        self._conn = psycopg.connect(dsn, autocommit=True)
        self.inserts, self.updates, self.deletes = mixed_sizes(per_transaction)
        self.transactions = 0
        self._last_inside = Lsn(0)
        self._tables = [f"public.{table}" for table in tables]
        self._seeded = seeded
        self._statement = sql.SQL("SELECT {}(%s::regclass, %s, %s, %s, %s, %s)::text").format(
            sql.Identifier(TRANSACTION_FUNCTION)
        )

    def write_one(self) -> None:
        """Commit the next transaction."""
        table = self._tables[self.transactions % len(self._tables)]
        params = (
            table,
            self.transactions // len(self._tables),
            self.inserts,
            self.updates,
            self.deletes,
            self._seeded,
        )
        # One statement, one transaction, one round trip: the function returns a position
        # inside the transaction, which only its own commit ends past.
        row = self._conn.execute(self._statement, params).fetchone()
        assert row is not None
        self._last_inside = parse_lsn(str(row[0]))
        self.transactions += 1

    def run(self, *, rate: float, seconds: float) -> float:
        """Write at ``rate`` changes/s for ``seconds``; return the rate achieved."""
        interval = (self.inserts + self.updates + self.deletes) / rate
        started = time.perf_counter()
        written = 0
        while (due := started + written * interval) < started + seconds:
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            self.write_one()
            written += 1
        elapsed = time.perf_counter() - started
        return written * (self.inserts + self.updates + self.deletes) / elapsed

    def end_lsn(self) -> Lsn:
        """A position inside the last transaction, which only its own end passes.

        Not the insert position after the last commit: WAL the server writes by itself
        afterwards (a running-transactions record every 15 s) is in no batch, and waiting
        for a batch durable past it waited forever.
        """
        return self._last_inside

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


@dataclass(frozen=True, slots=True)
class SteadyRun:
    """What one run at a steady rate measured (``run_steady``)."""

    sink: LagSink
    achieved: float
    """Changes per second actually written."""
    measured_from: float
    """UNIX time the measured writing began; batches before it were the warm-up."""

    @property
    def p99(self) -> float:
        """p99 commit-to-durable lag of the measured transactions, in seconds."""
        return percentile(self.sink.transaction_lags, 0.99)

    def figures(self, prefix: str = "") -> list[Figure]:
        """Per-transaction and per-batch lag percentiles, and apply seconds per batch."""
        lags, batch_lags = self.sink.transaction_lags, self.sink.batch_lags
        seconds = [took for at, _, took in self.sink.batches if at >= self.measured_from]
        return [
            median_figure(f"{prefix}per transaction: p50 lag", [percentile(lags, 0.5)], "s"),
            median_figure(f"{prefix}per transaction: p99 lag", [self.p99], "s"),
            median_figure(f"{prefix}per transaction: max lag", [max(lags)], "s"),
            median_figure(
                f"{prefix}per batch (daemon metric): p50 lag", [percentile(batch_lags, 0.5)], "s"
            ),
            median_figure(
                f"{prefix}per batch (daemon metric): p99 lag", [percentile(batch_lags, 0.99)], "s"
            ),
            median_figure(f"{prefix}apply seconds per batch", seconds, "s"),
        ]

    def facts(self, rate: float, seconds: float) -> dict[str, object]:
        """The rate written (``rate`` asked, for ``seconds``) and the batches' sizes."""
        sizes = [size for at, size, _ in self.sink.batches if at >= self.measured_from]
        upkeeps = [(at, took) for at, took in self.sink.upkeeps if at >= self.measured_from]
        longest = max(upkeeps, key=lambda upkeep: upkeep[1], default=None)
        return {
            "rate": f"{self.achieved:,.0f} changes/s written (asked {rate:,.0f}) for {seconds} s",
            "transactions measured": len(self.sink.transaction_lags),
            "batches": f"{len(sizes)}, changes per batch: min {min(sizes)}, "
            f"median {statistics.median(sizes):.0f}, max {max(sizes)}",
            "batch sizes in order": " ".join(str(size) for size in sizes),
            "upkeep between batches": "none"
            if longest is None
            else f"{sum(took for _, took in upkeeps):.1f} s in all; over 0.05 s: "
            f"{sum(1 for _, took in upkeeps if took > 0.05)}; longest {longest[1]:.2f} s, "
            f"{longest[0] - self.measured_from:.0f} s into the run",
        }


def run_steady(
    config: AppConfig,
    sink: LagSink,
    writer: SteadyWriter,
    *,
    rate: float,
    seconds: float,
    warmup: int = 1,
) -> SteadyRun:
    """Run the daemon into ``sink`` while ``writer`` writes at ``rate`` for ``seconds``.

    ``daemon.Supervisor`` runs in a thread with the collector settings of ``wal2delta
    run``. ``warmup`` transactions are written and waited for first, uncounted (one per
    table: the first write to a table creates its Delta table); then the writer keeps its
    schedule, and the run ends once its last transaction is durable.

    Raises:
        BaseException: the daemon thread's error, if it failed.
    """
    configure_logging("console", "warning")
    stop = threading.Event()
    service = Supervisor(config, sink, stop_event=stop)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            service.run()
        except BaseException as exc:  # reported after the run; the thread must not die silently
            failures.append(exc)

    thread = threading.Thread(target=serve, name="daemon", daemon=True)
    with contextlib.ExitStack() as stack:
        stack.enter_context(collector_paced_by_time())
        thread.start()
        stack.callback(thread.join, 60)
        stack.callback(stop.set)
        for _ in range(warmup):
            writer.write_one()
        sink.wait_durable(writer.end_lsn(), timeout=300, failures=failures)
        print("daemon warmed up; writing", flush=True)
        sink.measure_after = measured_from = time.time()
        achieved = writer.run(rate=rate, seconds=seconds)
        sink.wait_durable(writer.end_lsn(), timeout=600, failures=failures)
    if failures:
        raise failures[0]
    return SteadyRun(sink, achieved, measured_from)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.lag", description=__doc__)
    parser.add_argument("--rate", type=float, default=5000.0, help="changes per second")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to write")
    add_delta_run_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep server and lake here (default: tmp)")
    parser.add_argument(
        "--floor-seconds",
        type=float,
        default=60.0,
        help="after the daemon, apply the same stream with bare engine calls for this long "
        "(bench.lag_floor; 0: skip)",
    )
    parser.add_argument(
        "--no-log-trim",
        action="store_true",
        help="keep every table's whole Delta log (sink.log_retention: null), for comparison",
    )
    args = parser.parse_args(argv)
    seed = args.table_rows

    with contextlib.ExitStack() as stack:
        workdir: Path = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-lag-"))
        )
        server = stack.enter_context(bench_server(workdir, synchronous_commit=True))
        spark = create_spark_session(bench_spark_settings())
        stack.callback(stop_spark_session, spark)
        lake = workdir / "lake"
        settings = bucketed_settings(str(lake), args.key_bucket_width or None)
        if args.no_log_trim:
            settings = replace(settings, log_retention=None)
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_table(conn, seed_rows=seed)
            create_source_slot(conn, SLOT)
        build_table(
            spark,
            DeltaSink(spark, settings),
            table_path(str(lake), "public", TABLE),
            keys=(1 - seed, 0),
            per_file=args.rows_per_file,
            bucket_width=args.key_bucket_width or None,
        )
        config = bench_config(
            dsn,
            workdir,
            slot=SLOT,
            publication=PUBLICATION,
            tables=[f"public.{TABLE}"],
            max_rows=args.max_rows,
            max_rows_ceiling=args.max_rows_ceiling,
            max_bytes=args.max_bytes,
        )
        writer = SteadyWriter(dsn, args.per_transaction)
        stack.callback(writer.close)
        run = run_steady(
            config,
            LagSink(DeltaSink(spark, settings)),
            writer,
            rate=args.rate,
            seconds=args.seconds,
        )
        floor = None
        if args.floor_seconds > 0:
            print("the engine's floor: the same stream, bare engine calls", flush=True)
            # The floor needs no PostgreSQL, whose work after the run (autovacuum of the rows
            # it changed, checkpoints) would share the cores with the engine.
            writer.close()
            server.stop("immediate")
            floor = LagFloor(
                spark,
                table_path(str(lake), "public", TABLE),
                meta=settings.metadata,
                sizes=(writer.inserts, writer.updates, writer.deletes),
                first_transaction=writer.transactions,
                bucket_width=args.key_bucket_width or None,
                workdir=workdir,
            ).run(rate=args.rate, seconds=args.floor_seconds)

    target = lag_target(args.rate)
    ratios = [
        Ratio(f"p99 lag / {target:g} s", run.p99 / target, target=1.0, higher_is_better=False)
    ]
    figures = run.figures()
    if floor is not None:
        floor_p99 = percentile(floor.transaction_lags, 0.99)
        figures += [
            median_figure(
                "engine floor: per transaction: p50 lag",
                [percentile(floor.transaction_lags, 0.5)],
                "s",
            ),
            median_figure("engine floor: per transaction: p99 lag", [floor_p99], "s"),
            median_figure("engine floor: seconds per batch", floor.batch_seconds, "s"),
        ]
        ratios.append(Ratio("daemon p99 lag / engine floor p99 lag", run.p99 / floor_p99))
    facts: dict[str, object] = {
        **run.facts(args.rate, args.seconds),
        "table": f"{seed:,} rows before",
        "layout": layout_description(args.key_bucket_width or None),
        "log trimming": "off" if settings.log_retention is None else "on",
    }
    if floor is not None:
        facts["engine floor"] = f"{args.floor_seconds:g} s: {floor.summary()}"
    print_report(
        "Benchmark 4: commit-to-durable lag at a steady rate (embedded Sail)",
        figures,
        ratios,
        facts=facts,
        as_json=args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
