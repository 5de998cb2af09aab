"""What a long Delta log costs each engine call, and what trimming it gives back (decision
0134).

Run: ``python -m bench.log_growth`` (``python -m bench logs``; ``--help`` for the knobs).
About two minutes with the defaults.

Method
------
1. Start the embedded engine as the daemon does (Sail, parallelism 1 on two cores).
2. Make a commit-log-shaped Delta table (nine columns) and append two rows to it
   ``--versions`` times through the engine, compacting it with delta-rs every 20 appends
   as the daemon's upkeep does: the log of a table the daemon has committed that often
   (a busy table and its commit log get several commits a second).
3. Time ``--repeat`` more appends (the commit log's intent, on every batch's way to its
   acknowledgement) on that log: the baseline.
4. Trim the log with the daemon's own ``trim_log`` (every commit counted old, the newest
   ``KEEP_VERSIONS`` kept as the daemon keeps them), and time as many appends again.
5. Print both medians, the log's files before and after, and the ratio trimmed /
   untrimmed: what an engine call pays for the log it lists.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from bench.report import Ratio, median_figure, print_report
from bench.settings import bench_spark_settings
from sink import create_spark_session, stop_spark_session
from sink.records.commits import COMMIT_COLUMNS
from sink.upkeep.logtrim import trim_log


def _rows(batch: int) -> pa.Table:
    now = datetime.now(UTC)
    values = {
        "batch": [batch, batch],
        "lsn": [batch, batch],
        "commit_time": [now, now],
        "table_name": ["public.t", None],
        "table_path": ["/lake/public/t", None],
        "version": [batch, None],
        "recorded_at": [now, now],
        "high_lsn": [None, batch],
        "timeline": [1, 1],
    }
    schema = pa.schema([(c.name, c.arrow) for c in COMMIT_COLUMNS])
    return pa.table(values, schema=schema)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m bench.log_growth", description=__doc__)
    parser.add_argument("--versions", type=int, default=2000, help="commits before timing")
    parser.add_argument("--repeat", type=int, default=25, help="appends timed per case")
    parser.add_argument("--json", action="store_true", help="also print a JSON line")
    args = parser.parse_args(argv)

    spark = create_spark_session(bench_spark_settings())
    schema = ", ".join(f"{c.name} {c.spark_sql}" for c in COMMIT_COLUMNS)
    try:
        with tempfile.TemporaryDirectory(prefix="w2d-bench-logs-") as workdir:
            path = str(Path(workdir) / "_wal2delta_commits")
            log_dir = Path(path) / "_delta_log"

            def append(batch: int) -> float:
                started = time.perf_counter()
                frame = spark.createDataFrame(_rows(batch), schema=schema)
                frame.write.format("delta").mode("append").save(path)
                return time.perf_counter() - started

            for batch in range(args.versions):
                append(batch)
                if batch % 20 == 19:
                    DeltaTable(path).optimize.compact()
            untrimmed_files = len(os.listdir(log_dir))
            untrimmed = [append(args.versions + n) for n in range(args.repeat)]
            deleted = trim_log(path, cutoff=datetime.now(UTC) + timedelta(days=1))
            trimmed_files = len(os.listdir(log_dir))
            trimmed = [append(args.versions + args.repeat + n) for n in range(args.repeat)]
    finally:
        stop_spark_session(spark)

    figures = [
        median_figure("append, untrimmed log", [s * 1000 for s in untrimmed], "ms"),
        median_figure("append, trimmed log", [s * 1000 for s in trimmed], "ms"),
    ]
    extra = statistics.median(untrimmed) - statistics.median(trimmed)
    per_file = extra / max(1, untrimmed_files - trimmed_files)
    print_report(
        "A long Delta log's cost per engine call, and trimming it (decision 0134)",
        figures,
        [Ratio("trimmed / untrimmed append", figures[1].value / figures[0].value)],
        facts={
            "versions before timing": f"{args.versions:,} (compacted every 20, as the daemon)",
            "log files": f"{untrimmed_files:,} untrimmed, {trimmed_files:,} trimmed "
            f"({len(deleted):,} deleted)",
            "per log file listed": f"{per_file * 1e6:.1f} us",
        },
        as_json=args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
