"""Benchmark 2 of issue 6: PostgreSQL -> Delta end to end against PostgreSQL's native apply.

Run: ``python -m bench.e2e`` (``python -m bench e2e``; ``--help`` for the knobs). The
default (1M changes into a 1M-row table) takes about ten minutes on two cores;
``--changes 100000 --table-rows 100000`` takes two.

Method
------
1. Start two PostgreSQL 18 servers (``bench.postgres``): the *source* and a *subscriber*.
   On the source, create the benchmark table with ``--table-rows`` seed rows and its
   publication (``bench.workload``).
2. Native apply, prepared: the subscriber gets the same table and a ``CREATE
   SUBSCRIPTION`` that copies the seed rows (``copy_data``); once the table is in sync the
   subscription is disabled. Its slot stays, so it will read the backlog from there.
3. Daemon, prepared: a Delta table with the same seed rows, created through ``DeltaSink``
   and filled with the Spark writer (``bench.sink_scaling.build_table``), and a fresh
   pgoutput slot created after the seed.
4. Write the backlog (``bench.workload``: 60% insert / 30% update / 10% delete, 1000
   changes per transaction). Nothing consumes it yet.
5. Timed, one after the other so they never share the two cores:

   * ``native apply`` (the baseline): ``ALTER SUBSCRIPTION ... ENABLE`` until the
     subscriber's ``max(id)`` is the source's. Transactions apply atomically and in
     commit order and every one inserts higher keys, so that is the moment the last
     transaction is visible; the row counts are then compared.
   * ``daemon``: ``daemon.Supervisor`` with ``DeltaSink`` on an embedded Sail session, in
     the production configuration (adaptive batching), until everything up to the
     backlog's end LSN is durable in Delta (``bench.daemon``). The Delta table is then
     read with delta-rs and its row count compared with the source.

6. Print changes per second for both, the ratio (target: daemon >= 1.0x native apply),
   and the daemon's batches: how adaptive batching grew them while the sink was busy.

``--split-bound`` adds, in the same run, what capture and sink in two processes could give
at best, and the sink process alone (``bench/split_bound.py``); both sinks write copies of
the seeded Delta table, whose row counts are checked as the daemon's is.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psycopg
from deltalake import DeltaTable

from bench.daemon import add_delta_run_arguments, bench_config, run_daemon
from bench.postgres import bench_server
from bench.report import Figure, Ratio, median_figure, print_report
from bench.settings import bench_spark_settings
from bench.sink_scaling import bucketed_settings, build_table, layout_description
from bench.split_bound import HalfRun, SplitBound, SplitRun, measure_sink_alone, measure_split_bound
from bench.workload import (
    PUBLICATION,
    TABLE,
    copy_slot,
    create_source_slot,
    create_table,
    write_mixed_backlog,
)
from bench.wrapped_sink import WrapsDeltaSink
from sink import (
    Batch,
    BatchResult,
    DeltaSink,
    create_spark_session,
    stop_spark_session,
    table_path,
)

E2E_TARGET: Final = 1.0
SOURCE_SLOT: Final = "bench_source"
DAEMON_SLOT: Final = "bench_daemon"
SPLIT_SLOTS: Final = ("bench_split_capture", "bench_split_sink", "bench_sink_alone")
SUBSCRIPTION: Final = "bench_sub"
_POLL_SECONDS: Final = 0.05


@dataclass(slots=True)
class RecordingSink(WrapsDeltaSink):
    """Wraps a sink and records every batch's size and apply time (adaptive batching)."""

    inner: DeltaSink
    sizes: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def apply(self, batch: Batch) -> BatchResult:
        """Apply through the wrapped sink, then record the batch."""
        started = time.perf_counter()
        result = self.inner.apply(batch)
        self.seconds.append(time.perf_counter() - started)
        self.sizes.append(len(batch.changes))
        return result

    def describe(self) -> str:
        """Batch sizes in order, run-length compressed: ``50000 x2, 500000 x1``."""
        runs: list[tuple[int, int]] = []
        for size in self.sizes:
            if runs and runs[-1][0] == size:
                runs[-1] = (size, runs[-1][1] + 1)
            else:
                runs.append((size, 1))
        return ", ".join(f"{size} x{count}" for size, count in runs)


def _scalar(conn: psycopg.Connection[tuple[object, ...]], query: str) -> object:
    row = conn.execute(query).fetchone()
    return None if row is None else row[0]


def prepare_subscriber(source_dsn: str, subscriber_dsn: str, timeout: float) -> None:
    """Create the table and a subscription on the subscriber; copy the seed; disable it."""
    with psycopg.connect(subscriber_dsn, autocommit=True) as conn:
        create_table(conn, seed_rows=0)
        conn.execute(
            f"CREATE SUBSCRIPTION {SUBSCRIPTION} CONNECTION '{source_dsn}' "
            f"PUBLICATION {PUBLICATION} WITH (copy_data = true)"
        )
        deadline = time.monotonic() + timeout
        query = "SELECT count(*) FILTER (WHERE srsubstate <> 'r') FROM pg_subscription_rel"
        while _scalar(conn, query) != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the subscription did not finish its initial copy")
            time.sleep(0.2)
        conn.execute(f"ALTER SUBSCRIPTION {SUBSCRIPTION} DISABLE")
    # Wait until the walsender is gone, so the timed run starts from a cold connection.
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        query = (
            "SELECT count(*) FROM pg_replication_slots "
            f"WHERE slot_name = '{SUBSCRIPTION}' AND active"
        )
        while _scalar(conn, query) != 0:
            time.sleep(0.1)


def run_native_apply(subscriber_dsn: str, expected_max: int, timeout: float) -> float:
    """Enable the subscription; seconds until the subscriber's ``max(id)`` is ``expected_max``."""
    with psycopg.connect(subscriber_dsn, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(f"ALTER SUBSCRIPTION {SUBSCRIPTION} ENABLE")
        query = f"SELECT max(id) FROM {TABLE}"
        while _scalar(conn, query) != expected_max:
            if time.perf_counter() - started > timeout:
                raise RuntimeError("the subscriber did not catch up")
            time.sleep(_POLL_SECONDS)
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__)
    parser.add_argument("--changes", type=int, default=1_000_000, help="backlog size")
    add_delta_run_arguments(parser)
    parser.add_argument("--timeout", type=float, default=3600.0, help="per contender")
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep servers and lake here (default: tmp)")
    parser.add_argument(
        "--split-bound",
        action="store_true",
        help="also measure capture and sink in two processes at once (bench/split_bound.py)",
    )
    args = parser.parse_args(argv)
    seed = args.table_rows

    with contextlib.ExitStack() as stack:
        workdir: Path = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-e2e-"))
        )
        source = stack.enter_context(bench_server(workdir / "source"))
        subscriber = stack.enter_context(bench_server(workdir / "subscriber"))
        spark = create_spark_session(bench_spark_settings())
        stack.callback(stop_spark_session, spark)
        lake = workdir / "lake"
        settings = bucketed_settings(str(lake), args.key_bucket_width or None)
        path = table_path(str(lake), "public", TABLE)
        dsn = source.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_table(conn, seed_rows=seed)
            prepare_subscriber(dsn, subscriber.dsn(), args.timeout)
            create_source_slot(conn, SOURCE_SLOT)
            copy_slot(conn, SOURCE_SLOT, DAEMON_SLOT)
            build_table(
                spark,
                DeltaSink(spark, settings),
                path,
                keys=(1 - seed, 0),
                per_file=args.rows_per_file,
                bucket_width=args.key_bucket_width or None,
            )
            print(f"seeded {seed:,} rows in PostgreSQL, the subscriber and Delta", flush=True)
            backlog = write_mixed_backlog(
                conn, changes=args.changes, per_transaction=args.per_transaction
            )
            expected_max = int(str(_scalar(conn, f"SELECT max(id) FROM {TABLE}")))
            expected_rows = int(str(_scalar(conn, f"SELECT count(*) FROM {TABLE}")))
            print(f"wrote {backlog.changes:,} changes", flush=True)

            native = run_native_apply(subscriber.dsn(), expected_max, args.timeout)
            with psycopg.connect(subscriber.dsn(), autocommit=True) as sub:
                subscriber_rows = int(str(_scalar(sub, f"SELECT count(*) FROM {TABLE}")))
                sub.execute(f"ALTER SUBSCRIPTION {SUBSCRIPTION} DISABLE")
            print(f"native apply: {native:.1f} s", flush=True)
            split_lake, alone_lake = workdir / "lake-split", workdir / "lake-sink-alone"
            if args.split_bound:
                shutil.copytree(lake, split_lake)
                shutil.copytree(lake, alone_lake)
                for slot in SPLIT_SLOTS:
                    copy_slot(conn, SOURCE_SLOT, slot)

            config = bench_config(
                dsn,
                workdir,
                slot=DAEMON_SLOT,
                publication=PUBLICATION,
                tables=[f"public.{TABLE}"],
                max_rows=args.max_rows,
                max_rows_ceiling=args.max_rows_ceiling,
                max_bytes=args.max_bytes,
            )
            recording = RecordingSink(DeltaSink(spark, settings))
            daemon = run_daemon(config, backlog.end_lsn, recording)
            delta_rows = DeltaTable(path).to_pyarrow_table(columns=["id"]).num_rows
            print(f"daemon: {daemon.wall_seconds:.1f} s", flush=True)
            split: SplitBound | None = None
            alone: HalfRun | None = None
            if args.split_bound:
                shared = SplitRun(
                    dsn, backlog.end_lsn, args.key_bucket_width or None, tuple(recording.sizes)
                )
                alone = measure_sink_alone(shared, slot=SPLIT_SLOTS[2], lake=str(alone_lake))
                split = measure_split_bound(
                    shared,
                    capture_slot=SPLIT_SLOTS[0],
                    sink_slot=SPLIT_SLOTS[1],
                    lake=str(split_lake),
                )
                for copy in (split_lake, alone_lake):
                    copied = DeltaTable(table_path(str(copy), "public", TABLE))
                    copied_rows = copied.to_pyarrow_table(columns=["id"]).num_rows
                    if copied_rows != expected_rows:
                        print(
                            f"{copy.name}: {copied_rows} rows, not {expected_rows}", file=sys.stderr
                        )
                        return 1
                print(f"split bound: {split.wall_seconds:.1f} s", flush=True)

    if subscriber_rows != expected_rows or delta_rows != expected_rows:
        print(
            f"row counts differ: source {expected_rows}, subscriber {subscriber_rows}, "
            f"Delta {delta_rows}",
            file=sys.stderr,
        )
        return 1
    changes = backlog.changes
    figures: list[Figure] = [
        median_figure("native apply (subscriber)", [changes / native], "changes/s"),
        median_figure(
            "daemon -> Delta (embedded Sail)",
            [changes / daemon.wall_seconds],
            "changes/s",
            note=f"{daemon.cpu_seconds:.1f} s CPU in this process",
        ),
        median_figure("daemon: seconds per batch", recording.seconds, "s"),
    ]
    ratios = [Ratio("daemon / native apply", native / daemon.wall_seconds, target=E2E_TARGET)]
    facts: dict[str, object] = {
        "backlog": f"{changes:,} changes in {backlog.transactions:,} transactions",
        "table": f"{seed:,} rows before the backlog, {expected_rows:,} after",
        "layout": layout_description(args.key_bucket_width or None),
        "daemon batches": f"{len(recording.sizes)}: {recording.describe()}",
        "daemon time inside DeltaSink.apply": f"{sum(recording.seconds):.1f} s",
    }
    if split is not None:
        figures.append(split.capture.figure("split bound: capture process", changes))
        figures.append(split.sink.figure("split bound: sink process, beside the capture", changes))
        ratios.append(Ratio("split bound / native apply", native / split.wall_seconds))
        facts["split bound: sink process CPU per thread, s"] = split.sink.threads_cpu_seconds
    if alone is not None:
        figures.append(alone.figure("sink process alone, nothing beside it", changes))
        facts["sink alone: CPU per thread, s"] = alone.threads_cpu_seconds
    print_report(
        "Benchmark 2: PostgreSQL -> Delta vs PostgreSQL native apply",
        figures,
        ratios,
        facts=facts,
        as_json=args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
