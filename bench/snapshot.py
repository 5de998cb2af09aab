"""Benchmark 7 (issue 13): the initial snapshot of a large table, against ADBC + delta-rs.

Run: ``python -m bench.snapshot`` (``python -m bench snapshot``; ``--rows`` for a smaller
table). Two comparisons, each in one run on one server:

1. **One table**: the issue's 2M-row table (``bigint`` key, ``int``, ``numeric(12,2)``,
   ``timestamptz``, ``text``; about 236 MB in PostgreSQL). The baseline reads it with
   the ADBC PostgreSQL driver (``COPY ... (FORMAT binary)`` straight into Arrow, C++) and
   writes it with ``deltalake.write_deltalake`` (delta-rs, Rust) - no Spark, no
   bookkeeping. wal2delta runs ``daemon.Supervisor`` with ``DeltaSink`` on an embedded
   Sail session, ``snapshot.mode: initial``: slot with exported snapshot, the bulk copy
   (``capture.copyreader`` + ``sink.bulk``), snapshot markers, and streaming up to the
   consistent point; once with ``snapshot.parallelism`` 1, once with ``--parallelism``
   (the table read in page ranges). Ratio: wal2delta rows/s over the baseline's (target
   >= 0.8).
2. **Several tables**: ``--tables`` tables of ``--rows / --tables`` rows each, copied by
   wal2delta with ``snapshot.parallelism`` 1 and ``--parallelism``; ratio: the single
   stream's time over the parallel one's (target > 1).

Both Delta tables of comparison 1 are read back with delta-rs and must hold every row; a
missing row makes the benchmark fail rather than report a speed.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import psycopg

from bench.postgres import bench_server
from bench.report import Figure, Ratio, median_figure, print_report
from bench.settings import bench_spark_settings
from capture.slots import current_wal_lsn
from config import AppConfig, parse_config
from daemon.supervisor import Supervisor
from daemon.wiring import sink_settings
from decoder import Lsn
from sink import DeltaSink, create_spark_session, stop_spark_session, table_path

ONE_TABLE_TARGET: Final = 0.8
PARALLEL_TARGET: Final = 1.0

TABLE_DDL: Final = """
CREATE TABLE public.{name} (
    id bigint PRIMARY KEY, qty int, amount numeric(12, 2), at timestamptz, note text
);
INSERT INTO public.{name}
SELECT g, (g % 1000)::int, (g % 100000) / 100.0,
       '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 second',
       md5(g::text) || md5((g + 1)::text) || ' row ' || g
FROM generate_series(1, {rows}) g
"""


def _create_tables(dsn: str, names: list[str], rows: int) -> int:
    """Create and fill the tables; return their total size in bytes."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(TABLE_DDL.format(name=name, rows=rows).encode())
            conn.execute(f"VACUUM ANALYZE public.{name}".encode())
        row = conn.execute(
            "SELECT sum(pg_table_size(c.oid))::bigint FROM pg_class c WHERE relname = ANY(%s)",
            (names,),
        ).fetchone()
    return int(str(row[0])) if row is not None else 0


def _baseline(dsn: str, name: str, lake: Path) -> float:
    """ADBC (COPY binary into Arrow) + delta-rs ``write_deltalake``; seconds."""
    import adbc_driver_postgresql.dbapi as adbc  # type: ignore[import-untyped]
    from deltalake import write_deltalake

    started = time.monotonic()
    with adbc.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, qty, amount, at, note FROM public.{name}")
        write_deltalake(str(lake / name), cur.fetch_record_batch(), mode="overwrite")
    return time.monotonic() - started


def _config(dsn: str, workdir: Path, names: list[str], slot: str, parallelism: int) -> AppConfig:
    return parse_config(
        {
            "source": {
                "dsn": dsn,
                "slot": slot,
                "publication": slot,
                "tables": [f"public.{n}" for n in names],
            },
            "snapshot": {"mode": "initial", "parallelism": parallelism},
            "sink": {"path": str(workdir / f"lake-{slot}")},
            "spool": {"dir": str(workdir / "spool")},
            "metrics": {"enabled": False},
            "logging": {"format": "console", "level": "warning"},
        }
    )


def _wal2delta(dsn: str, spark: Any, config: AppConfig) -> float:
    """One daemon run: slot, snapshot, stream to the consistent point; seconds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    sink = DeltaSink(spark, sink_settings(config))
    started = time.monotonic()
    Supervisor(config, sink, endpos=Lsn(endpos)).run()
    return time.monotonic() - started


def _delta_rows(path: str) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(path).to_pyarrow_dataset().count_rows())


def _check(path: str, rows: int, who: str) -> None:
    found = _delta_rows(path)
    if found != rows:
        raise SystemExit(f"{who} wrote {found} rows to {path}, expected {rows}")


def main(argv: list[str] | None = None) -> int:
    """Run both comparisons and print the report."""
    parser = argparse.ArgumentParser(prog="python -m bench.snapshot", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the one table")
    parser.add_argument("--tables", type=int, default=4, help="tables of the parallel run")
    parser.add_argument("--parallelism", type=int, default=2, help="snapshot.parallelism")
    parser.add_argument("--repeat", type=int, default=1, help="runs per contender")
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep server and lakes here (default: tmp)")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-snapshot-"))
        )
        server = stack.enter_context(bench_server(workdir / "server"))
        dsn = server.dsn()
        size = _create_tables(dsn, ["big"], args.rows)
        per_table = max(1, args.rows // args.tables)
        parts = [f"part{i}" for i in range(args.tables)]
        _create_tables(dsn, parts, per_table)
        spark = create_spark_session(bench_spark_settings())
        stack.callback(stop_spark_session, spark)

        baseline_runs, daemon_runs, ranged_runs, single_runs, parallel_runs = [], [], [], [], []
        for run in range(args.repeat):
            seconds = _baseline(dsn, "big", workdir / f"adbc-{run}")
            _check(str(workdir / f"adbc-{run}" / "big"), args.rows, "ADBC + delta-rs")
            baseline_runs.append(args.rows / seconds)
            config = _config(dsn, workdir, ["big"], f"w2d_big_{run}", 1)
            seconds = _wal2delta(dsn, spark, config)
            _check(table_path(config.sink.path, "public", "big"), args.rows, "wal2delta")
            daemon_runs.append(args.rows / seconds)
            config = _config(dsn, workdir, ["big"], f"w2d_ranges_{run}", args.parallelism)
            seconds = _wal2delta(dsn, spark, config)
            _check(table_path(config.sink.path, "public", "big"), args.rows, "wal2delta")
            ranged_runs.append(args.rows / seconds)
            single_runs.append(
                _wal2delta(dsn, spark, _config(dsn, workdir, parts, f"w2d_one_{run}", 1))
            )
            parallel_runs.append(
                _wal2delta(
                    dsn,
                    spark,
                    _config(dsn, workdir, parts, f"w2d_par_{run}", args.parallelism),
                )
            )
    figures: list[Figure] = [
        median_figure("ADBC + delta-rs (one table)", baseline_runs, "rows/s"),
        median_figure("wal2delta snapshot (one table)", daemon_runs, "rows/s"),
        median_figure(
            f"wal2delta snapshot (one table, parallelism {args.parallelism}: page ranges)",
            ranged_runs,
            "rows/s",
        ),
        median_figure(f"wal2delta {args.tables} tables, parallelism 1", single_runs, "s"),
        median_figure(
            f"wal2delta {args.tables} tables, parallelism {args.parallelism}", parallel_runs, "s"
        ),
    ]
    ratios = [
        Ratio(
            "one table: wal2delta / ADBC + delta-rs",
            figures[1].value / figures[0].value,
            ONE_TABLE_TARGET,
        ),
        Ratio(
            f"one table, parallelism {args.parallelism}: wal2delta / ADBC + delta-rs",
            figures[2].value / figures[0].value,
            ONE_TABLE_TARGET,
        ),
        Ratio(
            f"{args.tables} tables: parallelism {args.parallelism} speed-up over 1",
            figures[3].value / figures[4].value,
            PARALLEL_TARGET,
        ),
    ]
    print_report(
        "initial snapshot",
        figures,
        ratios,
        facts={
            "rows": args.rows,
            "table size": f"{size / 1e6:.0f} MB",
            "tables x rows (parallel run)": f"{args.tables} x {per_table}",
        },
        as_json=args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
